// Internals shared by the files of the RocksDB tier (rocksdb_tier.cc: puts, gets, eviction;
// rocksdb_tier_open.cc: options, open, damage, index rebuild, close; rocksdb_tier_upkeep.cc:
// flushes, capacity). Not a public header.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/listener.h>

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
  // Whether RocksDB's blob garbage collection runs in this family's background compactions now
  // (RocksDbTier::UpdateBackgroundGc; upkeep thread only).
  bool background_gc = false;
  bool background_gc_failed = false;  // SetOptions refused it once: left as it is (logged)
};

namespace rocksdb_tier {

// The meta record of an entry: last-use sequence (u64 LE), priority (u8), format (u8), 6 zeros.
inline constexpr std::size_t kMetaBytes = 16;
inline constexpr std::uint8_t kMetaFormat = 1;

// Capacity on disk: kvmesh's own puts stop when the on-disk size reaches `write_limit` of the
// capacity (the rest is room for RocksDB's compactions and blob garbage collection, which write
// before they delete); they resume below `resume`; the logical budget is `target` of the
// capacity over the learned space amplification. With the bundles in the SSTs, compactions of
// random keys rewrite whole levels and need more room.
struct CapacityFractions {
  double write_limit, resume, target;
};
// Blob files: 20% of room, not 10%: blob garbage collection runs inside compactions, which lag the
// puts on a busy machine (the on-disk peak reached 1.02 of the capacity at 0.9 under a parallel
// test run).
inline constexpr CapacityFractions kBlobFractions{0.8, 0.75, 0.7};
inline constexpr CapacityFractions kSstFractions{0.7, 0.65, 0.55};
inline const CapacityFractions& FractionsFor(const RocksDbTierOptions& o) {
  return o.enable_blob_files ? kBlobFractions : kSstFractions;
}
// Below this capacity RocksDB's fixed costs (memtable arenas, per-file indexes and footers, the
// MANIFEST) would be most of the bytes on disk: such a tier counts bundle bytes (its capacity is
// then the logical budget, with no on-disk write limit).
inline constexpr std::int64_t kMinOnDiskCapacity = 16ll << 20;

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

// Tells the tier of every completed flush (RocksDB's background threads): the tier records the
// largest flushed sequence number in KVMESH-STATE, which open compares with the database's.
class FlushListener final : public rocksdb::EventListener {
 public:
  explicit FlushListener(RocksDbTier* tier) : tier_(tier) {}
  void OnFlushCompleted(rocksdb::DB* /*db*/, const rocksdb::FlushJobInfo& info) override {
    tier_->OnFlushCompleted(info.largest_seqno);
  }

 private:
  RocksDbTier* tier_;
};

}  // namespace rocksdb_tier
}  // namespace kvmesh
