// Deferred reuse of evicted blocks: MoveOutTicket and MoveOutQueue.
//
// An eviction listener that copies a victim's bytes asynchronously (the tiers: a worker copies the
// block into the host tier) takes the block's MoveOutTicket (eviction_listener.h,
// OnEvictDeferrable). Until the ticket completes, the block is "moving out": it is in no prefix
// tree and no eviction policy (nobody can match, pin or reuse its content id), and it is not on the
// free list (nobody can allocate and overwrite it). Completing the ticket — Complete(), or
// destroying it — hands the block back; the block manager frees it the next time it looks for a
// block (or reports statistics). block_cache.h has the state table.
//
// Completion semantics: the listener may read the block's bytes in every component until it
// completes the ticket, from any thread, without any lock of the block manager. Complete() takes
// only the queue's own mutex — never the block manager's — so it may be called from a copy worker
// while another thread holds the manager's lock waiting for a free block (that wait is what makes
// the completion necessary and sufficient: a copy job that needed the manager's lock to finish
// could deadlock). A ticket must be completed in bounded time; the block manager's destructor waits
// for every outstanding ticket.
//
// Claims (kClaim tickets): a cached leaf claimed by a sequence for copy-free partial reuse goes to
// that sequence, not to the free list. A listener that takes a claim's ticket may read the block
// until it completes the ticket; the manager hands the block to its sequence only then, waiting
// without its lock (AwaitClaim). A completed claim is not reclaimed as free.
//
// Thread safety: MoveOutQueue is thread-safe. A MoveOutTicket is a move-only handle, externally
// synchronised; distinct tickets may complete concurrently from distinct threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "pool/block_ids.h"

namespace kvmesh {

class MoveOutQueue;

enum class MoveOutKind : std::uint8_t {
  kEviction = 0,  // the block is freed once the ticket completes
  kClaim = 1,     // the block goes to the claiming sequence once the ticket completes
};

// A block whose move out completed.
struct MovedOutBlock {
  PoolId pool;
  BlockId block;
};

class MoveOutTicket {
 public:
  MoveOutTicket() = default;
  MoveOutTicket(MoveOutTicket&& other) noexcept
      : queue_(std::exchange(other.queue_, nullptr)),
        pool_(other.pool_),
        block_(other.block_),
        kind_(other.kind_) {}
  MoveOutTicket& operator=(MoveOutTicket&& other) noexcept {
    if (this != &other) {
      Complete();
      queue_ = std::exchange(other.queue_, nullptr);
      pool_ = other.pool_;
      block_ = other.block_;
      kind_ = other.kind_;
    }
    return *this;
  }
  MoveOutTicket(const MoveOutTicket&) = delete;
  MoveOutTicket& operator=(const MoveOutTicket&) = delete;
  ~MoveOutTicket() { Complete(); }

  // Whether this handle still holds the move (not completed, not moved from).
  [[nodiscard]] bool valid() const { return queue_ != nullptr; }
  [[nodiscard]] PoolId pool() const { return pool_; }
  [[nodiscard]] BlockId block() const { return block_; }
  [[nodiscard]] MoveOutKind kind() const { return kind_; }

  // Ends the move: the block may be reused from now on. No-op on an invalid ticket.
  void Complete();

 private:
  friend class MoveOutQueue;
  MoveOutTicket(MoveOutQueue* queue, PoolId pool, BlockId block, MoveOutKind kind)
      : queue_(queue), pool_(pool), block_(block), kind_(kind) {}

  MoveOutQueue* queue_ = nullptr;
  PoolId pool_;
  BlockId block_;
  MoveOutKind kind_ = MoveOutKind::kEviction;
};

class MoveOutQueue {
 public:
  MoveOutQueue() = default;
  MoveOutQueue(const MoveOutQueue&) = delete;
  MoveOutQueue& operator=(const MoveOutQueue&) = delete;
  // REQUIRES: no ticket outstanding (AwaitAllCompleted first).
  ~MoveOutQueue();

  // A ticket for the block; counts as outstanding until completed or withdrawn.
  MoveOutTicket Issue(PoolId pool, BlockId block, MoveOutKind kind = MoveOutKind::kEviction)
      KVMESH_EXCLUDES(mu_);
  // Takes back a ticket that was not taken (the listener left it): no completion is queued.
  // REQUIRES: ticket.valid().
  void Withdraw(MoveOutTicket& ticket) KVMESH_EXCLUDES(mu_);

  // Whether completed moves wait to be taken (cheap; no lock).
  [[nodiscard]] bool has_completed() const { return pending_.load(std::memory_order_acquire) > 0; }
  // Appends the completed moves to `out` and forgets them. Returns completions() as of the take:
  // every completion it counts has been taken, by this call or an earlier one.
  std::uint64_t TakeCompleted(std::vector<MovedOutBlock>* out) KVMESH_EXCLUDES(mu_);
  // Blocks until a completed move waits to be taken; returns at once when one does, or when no
  // ticket is outstanding (nothing could complete).
  void AwaitCompletion() KVMESH_EXCLUDES(mu_);
  // Blocks until completions() reaches `target`, or no ticket is outstanding (nothing more could
  // complete). An admission short of n blocks waits for n completions at once (up to a batch,
  // see BlockCache::MakeAllocatable) instead of waking, and planning again, for each one.
  void AwaitCompletions(std::uint64_t target) KVMESH_EXCLUDES(mu_);
  // Moves (not claims) completed since the queue was made.
  [[nodiscard]] std::uint64_t completions() const KVMESH_EXCLUDES(mu_);
  // Blocks until no ticket is outstanding.
  void AwaitAllCompleted() KVMESH_EXCLUDES(mu_);
  // Blocks until the (taken) claim ticket of the block completed; forgets the completion.
  void AwaitClaim(PoolId pool, BlockId block) KVMESH_EXCLUDES(mu_);
  // Tickets issued and neither completed nor withdrawn.
  [[nodiscard]] std::int64_t outstanding() const KVMESH_EXCLUDES(mu_);

 private:
  friend class MoveOutTicket;
  void Complete(PoolId pool, BlockId block, MoveOutKind kind) KVMESH_EXCLUDES(mu_);

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<MovedOutBlock> completed_ KVMESH_GUARDED_BY(mu_);
  std::vector<MovedOutBlock> claims_done_ KVMESH_GUARDED_BY(mu_);
  std::int64_t outstanding_ KVMESH_GUARDED_BY(mu_) = 0;
  std::uint64_t completions_ KVMESH_GUARDED_BY(mu_) = 0;  // moves (not claims) completed
  std::atomic<std::int64_t> pending_{0};  // completed_.size(), readable without the lock
};

}  // namespace kvmesh
