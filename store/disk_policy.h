// The RocksDB tier's durability and damage policies and their names (store/rocksdb_tier.h has
// what each promises). Header-only and free of RocksDB, so that a configuration reader (kvnode's,
// node/node_config.h) can parse and print them without linking the tier.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"
#include "common/strings.h"

namespace kvmesh {

// The smallest memtable of a bundle family (RocksDbTierOptions::write_buffer_bytes).
inline constexpr std::int64_t kMinDiskWriteBuffer = 256 << 10;

enum class DiskDurability : std::uint8_t { kNone = 0, kFlush = 1, kWal = 2 };
enum class DiskDamagePolicy : std::uint8_t { kMoveAside = 0, kStayOff = 1 };

// "none", "flush", "wal" (the names a config file uses).
inline std::string_view DiskDurabilityName(DiskDurability d) {
  switch (d) {
    case DiskDurability::kNone: return "none";
    case DiskDurability::kFlush: return "flush";
    case DiskDurability::kWal: return "wal";
  }
  return "unknown";
}

inline Result<DiskDurability> ParseDiskDurability(std::string_view name) {
  for (auto d : {DiskDurability::kNone, DiskDurability::kFlush, DiskDurability::kWal}) {
    if (name == DiskDurabilityName(d)) return d;
  }
  return Status::InvalidArgument(StrCat("durability '", name, "': use none, flush or wal"));
}

// "move_aside", "stay_off".
inline std::string_view DiskDamagePolicyName(DiskDamagePolicy p) {
  return p == DiskDamagePolicy::kMoveAside ? "move_aside" : "stay_off";
}

inline Result<DiskDamagePolicy> ParseDiskDamagePolicy(std::string_view name) {
  for (auto p : {DiskDamagePolicy::kMoveAside, DiskDamagePolicy::kStayOff}) {
    if (name == DiskDamagePolicyName(p)) return p;
  }
  return Status::InvalidArgument(StrCat("on_damage '", name, "': use move_aside or stay_off"));
}

}  // namespace kvmesh
