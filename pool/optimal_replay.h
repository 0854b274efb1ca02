// The offline optimum of a trace replay: the most blocks any eviction policy could have reused
// from a pool of the given capacity, knowing the whole trace in advance — the yardstick for the
// online policies (`kvctl replay --policy optimal`).
//
// The rules are the replay's (trace_replay.h): requests one at a time, in trace order; a request
// reuses the longest prefix of its ids that is cached; all its blocks are in the pool while it
// runs (so it needs capacity >= its blocks, else it is rejected and touches nothing); afterwards
// every block may stay cached or be dropped; the cache is always a set of whole prefixes (a block
// without its parent could never be reused).
//
// The algorithm (Belady's MIN on the prefix tree of the trace's ids): when a request needs k
// fresh blocks and the pool is full, evict the k cached blocks whose next use lies farthest in the
// future (never used again = infinitely far), ties to the deepest block. A request's own cached
// prefix is never a victim (its next use is now, the nearest). Dropping a new block at once is the
// same as evicting it at the next eviction, which happens whenever it is then the farthest.
//
// Why it is optimal, and why the cache stays whole prefixes: docs/kvctl.md ("The offline
// optimum"). In short: a parent's next use is never later than its child's (every request using a
// child uses the parent), so with ties to the deeper block a parent always goes after its
// children; and the exchange argument for Belady's MIN carries over to requests of several blocks,
// because keeping the block used sooner instead of the one used later never costs a hit.
//
// Cost: O(B log N) for B input blocks and N distinct prefix blocks (a trie of the ids, the next use
// of every occurrence, a heap of cached leaves); memory O(B). No block manager is involved: only
// the ids matter, so tokens_per_block does not change the result.
//
// Thread safety: pure (thread-safe for distinct arguments).
#pragma once

#include <span>

#include "common/result.h"
#include "pool/trace.h"
#include "pool/trace_replay.h"

namespace kvmesh {

// REQUIRES (else kInvalidArgument): config.Validate() passes, no tier hooks. The result has
// optimal = true, and stats with one pool (cached blocks at the default priority).
Result<ReplayResult> ReplayOptimal(std::span<const TraceRequest> trace, const ReplayConfig& config);

}  // namespace kvmesh
