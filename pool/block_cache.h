// BlockCache: the ledger under the block manager — which block of which pool is free, private to
// a sequence, or cached in the prefix tree; who pins it; which one goes next when a pool is full.
// Internal to pool/: BlockManager (block_manager.h) is the thread-safe API on top.
//
// Block states, per pool block:
//
//   state     in tree  pins  in an eviction policy          leaves the state when
//   free      no       0     no                             Allocate -> private (pins 1)
//   private   no       >= 1  no                             Store -> cached; last Unpin -> free;
//                                                           (Claim gives a cached block back as
//                                                           private)
//   cached    yes      >= 1  no                             last Unpin -> cached, pins 0
//   cached    yes      0     window pool: always;           Pin -> pins >= 1; eviction -> free,
//                            full pools: when its node is   or -> moving out when the listener
//                            a leaf (see below)             takes the ticket; Claim -> private
//   moving    no       0     no (not on the free list       ticket completed, then reclaimed
//   out                      either: not allocatable)       (ReclaimMovedOut) -> free
//
// Moving out (deferred reuse, pool/move_out.h; added for the tiers): the eviction listener took
// the victim's MoveOutTicket to copy its bytes asynchronously. The block left the tree (its
// content id can no longer be matched or pinned) but keeps its bytes until the ticket completes.
// Available(p) counts moving-out blocks (they will be free), so an admission planned against
// Available() always completes. Before allocating, the manager calls MakeAllocatable(need): it
// takes completed moves back (ReclaimMovedOut), then evicts further victims while fewer than
// max_moving_out blocks of the pool are moving out (it prefers other victims); when that is not
// enough it returns false, and the manager drops its lock, waits for moves to complete
// (MoveOutQueue::AwaitCompletions: as many as are missing, in batches of at most half of those in
// flight) and tries again — nobody waits for a copy under the manager's lock. Allocate itself keeps
// a last-resort wait (counted: allocation_waits; none is expected). Listeners that never take
// tickets see no change.
//
// Claims: a claimed leaf's listener call gets a kClaim ticket (OnEvictDeferrable); when the
// listener takes it, the block is recorded in pending_claims() and the manager hands it to the
// claiming sequence only after the ticket completed (waiting without its lock).
//
// Pools: a full-attention pool (window 0) needs a block for every block of a reused prefix; a
// sliding-window pool only for the blocks inside the window at the end of the reused prefix.
// Every node of a tree with full pools has a block in each full pool; a window pool's block of a
// node may be missing (released before it was stored, or evicted on its own).
//
// Eviction rule (no unreachable block keeps memory; priorities honoured as far as the tree
// allows):
//   - Full pools evict whole nodes, and only leaves: a node goes with all its blocks (every pool)
//     when it is an unpinned leaf; its parent then becomes a leaf and a candidate with its own,
//     older, use stamp. Priority inversion: a parent never goes before its cached children, even
//     when the children have a higher priority — a child without its parent could never be
//     reused. One policy orders the candidate nodes for all full pools together.
//   - A window pool evicts any unpinned block of its own, leaf or not: a node without its window
//     block still serves longer prefixes. A node left with no block and no child is removed.
//   A node is "removable" when nothing in its subtree is pinned; for a full pool, free blocks +
//   removable nodes is exactly how many blocks eviction can supply (Available(), which adds the
//   blocks moving out). For a window pool, it is free blocks + unpinned cached blocks of that pool.
//
// Use stamps are a logical clock (++ each time a cached block's pins drop to 0); the injected wall
// clock only drives retention expiry (ProcessExpiries). Events are appended to pending_events()
// and the eviction listener is called synchronously (eviction_listener.h).
//
// Thread safety: externally synchronised (the block manager's mutex).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "pool/block_allocator.h"
#include "pool/eviction_listener.h"
#include "pool/eviction_policy.h"
#include "pool/kv_events.h"
#include "pool/prefix_tree.h"

namespace kvmesh {

struct CachePoolParams {
  std::int64_t num_blocks = 0;     // or kUnlimitedBlocks
  std::int32_t window_tokens = 0;  // 0 = full attention
};

struct CachePoolCounters {
  std::uint64_t allocated_blocks = 0;
  std::uint64_t stored_blocks = 0;
  std::uint64_t evicted_blocks = 0;
  std::uint64_t claimed_blocks = 0;
  std::uint64_t moved_out_blocks = 0;  // evictions deferred by a ticket (also in evicted_blocks)
  std::uint64_t restored_blocks = 0;   // blocks stored by BlockManager::PublishRestore
  std::uint64_t allocation_waits = 0;  // Allocate waited for a move with the lock held
  std::array<std::int64_t, kMaxPriority + 1> cached_by_priority{};
};

class BlockCache {
 public:
  BlockCache(std::int32_t tokens_per_block, const std::vector<CachePoolParams>& pools,
             EvictionPolicyKind policy, const ContentId& namespace_digest, std::uint64_t hash_seed);

  PrefixTree& tree() { return tree_; }
  [[nodiscard]] const PrefixTree& tree() const { return tree_; }
  [[nodiscard]] int num_pools() const { return static_cast<int>(pools_.size()); }
  [[nodiscard]] std::int32_t window(int p) const { return pools_[p].params.window_tokens; }
  [[nodiscard]] bool is_window(int p) const { return window(p) > 0; }
  [[nodiscard]] bool has_full_pools() const { return has_full_pools_; }
  [[nodiscard]] EvictionPolicyKind policy_kind() const { return policy_kind_; }

  void set_listener(EvictionListener* listener) { listener_ = listener; }
  // Where tickets of deferred evictions come from and complete; null = never deferred.
  // max_moving_out: see "Moving out" above (>= 0).
  void set_move_out(MoveOutQueue* queue, std::int64_t max_moving_out) {
    moves_ = queue;
    max_moving_out_ = max_moving_out;
  }
  std::vector<KvEvent>& pending_events() { return pending_events_; }

  // --- capacity
  [[nodiscard]] bool unlimited(int p) const { return pools_[p].allocator.unlimited(); }
  [[nodiscard]] std::int64_t num_blocks(int p) const { return pools_[p].allocator.num_blocks(); }
  [[nodiscard]] std::int64_t free_blocks(int p) const { return pools_[p].allocator.num_free(); }
  // Cached blocks eviction could free now or after evicting their descendants.
  [[nodiscard]] std::int64_t evictable_blocks(int p) const;
  // How many Allocate(p) calls can succeed in a row (INT64_MAX when unlimited): free blocks,
  // evictable blocks and blocks moving out.
  [[nodiscard]] std::int64_t Available(int p) const;
  [[nodiscard]] std::int64_t cached_blocks(int p) const { return pools_[p].num_cached; }
  [[nodiscard]] std::int64_t pinned_blocks(int p) const { return pools_[p].num_pinned; }
  [[nodiscard]] std::int64_t allocated_blocks(int p) const {
    return pools_[p].allocator.num_allocated();
  }
  // Blocks moving out now (allocated, in no tree, awaiting their ticket).
  [[nodiscard]] std::int64_t moving_out_blocks(int p) const { return pools_[p].num_moving_out; }
  // Frees the blocks whose moves completed. Cheap when none did.
  void ReclaimMovedOut();
  // Evicts (see "Moving out" above) until need[p] Allocate(p) calls in a row find a free block,
  // for every pool; false when that needs a move out to complete first: the caller then waits,
  // without its lock, for MoveOutQueue::completions() to reach move_wait_target() — the blocks
  // still missing, at most half of those moving out, at least one — and tries again. Blocks the
  // caller is about to reuse must be pinned. REQUIRES: need.size() == num_pools(), need[p] <=
  // Available(p).
  [[nodiscard]] bool MakeAllocatable(std::span<const std::int64_t> need);
  // The completion count the last MakeAllocatable that returned false asks the caller to await.
  [[nodiscard]] std::uint64_t move_wait_target() const { return move_wait_target_; }
  // Claimed blocks whose listener took the claim's ticket (the caller awaits them), cleared.
  std::vector<MovedOutBlock> TakePendingClaims() { return std::exchange(pending_claims_, {}); }
  [[nodiscard]] const CachePoolCounters& counters(int p) const { return pools_[p].counters; }
  void CountRestored(int p) { ++pools_[p].counters.restored_blocks; }

  // --- blocks
  // A private block with one pin (the caller's), evicting as the rules above say (and waiting for
  // a move out to complete when only moving-out blocks remain). REQUIRES: Available(p) > 0.
  BlockId Allocate(int p);
  void Pin(int p, BlockId b);
  // Drops one pin. A private block is freed at 0 pins; a cached one becomes evictable.
  void Unpin(int p, BlockId b);
  [[nodiscard]] std::uint32_t pins(int p, BlockId b) const { return pools_[p].slots[b.value].pins; }
  [[nodiscard]] bool allocated(int p, BlockId b) const {
    return b.valid() && b.value < static_cast<std::int64_t>(pools_[p].slots.size()) &&
           pools_[p].slots[b.value].allocated;
  }
  // The node caching this block, or kNoNode for a private (or free) block.
  [[nodiscard]] NodeRef node_of(int p, BlockId b) const { return pools_[p].slots[b.value].node; }

  // --- tree
  // Caches the caller's private blocks (one per pool, kNoBlock where none) as a new child of
  // `parent`. The caller's pins stay. Emits one stored event per block.
  // REQUIRES: no such child; at least one block; each given block private with pins >= 1.
  // key_hash: tree().KeyHash(parent, tokens, mm). content_id: as PrefixTree::AddChild's.
  NodeRef Store(NodeRef parent, std::span<const Token> tokens, std::span<const BlockMmRef> mm,
                std::uint64_t key_hash, std::span<const BlockId> blocks, int priority,
                std::int64_t expiry_ns, const ContentId* content_id = nullptr);
  // A non-root leaf without pins and with a block in every pool.
  [[nodiscard]] bool CanClaim(NodeRef n) const;
  // Takes the node out of the tree; its blocks become private to the caller with one pin each
  // (out[p]). Emits removed events and calls the listener (reason kClaimed). REQUIRES CanClaim.
  void Claim(NodeRef n, std::span<BlockId> out);
  void SetRetention(NodeRef n, int priority, std::int64_t expiry_ns);
  // Whether any retention expiry is pending (ProcessExpiries has work, now or later).
  [[nodiscard]] bool has_expiries() const { return !expiries_.empty(); }
  // Priorities whose expiry is <= now_ns fall back to kDefaultPriority.
  void ProcessExpiries(std::int64_t now_ns);

  // Sum of the pins of every block of pool p (O(blocks); for checks).
  [[nodiscard]] std::int64_t TotalPins(int p) const;

  // Full consistency check of every counter, index and policy (tests; O(everything)).
  Status CheckInvariants() const;

 private:
  struct BlockSlot {
    std::uint32_t pins = 0;
    NodeRef node = kNoNode;
    bool allocated = false;
    bool moving_out = false;  // allocated, no node, no pins: awaiting its ticket
  };
  struct PoolState {
    CachePoolParams params;
    BlockAllocator allocator;
    std::vector<BlockSlot> slots;            // [id_space]
    std::unique_ptr<EvictionPolicy> policy;  // window pools: their unpinned cached blocks
    std::int64_t num_cached = 0;
    std::int64_t num_pinned = 0;  // blocks with pins > 0
    std::int64_t num_moving_out = 0;
    CachePoolCounters counters;
  };
  struct Expiry {
    std::int64_t at_ns;
    NodeRef node;
    std::uint32_t generation;
  };
  static bool ExpiryLater(const Expiry& a, const Expiry& b) { return a.at_ns > b.at_ns; }

  BlockSlot& slot(int p, BlockId b) { return pools_[p].slots[b.value]; }
  // The first 8 bytes of the node's content id: its name in the policies' history.
  [[nodiscard]] std::uint64_t Fingerprint(NodeRef n) const;
  void EvictTreeVictim();
  void EvictWindowVictim(int p);
  // Drops the node's block in pool p from the cache (listener, event, counters) and frees it, or
  // leaves it moving out when the listener took its ticket.
  void DropBlock(NodeRef n, int p, EvictionReason reason);
  // Unlinks a node without blocks, pins or children; then prunes blockless, childless ancestors.
  void RemoveNode(NodeRef n);
  void UpdateRemovable(NodeRef n);
  void UpdateTreeCandidate(NodeRef n);
  [[nodiscard]] bool WantTreeCandidate(NodeRef n) const;
  void Emit(KvEventType type, int p, BlockId b, NodeRef n);
  Status CheckNode(NodeRef n, std::vector<std::int64_t>* cached_by_prio) const;

  PrefixTree tree_;
  std::vector<PoolState> pools_;
  EvictionPolicyKind policy_kind_;
  bool has_full_pools_ = false;
  std::unique_ptr<EvictionPolicy> tree_policy_;  // leaf nodes, for all full pools
  std::int64_t num_removable_ = 0;               // removable non-root nodes
  std::uint64_t stamp_ = 0;
  std::vector<Expiry> expiries_;  // min-heap on at_ns; stale entries skipped lazily
  EvictionListener* listener_ = nullptr;
  MoveOutQueue* moves_ = nullptr;
  std::int64_t max_moving_out_ = 0;
  std::uint64_t reclaimed_through_ = 0;  // moves_->completions() as of the last reclaim
  std::uint64_t move_wait_target_ = 0;   // see move_wait_target()
  std::vector<MovedOutBlock> moved_scratch_;
  std::vector<MovedOutBlock> pending_claims_;
  std::vector<KvEvent> pending_events_;
};

}  // namespace kvmesh
