// TieredCache: the block manager's sequence API with the tiers behind it — a prefix that misses
// the pool goes on into the host tier and then RocksDB, found blocks are restored into the pool
// and reused; evicted blocks are offloaded down the tiers (OffloadEngine, offload_engine.h).
//
// Ownership: owns the BlockManager (created with the engine as its eviction listener) and the
// OffloadEngine (and so the tiers). The pool memory (options.env.pool_memory, e.g. PoolStorage
// views) is the caller's and must outlive the cache.
//
// Device pools (options.offload.device_pools set: env.pool_memory is device memory): the engine
// stages every copy through host memory (offload_engine.h), and, unless the caller set
// env.block_copy, the manager's copy-on-partial-reuse runs on the pool's device through the
// engine (OffloadEngine::CopyPoolBlocks) instead of cpu::BlockCopy. Nothing here reads pool bytes.
// Other calls of the sequence API (AppendTokens, StoreFullBlocks, RemoveSequence, pins, events,
// statistics) go to manager().
//
// Admission with the tiers, AddSequence(request, prompt, options):
//   1. PlanRestore: content ids of the prompt's reusable full blocks, and how many the tree holds;
//   2. candidates being restored by a Prefetch are waited for (then planned again);
//   3. CountHeld: how many candidates, from the first on, a tier holds;
//   4. ReserveRestore: that many blocks per pool, private and pinned, in no tree (hidden);
//   5. OffloadEngine::Onboard: copies on the workers, each block verified (a missing or corrupt
//      block ends the run: a miss, counted; the engine recomputes from there);
//   6. PublishRestore(keep_pinned): the restored blocks enter the tree, pinned;
//   7. BlockManager::AddSequence: reuses them like any cached block (reused_tokens counts them);
//      then the restore's pins are dropped (the sequence holds its own).
// So a block is never visible in the pool before its copy completed, and a block being copied is
// pinned (offload: its MoveOutTicket; onboard: the reservation).
//
// Prefetch(prompt, options) runs steps 1, 3, 4 and starts 5 without waiting; a publisher thread
// publishes when the copies are done (unpinned: the blocks are then cached at their priorities).
// An AddSequence of the same prefix meanwhile waits for it (step 2) and finds the blocks cached.
//
// Statistics (TieredCacheStats): per admitted prompt, every block position counts once as a pool
// hit, a host hit, a disk hit (reused blocks, by where they came from — prefetched blocks by the
// tier they were prefetched from) or a miss (recomputed, partial blocks included); plus the
// engine's copy traffic, rates, skips and corrupt reads and the tiers' counters.
//
// Threads and locks: AddSequence and Prefetch run in the caller's thread and never hold the
// manager's lock while waiting for copies; copy workers never take the manager's lock; the one
// publisher thread takes it (no one holding it waits for the publisher).
//
// Thread safety: thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"
#include "common/thread_pool.h"
#include "pool/block_manager.h"
#include "store/offload_engine.h"

namespace kvmesh {

struct TieredCacheOptions {
  BlockManagerConfig manager;
  // pool_memory: required (the primary pools); eviction_listener: must be null (the engine is);
  // block_copy: filled with the engine's device copy when offload.device_pools is set and it is
  // empty.
  BlockManagerEnv env;
  // The tiers and copies; `pools` is filled from env.pool_memory.
  OffloadEngineOptions offload;
};

struct TieredCacheStats {
  std::int64_t admissions = 0;    // AddSequence calls that admitted
  std::int64_t input_blocks = 0;  // block positions of their prompts (a partial one counts)
  std::int64_t pool_hit_blocks = 0;
  std::int64_t host_hit_blocks = 0;
  std::int64_t disk_hit_blocks = 0;
  std::int64_t remote_hit_blocks =
      0;                           // blocks a peer sent that their admission reused (MarkRemote)
  std::int64_t missed_blocks = 0;  // input - hits
  std::int64_t restore_duplicates = 0;  // restored blocks another sequence stored first
  std::int64_t prefetches = 0;          // Prefetch calls that started a restore
  std::int64_t prefetched_blocks = 0;   // blocks they published
  std::int64_t prefetch_waits = 0;      // admissions that waited for a prefetch
  OffloadStats offload;

  [[nodiscard]] std::int64_t hit_blocks() const {
    return pool_hit_blocks + host_hit_blocks + disk_hit_blocks + remote_hit_blocks;
  }
  [[nodiscard]] double hit_rate() const {
    return input_blocks == 0
               ? 0.0
               : static_cast<double>(hit_blocks()) / static_cast<double>(input_blocks);
  }
};

// Where one admission's block positions came from (the per-admission share of TieredCacheStats).
struct AdmissionHits {
  std::int64_t pool_blocks = 0;
  std::int64_t host_blocks = 0;
  std::int64_t disk_blocks = 0;
  std::int64_t remote_blocks = 0;
  std::int64_t missed_blocks = 0;
};

class TieredCache {
 public:
  // kInvalidArgument: no pool memory, an eviction listener given; errors of BlockManager::Create
  // and OffloadEngine::Create.
  static Result<std::unique_ptr<TieredCache>> Create(TieredCacheOptions options);
  // Waits for prefetches and copies, then destroys the manager, then the engine (tiers flushed).
  // REQUIRES: no PinnedBlocks of the manager outstanding (as for BlockManager).
  ~TieredCache();
  TieredCache(const TieredCache&) = delete;
  TieredCache& operator=(const TieredCache&) = delete;

  BlockManager& manager() { return *manager_; }
  OffloadEngine& engine() { return *engine_; }

  // BlockManager::AddSequence after restoring what the tiers hold of the prompt (see above).
  // Errors: those of AddSequence (nothing restored stays pinned).
  // `hits`, when given, receives where this admission's block positions came from.
  Result<AddSequenceResult> AddSequence(RequestId request, std::span<const Token> prompt,
                                        const SequenceOptions& options = {},
                                        AdmissionHits* hits = nullptr) KVMESH_EXCLUDES(mu_);
  // Starts restoring the prompt's blocks that a tier holds; returns how many are being restored
  // (0: nothing to do, or a prefetch of them is already running). kInvalidArgument as AddSequence.
  Result<std::int64_t> Prefetch(std::span<const Token> prompt, const SequenceOptions& options = {})
      KVMESH_EXCLUDES(mu_);
  // BlockManager::PlanRestore, made again when a prefetch finished while it was made (what it
  // published may be missing from the plan). For restores outside the cache (remote fetch,
  // handoff), which reserve themselves and plan again on kFailedPrecondition.
  Result<RestorePlan> PlanRestore(std::span<const Token> prompt,
                                  const SequenceOptions& options = {}) KVMESH_EXCLUDES(mu_);
  // Waits until every prefetch started so far is published.
  void WaitForPrefetches() KVMESH_EXCLUDES(mu_);
  // Blocks a remote fetch published into the pool for an admission (node/remote_fetch.h): the
  // admission that reuses them counts them as remote hits, not pool hits, in the same count as the
  // rest (one lock: the counters never move between tiers).
  void MarkRemote(std::span<const ContentId> ids) KVMESH_EXCLUDES(mu_);

  [[nodiscard]] TieredCacheStats stats() const KVMESH_EXCLUDES(mu_);

  // Called after each restore plan is made (an admission's, a prefetch's, PlanRestore's) and before
  // it is checked against the prefetches, on the planning thread (tests: to change the tree or
  // finish a prefetch in that window).
  void SetAfterPlanForTesting(std::function<void()> f) KVMESH_EXCLUDES(mu_);

 private:
  struct Inflight;

  TieredCache() = default;
  // A restore plan made when no prefetch finished during the planning, and the prefetches in
  // flight for its candidates.
  struct CheckedPlan {
    RestorePlan plan;
    std::vector<std::shared_ptr<Inflight>> prefetching;
    bool first_prefetching = false;  // the first candidate is among them
  };
  Result<CheckedPlan> PlanAgainstPrefetches(std::span<const Token> prompt,
                                            const SequenceOptions& options) KVMESH_EXCLUDES(mu_);
  // Plans; waits for prefetches of the candidates (then plans again).
  Result<RestorePlan> PlanAfterPrefetches(std::span<const Token> prompt,
                                          const SequenceOptions& options) KVMESH_EXCLUDES(mu_);
  // Records which tier each restored block came from, for the admission that reuses it.
  void RememberSources(std::span<const ContentId> ids, std::span<const KvTier> sources)
      KVMESH_EXCLUDES(mu_);
  AdmissionHits CountAdmission(const RestorePlan& plan, const AddSequenceResult& result,
                               std::int64_t num_positions) KVMESH_EXCLUDES(mu_);

  // Destroyed in reverse: the publisher first, then the manager (it waits for move-out tickets
  // the engine's workers hold), then the engine.
  std::unique_ptr<OffloadEngine> engine_;
  std::unique_ptr<BlockManager> manager_;
  std::unique_ptr<ThreadPool> publisher_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  // Content ids of blocks a prefetch is restoring.
  std::unordered_map<ContentId, std::shared_ptr<Inflight>, ContentIdHash> inflight_
      KVMESH_GUARDED_BY(mu_);
  std::int64_t prefetches_running_ KVMESH_GUARDED_BY(mu_) = 0;
  std::int64_t prefetches_finished_ KVMESH_GUARDED_BY(mu_) = 0;  // published or failed
  std::function<void()> after_plan_for_testing_ KVMESH_GUARDED_BY(mu_);
  // Where a restored block not yet reused came from, for the admission that reuses it (bounded).
  enum class HitSource : std::uint8_t { kHost, kDisk, kRemote };
  std::unordered_map<ContentId, HitSource, ContentIdHash> sources_ KVMESH_GUARDED_BY(mu_);
  TieredCacheStats counts_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
