// Statistics of a block manager, per pool and overall: a snapshot taken under the manager's lock
// (BlockManager::GetStats), a plain value afterwards.
//
// Per pool:
//   input_blocks    blocks the pool supplied to admitted prompts, reused or fresh (a window pool
//                   does not count matched blocks outside its window: it supplies none for them)
//   reused_blocks   of those, full blocks supplied from the cache
//   hit_rate        reused_blocks / input_blocks (0 when nothing was admitted)
//   partial_reused_blocks  partly matching blocks reused (copied or claimed); counted as fresh
//   free / cached / pinned / private / evictable   blocks by state now (block_cache.h); a block
//                   may be cached and pinned at once; private = allocated and not cached;
//                   evictable = what eviction could free now, descendants first
//   cached_by_priority[p]  cached blocks whose priority is p (0..100)
//   allocated / stored / evicted / claimed   cumulative block counts
//   moving_out      blocks moving out now (deferred evictions awaiting their ticket; not free,
//                   not cached, not private)
//   moved_out       cumulative evictions that were deferred (also counted in evicted)
//   restored        cumulative blocks stored by PublishRestore (copied in from a tier)
//   allocation_waits  times an allocation waited for a move out with the manager's lock held
//                   (a last resort; the manager makes room and waits without its lock: 0)
//
// Thread safety: a value.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pool/block_ids.h"
#include "pool/eviction_policy.h"

namespace kvmesh {

// Cumulative per-pool admission counters kept by the manager.
struct BlockManagerPoolCounters {
  std::uint64_t input_blocks = 0;
  std::uint64_t reused_blocks = 0;
  std::uint64_t partial_reused_blocks = 0;
};

// Cumulative manager-wide counters.
struct BlockManagerCounters {
  std::uint64_t input_tokens = 0;
  std::uint64_t reused_tokens = 0;
  std::uint64_t sequences_added = 0;
  std::uint64_t sequences_removed = 0;
  std::uint64_t admissions_failed = 0;  // AddSequence calls refused for lack of blocks
  // Waits of AddSequence, AppendTokens and restore reservations for moving-out blocks (deferred
  // evictions) to complete, without the manager's lock; each is followed by planning again.
  std::uint64_t move_out_waits = 0;
  // The wall time those waits took, the copies the waiting call did itself (helping) included.
  std::uint64_t move_out_wait_ns = 0;
};

struct PoolStats {
  PoolId pool;
  std::string name;
  std::int32_t window_tokens = 0;
  std::int64_t num_blocks = 0;  // or kUnlimitedBlocks
  std::int64_t free_blocks = 0;
  std::int64_t cached_blocks = 0;
  std::int64_t pinned_blocks = 0;
  std::int64_t private_blocks = 0;
  std::int64_t evictable_blocks = 0;
  std::uint64_t input_blocks = 0;
  std::uint64_t reused_blocks = 0;
  std::uint64_t partial_reused_blocks = 0;
  std::uint64_t allocated_blocks = 0;
  std::uint64_t stored_blocks = 0;
  std::uint64_t evicted_blocks = 0;
  std::uint64_t claimed_blocks = 0;
  std::int64_t moving_out_blocks = 0;
  std::uint64_t moved_out_blocks = 0;
  std::uint64_t restored_blocks = 0;
  std::uint64_t allocation_waits = 0;
  std::array<std::int64_t, kMaxPriority + 1> cached_by_priority{};

  [[nodiscard]] double hit_rate() const {
    return input_blocks == 0
               ? 0.0
               : static_cast<double>(reused_blocks) / static_cast<double>(input_blocks);
  }
};

struct BlockManagerStats {
  std::vector<PoolStats> pools;
  BlockManagerCounters counters;
  std::int64_t running_sequences = 0;
  std::uint64_t tree_nodes = 0;
  std::uint64_t last_event_seq = 0;
  std::uint64_t events_overwritten = 0;
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kPriorityLru;

  // reused_tokens / input_tokens.
  [[nodiscard]] double token_hit_rate() const {
    return counters.input_tokens == 0 ? 0.0
                                      : static_cast<double>(counters.reused_tokens) /
                                            static_cast<double>(counters.input_tokens);
  }
  // A multi-line human-readable summary (tests, debugging; kvctl formats its own).
  [[nodiscard]] std::string ToString() const;
};

}  // namespace kvmesh
