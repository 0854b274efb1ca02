// TieredReplay: the trace replay (pool/trace_replay.h) with a host tier and a RocksDB tier behind
// its pool, moving real bytes: the tiers' ReplayTierHooks.
//
// The replay's block manager is metadata-only; this object gives it pool memory indexed by its
// block ids (a PoolStorage of capacity_blocks blocks of a small model geometry) and an
// OffloadEngine as its eviction listener. So, for every request:
//   - evicted blocks (priority >= offload_min_priority, not already in a tier) are copied into the
//     host tier by the engine's workers (deferred eviction: the slot is not reused before the copy
//     is done); host victims spill into RocksDB on the spill thread;
//   - OnPoolMiss: the missed blocks' content ids are looked up in the host tier, then RocksDB; the
//     leading run found is restored (verified) into the sequence's fresh blocks and counted as
//     restored (ReplayResult::restored_blocks; hit_rate_with_tiers); the rest are "recomputed":
//     written with synthetic content derived from their content id (store/synthetic_block.h).
//     Every restored block is checked against the content its id gives (mismatched_blocks: there
//     must be none).
//
// Geometry (ReplayBlockGeometry): 1 layer, K and V, 1 KV head, tokens_per_block tokens, FP8 per
// tensor (1 byte per element, pool scale 1, no scale pool), head_dim = block_bytes / (2 ×
// tokens_per_block): 4 KiB per block at 512 tokens is head_dim 4. Small on purpose, so that a
// replay of a few hundred thousand blocks fits this machine while every tier still holds and moves
// the real bytes. Tier capacities are given in blocks and converted with the exact bundle size.
//
// Disk: the RocksDB tier lives in disk_path, or, when that is empty, in a fresh temporary
// directory that is removed at destruction unless keep_disk. A given disk_path is never removed.
// Its capacity is disk_blocks bundles of bytes on disk (store/rocksdb_tier.h, Capacity): it holds
// fewer blocks than that (RocksDB's space amplification), except below 16 MiB, where bundle bytes
// are counted. The durability mode is disk_durability (default flush).
//
// Thread safety: as a ReplayTierHooks — called from the replaying thread (OnPoolMiss) and under
// the manager's lock (the listener); stats() and Finish() from the replaying thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/thread_cpu.h"
#include "pool/pool_storage.h"
#include "pool/trace_replay.h"
#include "store/offload_engine.h"
#include "store/signal_flush.h"

namespace kvmesh {

struct TieredReplayOptions {
  std::int64_t capacity_blocks = 0;  // the replay's pool (ReplayConfig::capacity_blocks), >= 1
  std::int32_t tokens_per_block = kMooncakeBlockTokens;
  std::int64_t block_bytes = 4096;  // one block in the pool and the tiers (see Geometry)
  std::int64_t host_blocks = 0;     // host tier capacity in blocks; 0 = no host tier
  std::int64_t disk_blocks = 0;     // RocksDB tier capacity in blocks; 0 = no RocksDB tier
  std::string disk_path;            // empty: a temporary directory
  bool keep_disk = false;           // keep the temporary directory
  int copy_threads = 1;
  int offload_min_priority = kTierDefaultPriority;
  DiskDurability disk_durability = DiskDurability::kFlush;
  // The host tier's victim order (OffloadEngineOptions::host_eviction_policy); `kvctl replay`
  // passes its --policy.
  EvictionPolicyKind host_eviction_policy = EvictionPolicyKind::kPriorityLru;
};

// kInvalidArgument when block_bytes is not a positive multiple of 2 × tokens_per_block.
Result<KvPoolGeometry> ReplayBlockGeometry(std::int32_t tokens_per_block, std::int64_t block_bytes);

struct TieredReplayStats {
  KvPoolGeometry geometry;
  std::int64_t block_bytes = 0;   // pool bytes of one block
  std::int64_t bundle_bytes = 0;  // tier bytes of one block (header, payload, checksum)
  std::int64_t host_blocks = 0;   // capacities as configured
  std::int64_t disk_blocks = 0;
  std::string disk_path;  // empty without a RocksDB tier
  bool disk_kept = false;
  std::int64_t host_hit_blocks = 0;  // restored blocks by the tier they came from
  std::int64_t disk_hit_blocks = 0;
  std::int64_t recomputed_blocks = 0;  // missed blocks written fresh
  std::int64_t verified_blocks = 0;    // restored blocks checked against their content id
  std::int64_t mismatched_blocks = 0;  // of those, with wrong bytes (must be 0)
  // Where OnPoolMiss's time went (seconds): looking the blocks up in the tiers, restoring them,
  // checking them against their content ids, writing the missed ones ("recomputing").
  double lookup_s = 0;
  double onboard_s = 0;
  double check_s = 0;
  double recompute_s = 0;
  // Outside the replay's own time: creating the tiers (host memory, RocksDB open), then at the
  // end waiting for the copies still in flight (drain) and flushing RocksDB.
  double setup_s = 0;
  double drain_s = 0;
  double flush_s = 0;
  // CPU seconds by thread name from the start of Create to the end of Finish (the replaying
  // thread, the copy workers, the spill thread, RocksDB's flush and compaction threads), largest
  // first: where the run's CPU went.
  std::vector<std::pair<std::string, double>> thread_cpu_s;
  OffloadStats offload;
};

class TieredReplay final : public ReplayTierHooks {
 public:
  // kInvalidArgument: capacity_blocks < 1, a bad geometry, no tier at all; tier errors.
  static Result<std::unique_ptr<TieredReplay>> Create(const TieredReplayOptions& options);
  // Drains the engine, closes the tiers, removes a temporary disk directory unless keep_disk.
  // REQUIRES: the replay using these hooks is gone (its manager holds the listener).
  ~TieredReplay() override;

  std::int64_t OnPoolMiss(const ReplayMiss& miss) override;
  EvictionListener* eviction_listener() override { return engine_.get(); }

  // Waits for the copies in flight, then returns the figures.
  TieredReplayStats Finish();
  [[nodiscard]] TieredReplayStats stats() const;
  OffloadEngine& engine() { return *engine_; }
  [[nodiscard]] const KvPoolView& pool() const { return storage_.view(0); }

 private:
  TieredReplay() = default;

  TieredReplayOptions options_;
  std::string disk_dir_;  // where the RocksDB tier is
  bool remove_disk_dir_ = false;
  PoolStorage storage_;
  std::unique_ptr<OffloadEngine> engine_;
  TieredReplayStats counts_;  // geometry, sizes and the OnPoolMiss counters
  std::vector<ThreadCpu> cpu_at_create_;
};

struct TieredReplayResult {
  ReplayResult replay;
  TieredReplayStats tiers;
};

// Replays the trace with a fresh manager (config; capacity_blocks required) and fresh tiers
// (tiers.capacity_blocks and tokens_per_block are taken from config). With `signal_flush`, the
// RocksDB tier is registered with it while it is open (SIGTERM/SIGINT flush it, then exit).
Result<TieredReplayResult> ReplayTraceWithTiers(std::span<const TraceRequest> trace,
                                                const ReplayConfig& config,
                                                TieredReplayOptions tiers,
                                                SignalFlush* signal_flush = nullptr);

}  // namespace kvmesh
