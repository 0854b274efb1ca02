// Tier: what the host tier and the RocksDB tier have in common — a content-addressed store of
// complete blocks (block bundles, store/block_bundle.h), keyed by (pool, content id).
//
// A tier holds blocks of one or more pools, each pool with a fixed geometry given when the tier is
// created. Put encodes one block of a pool view (every component, the pool scale and a checksum)
// into the tier; Get verifies the stored bundle against the content id and the pool's geometry and
// only then writes the block into a pool view. A stored block that fails verification is erased,
// counted (TierStats::corrupt) and reported as kCorruption, which a caller treats as a miss: a tier
// never yields data that did not verify.
//
// Priorities are those of the block manager: 0–100, default 35; a tier evicts all blocks of the
// lowest priority before any of the next one and, within a priority, the least recently used first.
//
// Thread safety: implementations are thread-safe.
#pragma once

#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/content_id.h"
#include "common/status.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

// The pool a block belongs to, as the tiers name it: the pool's index in the node's pool plan
// (PoolId::value of pool/pool_plan.h). Its own small type so that store/ does not depend on the
// plan; the offload machinery converts where pool and store meet.
struct TierPoolId {
  std::int32_t value = 0;
  // clang-tidy 14 reads the defaulted <=> as a comparison with literal 0.
  // NOLINTNEXTLINE(modernize-use-nullptr)
  friend auto operator<=>(const TierPoolId&, const TierPoolId&) = default;
};

inline constexpr int kTierMinPriority = 0;
inline constexpr int kTierMaxPriority = 100;
inline constexpr int kTierDefaultPriority = 35;

// Where a tier's time goes, summed over calls and threads (seconds).
struct TierStageTimes {
  double index_s = 0;   // index and eviction bookkeeping: locks, maps, eviction lists
  double read_s = 0;    // RocksDB reads (Get, MultiGet)
  double decode_s = 0;  // verify + copy into the pool block (one pass)
  double encode_s = 0;  // bundle encode: the checksum (and, host tier, the copy into the slot)
  double write_s = 0;   // RocksDB writes; host tier: handing an evicted bundle to the tier below
  friend TierStageTimes operator-(const TierStageTimes& a, const TierStageTimes& b) {
    return {a.index_s - b.index_s, a.read_s - b.read_s, a.decode_s - b.decode_s,
            a.encode_s - b.encode_s, a.write_s - b.write_s};
  }
};

// Counters of one tier. Monotonic counts since the tier was created or opened, plus the current
// occupancy.
struct TierStats {
  std::int64_t puts = 0;         // blocks stored
  std::int64_t put_bytes = 0;    // bundle bytes stored
  std::int64_t put_present = 0;  // puts of a block already held (not copied again)
  std::int64_t hits = 0;         // gets that returned a verified block
  std::int64_t hit_bytes = 0;    // bundle bytes of those
  std::int64_t misses = 0;       // gets of a block not held (corrupt ones not included)
  std::int64_t corrupt = 0;      // stored blocks that failed verification, erased
  std::int64_t evictions = 0;    // blocks evicted for capacity
  std::int64_t eviction_bytes = 0;
  std::int64_t spills = 0;          // evicted blocks handed to the eviction sink (host tier)
  std::int64_t spill_failures = 0;  // evicted blocks the sink refused
  std::int64_t erases = 0;          // blocks erased on request
  std::int64_t io_errors = 0;       // environment failures (RocksDB tier)
  std::int64_t entries = 0;         // blocks held now
  std::int64_t used_bytes = 0;      // bundle bytes held now
  std::int64_t capacity_bytes = 0;
  bool disabled = false;  // RocksDB tier after an I/O error
  // RocksDB tier only (zero or empty for the host tier):
  std::int64_t durable_entries = 0;  // of `entries`, those a crash keeps by the durability promise
  std::int64_t disk_bytes = 0;       // bytes of the tier's files on disk (SST and blob files)
  std::int64_t over_capacity = 0;    // puts refused: on-disk bytes at capacity (compaction behind)
  std::int64_t flushes = 0;          // completed flushes that made puts durable
  std::string disabled_reason;       // the error that disabled the tier (empty while enabled)
  std::string damage;                // damage found at open and what was done about it
  TierStageTimes stages;
};

// The counting side of TierStats, for the tiers' implementations: updated with relaxed atomics on
// the data path, read as a snapshot (fields are read one by one, not as one consistent cut).
struct TierCounters {
  std::atomic<std::int64_t> puts{0}, put_bytes{0}, put_present{0}, hits{0}, hit_bytes{0}, misses{0},
      corrupt{0}, evictions{0}, eviction_bytes{0}, spills{0}, spill_failures{0}, erases{0},
      io_errors{0}, entries{0}, used_bytes{0}, over_capacity{0}, flushes{0};
  // Stage times in nanoseconds (TierStageTimes).
  std::atomic<std::int64_t> index_ns{0}, read_ns{0}, decode_ns{0}, encode_ns{0}, write_ns{0};

  // Every count; capacity_bytes, disabled and the RocksDB tier's state are the tier's to fill.
  [[nodiscard]] TierStats Snapshot() const {
    const auto ld = [](const std::atomic<std::int64_t>& a) {
      return a.load(std::memory_order_relaxed);
    };
    TierStats s;
    s.puts = ld(puts);
    s.put_bytes = ld(put_bytes);
    s.put_present = ld(put_present);
    s.hits = ld(hits);
    s.hit_bytes = ld(hit_bytes);
    s.misses = ld(misses);
    s.corrupt = ld(corrupt);
    s.evictions = ld(evictions);
    s.eviction_bytes = ld(eviction_bytes);
    s.spills = ld(spills);
    s.spill_failures = ld(spill_failures);
    s.erases = ld(erases);
    s.io_errors = ld(io_errors);
    s.entries = ld(entries);
    s.used_bytes = ld(used_bytes);
    s.over_capacity = ld(over_capacity);
    s.flushes = ld(flushes);
    s.stages.index_s = static_cast<double>(ld(index_ns)) * 1e-9;
    s.stages.read_s = static_cast<double>(ld(read_ns)) * 1e-9;
    s.stages.decode_s = static_cast<double>(ld(decode_ns)) * 1e-9;
    s.stages.encode_s = static_cast<double>(ld(encode_ns)) * 1e-9;
    s.stages.write_s = static_cast<double>(ld(write_ns)) * 1e-9;
    return s;
  }
};

// A block leaving a tier through eviction, handed to the tier below (host → RocksDB). `bundle`
// is valid only for the duration of the call.
struct EvictedBundle {
  TierPoolId pool;
  ContentId id;
  int priority = kTierDefaultPriority;
  std::span<const std::byte> bundle;
  std::uint64_t last_use = 0;  // HostTier::ForEachBlock: the host tier's use stamp; else 0
};

class BlockTier {
 public:
  virtual ~BlockTier() = default;

  // "host", "rocksdb".
  [[nodiscard]] virtual std::string_view name() const = 0;

  // Stores block `block` of `src` under (pool, id). OK also when the block is already held (it is
  // not copied again; its priority and recency are updated). kInvalidArgument: unknown pool, a
  // view whose layout or pool scale differs from the pool's, a block out of range, a priority
  // outside [0, 100]. kResourceExhausted: nothing can be evicted to make room.
  // REQUIRES: no one writes the source block during the call.
  [[nodiscard]] virtual Status Put(TierPoolId pool, const ContentId& id, const KvPoolView& src,
                                   std::int64_t block, int priority) = 0;

  // Stores an already encoded bundle (a spill from the tier above). The bundle is verified first:
  // kCorruption when it does not verify (nothing is stored). Otherwise as Put.
  [[nodiscard]] virtual Status PutBundle(TierPoolId pool, const ContentId& id,
                                         std::span<const std::byte> bundle, int priority) = 0;

  // Verifies the stored block and writes it into block `block` of `dst`. kNotFound: a miss.
  // kCorruption: the stored block failed verification and was erased (also a miss). On any error
  // the destination block is untouched. kInvalidArgument as for Put.
  // REQUIRES: no one reads or writes the destination block during the call.
  [[nodiscard]] virtual Status Get(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                                   std::int64_t block) = 0;

  // As Get, into a restore destination — a block nobody reads before the caller publishes it —
  // verified in the same pass as the copy (BundleCodec::DecodeOnePass). On kCorruption (a miss,
  // the entry erased and counted, as for Get) the destination holds unspecified bytes: the
  // caller must not publish it. On other errors it is untouched.
  // REQUIRES: as DecodeOnePass (hidden, reserved destination).
  [[nodiscard]] virtual Status GetForRestore(TierPoolId pool, const ContentId& id,
                                             const KvPoolView& dst, std::int64_t block) = 0;

  // Whether a complete block is held (a block still being written is not). Not verified.
  virtual bool Contains(TierPoolId pool, const ContentId& id) = 0;

  // Removes the block. kNotFound when it was not held.
  [[nodiscard]] virtual Status Erase(TierPoolId pool, const ContentId& id) = 0;

  // The ids of the complete blocks of `pool` held now (blocks being written are not listed), in no
  // order; nothing is read or verified and no block's use order changes (the cluster directory's
  // resynchronisation, node/prefix_directory.h). Empty for an unknown pool.
  [[nodiscard]] virtual std::vector<ContentId> ReadyIds(TierPoolId pool) = 0;

  [[nodiscard]] virtual TierStats stats() const = 0;
};

}  // namespace kvmesh
