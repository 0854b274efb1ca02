// The pool geometry, tier options and modes shared by the crash tests and their child process.
#pragma once

#include <string>
#include <string_view>

#include "store/rocksdb_tier.h"
#include "tests/store/store_test_util.h"

namespace kvmesh::store_test {

inline constexpr TierPoolId kCrashPool{3};
// Small enough that every cycle evicts (and deletes) hundreds of blocks.
inline constexpr std::int64_t kCrashCapacityBlocks = 768;

// 1 layer, K and V, 2 heads, 16 tokens, head_dim 64, bf16: 8 KiB blocks.
inline Shape CrashShape() {
  Shape s;
  s.name = "crash";
  s.geometry.dtype = KvDtype::kBF16;
  s.geometry.num_layers = 1;
  s.geometry.kv_factor = 2;
  s.geometry.num_kv_heads = 2;
  s.geometry.tokens_per_block = 16;
  s.geometry.head_dim = 64;
  return s;
}

// The durability settings a crash cycle runs with: "none", "flush", "wal", "walsync".
struct CrashMode {
  std::string name;
  DiskDurability durability = DiskDurability::kFlush;
  bool wal_sync = false;
};

inline CrashMode ParseCrashMode(std::string_view name) {
  if (name == "none") return {"none", DiskDurability::kNone, false};
  if (name == "wal") return {"wal", DiskDurability::kWal, false};
  if (name == "walsync") return {"walsync", DiskDurability::kWal, true};
  return {"flush", DiskDurability::kFlush, false};
}

// Small write buffers and frequent flushes, so that flushes and compactions run all the time and
// kills land in them; a capacity of kCrashCapacityBlocks bundles, so eviction deletes are always
// being written.
inline RocksDbTierOptions CrashTierOptions(const std::string& path, const CrashMode& mode) {
  RocksDbTierOptions o;
  o.path = path;
  o.pools = {{kCrashPool, LayoutOf(CrashShape().geometry), 1.0f}};
  auto codec = BundleCodec::Create(o.pools[0].layout, 1.0f);
  o.capacity_bytes = kCrashCapacityBlocks * codec->bundle_bytes();
  o.durability = mode.durability;
  o.wal_sync = mode.wal_sync;
  o.flush_after_ms = 30;
  o.flush_after_bytes = 1 << 20;
  o.write_buffer_bytes = 1 << 20;
  o.max_write_buffer_number = 2;
  return o;
}

}  // namespace kvmesh::store_test
