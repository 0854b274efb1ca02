// EvictionListener: the hook through which the tiers (host DRAM, RocksDB) take a block's bytes
// before its slot in the primary pool is reused.
//
// When it runs: the block manager has chosen the victim (a cached, unpinned block), removed it
// from the eviction policy and the prefix tree's reach, and has not yet put the block id on the
// free list or handed it to its new owner. OnEvict is called once per pool block, in the calling
// thread of the operation that needed space (AddSequence, AppendTokens) or that claimed the block
// for a partial reuse. The block's bytes in every component are intact for the whole call and may
// be read (copied) from the pool memory; they are overwritten any time after OnEvict returns.
//
// Locks: called with the block manager's mutex held. The listener must not call back into the
// BlockManager (the mutex is not recursive: that deadlocks) and should return promptly — every
// other manager call waits for it. A listener that needs longer should copy the bytes to its own
// staging memory and finish the work elsewhere. It must not throw.
//
// Deferred reuse (OnEvictDeferrable; added for the tiers, store/offload_engine.h): for a block
// evicted to make room (reason kEvicted) the manager calls OnEvictDeferrable instead of OnEvict,
// with a MoveOutTicket (pool/move_out.h). A listener that leaves the ticket alone gets the
// behaviour above (the default implementation calls OnEvict). A listener that takes it
// (`auto mine = std::move(ticket);`) may read the block's bytes after returning, from any thread,
// until it completes the ticket: the block stays "moving out" (block_cache.h: in no tree, not on
// the free list, not allocatable) and the manager prefers other victims, or waits, when it needs
// a block meanwhile. Claimed blocks (kClaimed) get OnEvictDeferrable too: a listener that takes
// that ticket may read the block until it completes it, and the claiming sequence gets the block
// only then (AddSequence waits for it without the manager's lock, pool/move_out.h).
//
// Helping (HelpMoveOut): a manager call that finds too many blocks moving out to make room waits
// for some of them to complete. Before it sleeps it asks the listener to help: a listener whose
// move-out work sits in a queue runs some of it on the waiting thread. On a busy machine the
// worker that would do it may not be running, and waking it and then being woken by it costs
// more than the copy (store/offload_engine.h, HelpMoveOut).
//
// Thread safety: OnEvict and OnEvictDeferrable are called from whichever thread runs the manager
// call; never concurrently with themselves (the mutex serialises calls). HelpMoveOut runs without
// the manager's lock, concurrently with anything.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/content_id.h"
#include "pool/block_ids.h"
#include "pool/move_out.h"

namespace kvmesh {

enum class EvictionReason : std::uint8_t {
  kEvicted = 0,  // chosen by the eviction policy to make room
  kClaimed = 1,  // an unused leaf taken over by a sequence for copy-free partial reuse
};
std::string_view EvictionReasonName(EvictionReason reason);  // "evicted", "claimed"

struct EvictedBlock {
  PoolId pool;
  BlockId block;
  ContentId content_id;
  ContentId parent_id;
  std::int32_t priority = 0;
  std::int32_t num_tokens = 0;
  EvictionReason reason = EvictionReason::kEvicted;
};

class EvictionListener {
 public:
  virtual ~EvictionListener() = default;
  virtual void OnEvict(const EvictedBlock& block) = 0;
  // See "Deferred reuse" above. Leaving `ticket` valid = OnEvict semantics (the bytes may be
  // overwritten once the call returns); moving it out = the block is not reused before the ticket
  // completes. Called with the manager's lock held, like OnEvict.
  virtual void OnEvictDeferrable(const EvictedBlock& block, MoveOutTicket& /*ticket*/) {
    OnEvict(block);
  }
  // Called by a manager call that is about to wait for moves out (the tickets it took), without
  // the manager's lock: do some of the queued move-out work on the calling thread and complete
  // its tickets, instead of letting the caller sleep until a worker gets to it. Returns whether
  // any ticket was completed; false (the default) when nothing is queued or the listener cannot
  // help, and the caller then waits. May be called from any number of threads at once. See
  // "Helping" above.
  virtual bool HelpMoveOut() { return false; }
};

}  // namespace kvmesh
