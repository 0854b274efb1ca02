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

// The meta record of an entry (key: its content id):
//   format 2 (24 bytes): last-use sequence (u64 LE), priority (u8), 2 (u8), 6 zeros, the bundle's
//                        data key (u64 LE, >= 1: the sequence its put took)
//   format 1 (16 bytes): the same without the data key; the bundle is keyed by the content id.
// Puts write format 2; format 1 records (tiers written before 2026-12) are read, and kept as
// format 1 when their recency is persisted, until the block leaves the tier.
inline constexpr std::size_t kMetaBytesV1 = 16;
inline constexpr std::size_t kMetaBytes = 24;
inline constexpr std::uint8_t kMetaFormatV1 = 1;
inline constexpr std::uint8_t kMetaFormat = 2;

// The key of a bundle in its pool's data family. Format 2: the entry's data key, 8 bytes
// big-endian, so that puts, numbered in the order they reserve, append to the memtable and to the
// files in key order (a skip list insert at its end, non-overlapping level-0 files) where random
// content ids land anywhere. Format 1 (data key 0): the content id. The slice points into this
// object.
class DataKey {
 public:
  DataKey(std::uint64_t data_key, const ContentId& id) {
    if (data_key == 0) {
      std::memcpy(bytes_.data(), id.bytes.data(), ContentId::kBytes);
      size_ = ContentId::kBytes;
      return;
    }
    for (int i = 0; i < 8; ++i) bytes_[i] = static_cast<char>(data_key >> (56 - 8 * i));
    size_ = 8;
  }
  [[nodiscard]] rocksdb::Slice slice() const { return {bytes_.data(), size_}; }

 private:
  std::array<char, ContentId::kBytes> bytes_{};
  std::size_t size_ = 0;
};

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

// A meta record: format 2 with its data key, format 1 for an entry keyed by its content id.
struct MetaRecord {
  std::array<char, kMetaBytes> bytes{};
  std::size_t size = 0;
  [[nodiscard]] rocksdb::Slice slice() const { return {bytes.data(), size}; }
};
inline MetaRecord EncodeMeta(std::uint64_t seq, int priority, std::uint64_t data_key) {
  MetaRecord out;
  std::memcpy(out.bytes.data(), &seq, sizeof(seq));
  out.bytes[8] = static_cast<char>(priority);
  out.bytes[9] = static_cast<char>(data_key == 0 ? kMetaFormatV1 : kMetaFormat);
  if (data_key != 0) std::memcpy(out.bytes.data() + 16, &data_key, sizeof(data_key));
  out.size = data_key == 0 ? kMetaBytesV1 : kMetaBytes;
  return out;
}

// A meta record read back: false when it is malformed (size, format, priority, a zero data key).
struct DecodedMeta {
  std::uint64_t seq = 0;
  int priority = 0;
  std::uint64_t data_key = 0;  // 0: format 1
};
inline bool DecodeMeta(rocksdb::Slice v, int max_priority, DecodedMeta* out) {
  if (v.size() != kMetaBytes && v.size() != kMetaBytesV1) return false;
  const auto format = static_cast<std::uint8_t>(v[9]);
  if (format != (v.size() == kMetaBytes ? kMetaFormat : kMetaFormatV1)) return false;
  out->priority = static_cast<std::uint8_t>(v[8]);
  if (out->priority > max_priority) return false;
  std::memcpy(&out->seq, v.data(), sizeof(out->seq));
  out->data_key = 0;
  if (v.size() == kMetaBytes) {
    std::memcpy(&out->data_key, v.data() + 16, sizeof(out->data_key));
    if (out->data_key == 0) return false;
  }
  return true;
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
