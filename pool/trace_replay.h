// Trace replay: drives a metadata-only BlockManager with a request trace (pool/trace.h) and
// measures how much of it the prefix cache would have served.
//
// The model. Each hash id of a request is one block (tokens_per_block tokens synthesised from the
// id by BlockTokens), so the trace's ids are the reuse units: a request reuses the longest prefix
// of its ids that is cached — all of them may match — and
//
//   hit rate = reused blocks / input blocks     (over every request; input blocks = all ids)
//
// For each request, in trace order and one at a time (no overlap between requests):
//   1. AddSequence(all its blocks, reuse_last_token = true, no partial reuse): matches and pins
//      the cached prefix, allocates the rest (evicting as the policy says);
//   2. tier hooks, when given: OnPoolMiss (see below);
//   3. StoreFullBlocks: every block of the request becomes cached;
//   4. RemoveSequence: the blocks stay cached, evictable, stamped root to leaf.
// Output tokens are not replayed: the trace has no ids for them, and the published figures of the
// Mooncake traces are over input blocks only (an answer that a later turn resends appears there as
// input ids). A request with more blocks than the capacity cannot be admitted: it is counted in
// rejected_requests and its blocks as input blocks that were not reused. A request without ids
// counts as a request and nothing else.
//
// Capacity: capacity_blocks blocks in one full-attention pool, or unlimited (nullopt) — a
// metadata-only manager with kUnlimitedBlocks that never evicts.
//
// Policies (EvictionPolicyKind; every one evicts the tree's leaves only: a parent never goes
// before its children):
//   learned       (the default, learned_policy.h) within a priority, the block least likely to be
//                 reused by what the manager has observed (reuse counts, leaves, depth) combined
//                 with recency. The replay gives it no retention ranges: it infers on its own.
//   lru           least recently used first.
//   priority-lru  the same order within a priority, lowest priority first, with two retention
//                 ranges per request (ReplayPriorities):
//                   - the partial last block (input_length < ids * trace_block_tokens) at
//                     tail_priority (default 10, below the default 35): the next turn of a
//                     conversation resends that block completed, under another id, so it is
//                     (almost) never reused and should go first;
//                   - the first system_prompt_blocks blocks (default 1) at
//                     system_prompt_priority (default 60): the shared system prompt.
//                 Other blocks get the default priority 35 (a reused block keeps its priority).
//                 A one-block request whose block is partial takes the tail priority.
//                 These ranges stand for what an engine would send; being decided by position,
//                 they can hurt (docs/kvctl.md, "Eviction").
//   optimal       (ReplayConfig::optimal) the offline optimum, optimal_replay.h: no block
//                 manager; ReplayTrace only (TraceReplay::Create refuses it), no tier hooks.
//
// Extension point for the tiers (ReplayTierHooks): with hooks, after each admission the driver
// computes the content ids of the blocks the pool did not have (block_key.h; the manager's own
// ids) and asks OnPoolMiss how many of them, from the first on, the lower tiers can restore;
// those count as restored_blocks instead of recomputed ones (they are still allocated and stored
// in the pool, as a restore would). The hooks' eviction listener, when given, is the manager's
// EvictionListener (called for every evicted block, under the manager's lock). Without hooks
// the replay is pool-only and computes no content ids of its own. OnPoolMiss also gets the pool
// block ids of the missed blocks (the sequence's fresh blocks, pinned and not yet stored: a
// restore writes into them before step 3 publishes them), so hooks with pool memory indexed by
// block id can move real bytes (store/tiered_replay.h); hit_rate_with_tiers() counts reused and
// restored blocks.
//
// Thread safety: a TraceReplay is externally synchronised (its manager is thread-safe, the
// counters are not). ReplayTrace is thread-safe for distinct configs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "pool/block_manager.h"
#include "pool/trace.h"

namespace kvmesh {

struct ReplayPriorities {
  std::int32_t system_prompt_blocks = 1;
  int system_prompt_priority = 60;
  int tail_priority = 10;
  // Tokens per id in the trace: decides whether a request's last block is partial.
  std::int32_t trace_block_tokens = kMooncakeBlockTokens;
};

struct ReplayProgress {
  std::int64_t requests_done = 0;
  std::int64_t requests_total = 0;
  std::int64_t input_blocks = 0;
  std::int64_t reused_blocks = 0;
  double elapsed_s = 0;
};

// A request's blocks the pool did not have.
struct ReplayMiss {
  std::int64_t request_index = 0;
  const TraceRequest* request = nullptr;
  std::int64_t pool_hit_blocks = 0;  // blocks [0, pool_hit_blocks) came from the pool
  // Content ids of blocks [pool_hit_blocks, n), in order (the ids the manager stores them under).
  std::span<const ContentId> missed;
  // The pool block ids the sequence holds for those blocks (its fresh, private blocks, parallel to
  // `missed`): where restored bytes go. Ids of the replay's one pool, in [0, capacity_blocks).
  std::span<const std::int32_t> missed_blocks;
};

// Implemented by the tiers (host DRAM, RocksDB) to take part in a replay. Called from the
// replaying thread; OnPoolMiss without the manager's lock, the listener with it.
class ReplayTierHooks {
 public:
  virtual ~ReplayTierHooks() = default;
  // How many of miss.missed, from the first on, the tiers restore: 0 .. miss.missed.size().
  // Called once per admitted request with at least one missed block.
  virtual std::int64_t OnPoolMiss(const ReplayMiss& miss) = 0;
  // Attached to the manager (offload of evicted blocks); null = none. Must outlive the replay.
  virtual EvictionListener* eviction_listener() { return nullptr; }
};

struct ReplayConfig {
  std::int32_t tokens_per_block = kMooncakeBlockTokens;  // a power of two > 1
  std::optional<std::int64_t> capacity_blocks;           // nullopt = unlimited; else >= 1
  EvictionPolicyKind policy = kDefaultEvictionPolicy;
  bool optimal = false;         // the offline optimum instead of `policy`
  ReplayPriorities priorities;  // priority-lru only
  ReplayTierHooks* tier_hooks = nullptr;
  // Called every progress_interval requests and after the last one; may be empty.
  std::function<void(const ReplayProgress&)> progress;
  std::int64_t progress_interval = 256;

  // kInvalidArgument naming the field (tokens_per_block, capacity_blocks, priorities,
  // progress_interval, tier hooks with optimal).
  Status Validate() const;
};

// Sets config->policy, or config->optimal for "optimal" (names: EvictionPolicyName, and
// "optimal"; case-insensitive). kInvalidArgument naming the choices otherwise.
Status SetReplayPolicy(std::string_view name, ReplayConfig* config);

struct ReplayResult {
  EvictionPolicyKind policy = kDefaultEvictionPolicy;
  bool optimal = false;                         // the offline optimum (policy is then meaningless)
  std::optional<std::int64_t> capacity_blocks;  // nullopt = unlimited
  std::int32_t tokens_per_block = 0;
  ReplayPriorities priorities;  // as configured (in effect with priority-lru only)
  std::int64_t requests = 0;
  std::int64_t rejected_requests = 0;  // more blocks than the capacity
  std::int64_t input_blocks = 0;
  std::int64_t reused_blocks = 0;    // from the pool
  std::int64_t restored_blocks = 0;  // from the tiers (tier hooks)
  std::int64_t evicted_blocks = 0;
  std::int64_t cached_blocks = 0;  // at the end
  double wall_s = 0;
  BlockManagerStats stats;  // the manager's, at the end (per-priority cached blocks, ...)

  [[nodiscard]] double hit_rate() const {
    return input_blocks == 0
               ? 0.0
               : static_cast<double>(reused_blocks) / static_cast<double>(input_blocks);
  }
  // Reused from the pool or restored from the tiers, over input blocks.
  [[nodiscard]] double hit_rate_with_tiers() const {
    return input_blocks == 0 ? 0.0
                             : static_cast<double>(reused_blocks + restored_blocks) /
                                   static_cast<double>(input_blocks);
  }
  [[nodiscard]] double requests_per_s() const {
    return wall_s > 0 ? static_cast<double>(requests) / wall_s : 0.0;
  }
  // "optimal" or the policy's name.
  [[nodiscard]] std::string_view policy_name() const {
    return optimal ? std::string_view("optimal") : EvictionPolicyName(policy);
  }
};

// A replay in progress: one request at a time, results at any point.
class TraceReplay {
 public:
  static Result<std::unique_ptr<TraceReplay>> Create(ReplayConfig config);
  ~TraceReplay();
  TraceReplay(const TraceReplay&) = delete;
  TraceReplay& operator=(const TraceReplay&) = delete;

  // Replays one request (steps 1-4 above). Errors: what the manager returns other than a request
  // larger than the capacity (which is counted, not an error).
  Status Replay(const TraceRequest& request);
  // Everything so far, with a snapshot of the manager's statistics; wall_s is the time spent in
  // Replay.
  [[nodiscard]] ReplayResult Summary() const;
  // The replay's own counters so far (requests, rejected, input, reused, restored, wall_s);
  // without the manager's statistics (stats, evicted_blocks, cached_blocks stay 0). Cheap.
  [[nodiscard]] const ReplayResult& counts() const { return result_; }
  [[nodiscard]] const BlockManager& manager() const { return *manager_; }
  [[nodiscard]] const ReplayConfig& config() const { return config_; }

 private:
  TraceReplay(ReplayConfig config, std::unique_ptr<BlockManager> manager);
  void FillOptions(const TraceRequest& request);
  void CallTierHooks(RequestId id, const TraceRequest& request, const AddSequenceResult& added);

  ReplayConfig config_;
  std::unique_ptr<BlockManager> manager_;
  std::vector<Token> tokens_;      // the current request's tokens
  SequenceOptions options_;        // the current request's options
  std::vector<ContentId> missed_;  // scratch for the tier hooks
  ReplayResult result_;
};

// Replays the whole trace with a fresh manager (or, with config.optimal, computes the offline
// optimum: ReplayOptimal).
Result<ReplayResult> ReplayTrace(std::span<const TraceRequest> trace, const ReplayConfig& config);

}  // namespace kvmesh
