// Internals shared by the two files of the RocksDB tier (rocksdb_tier.cc: puts, gets, eviction;
// rocksdb_tier_open.cc: options, open, index rebuild, close). Not a public header.
#pragma once

#include <rocksdb/db.h>

#include <array>
#include <cstring>
#include <string>

#include "store/rocksdb_tier.h"

namespace kvmesh {

struct RocksDbTier::PoolFamilies {
  PoolFamilies(RocksDbTierPool config, BundleCodec codec)
      : config(config), codec(std::move(codec)) {}
  const RocksDbTierPool config;
  const BundleCodec codec;
  rocksdb::ColumnFamilyHandle* data = nullptr;
  rocksdb::ColumnFamilyHandle* meta = nullptr;
};

namespace rocksdb_tier {

// The meta record of an entry: last-use sequence (u64 LE), priority (u8), format (u8), 6 zeros.
inline constexpr std::size_t kMetaBytes = 16;
inline constexpr std::uint8_t kMetaFormat = 1;

inline std::array<char, kMetaBytes> EncodeMeta(std::uint64_t seq, int priority) {
  std::array<char, kMetaBytes> out{};
  std::memcpy(out.data(), &seq, sizeof(seq));
  out[8] = static_cast<char>(priority);
  out[9] = static_cast<char>(kMetaFormat);
  return out;
}

inline rocksdb::Slice KeySlice(const ContentId& id) {
  return {reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size()};
}

}  // namespace rocksdb_tier
}  // namespace kvmesh
