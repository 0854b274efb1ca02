#include "pool/block_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/check.h"
#include "common/strings.h"

namespace kvmesh {
std::string_view EvictionReasonName(EvictionReason reason) {
  switch (reason) {
    case EvictionReason::kEvicted: return "evicted";
    case EvictionReason::kClaimed: return "claimed";
  }
  return "unknown";
}

BlockCache::BlockCache(std::int32_t tokens_per_block, const std::vector<CachePoolParams>& pools,
                       EvictionPolicyKind policy, const ContentId& namespace_digest,
                       std::uint64_t hash_seed)
    : tree_(tokens_per_block, static_cast<int>(pools.size()), namespace_digest, hash_seed),
      policy_kind_(policy) {
  pools_.reserve(pools.size());
  std::int64_t tree_capacity = 0;  // the smallest full pool: where evictions happen first
  for (const CachePoolParams& params : pools) {
    PoolState& s = pools_.emplace_back(
        PoolState{params, BlockAllocator(params.num_blocks), {}, nullptr, 0, 0, 0, {}});
    s.slots.resize(static_cast<std::size_t>(s.allocator.id_space()));
    const std::int64_t capacity = s.allocator.unlimited() ? 0 : params.num_blocks;
    if (params.window_tokens > 0) {
      s.policy = MakeEvictionPolicy(policy, {.capacity = capacity});
    } else {
      if (!has_full_pools_ || (capacity > 0 && (tree_capacity == 0 || capacity < tree_capacity))) {
        tree_capacity = capacity;
      }
      has_full_pools_ = true;
    }
  }
  if (has_full_pools_) tree_policy_ = MakeEvictionPolicy(policy, {.capacity = tree_capacity});
}

std::uint64_t BlockCache::Fingerprint(NodeRef n) const {
  std::uint64_t f = 0;
  std::memcpy(&f, tree_.node(n).content_id.bytes.data(), sizeof(f));
  return f;
}

std::int64_t BlockCache::evictable_blocks(int p) const {
  return is_window(p) ? static_cast<std::int64_t>(pools_[p].policy->size()) : num_removable_;
}

std::int64_t BlockCache::Available(int p) const {
  if (unlimited(p)) return std::numeric_limits<std::int64_t>::max();
  return free_blocks(p) + evictable_blocks(p) + pools_[p].num_moving_out;
}

void BlockCache::ReclaimMovedOut() {
  if (moves_ == nullptr || !moves_->has_completed()) return;
  moved_scratch_.clear();
  reclaimed_through_ = moves_->TakeCompleted(&moved_scratch_);
  for (const MovedOutBlock& m : moved_scratch_) {
    PoolState& s = pools_[m.pool.value];
    BlockSlot& sl = s.slots[m.block.value];
    KVMESH_CHECK(sl.moving_out && sl.allocated && sl.pins == 0 && sl.node == kNoNode)
        << "completed move of block " << m.block.value << " of pool " << m.pool.value
        << " that is not moving out";
    sl.moving_out = false;
    sl.allocated = false;
    --s.num_moving_out;
    s.allocator.Free(m.block);
  }
  moved_scratch_.clear();
}

bool BlockCache::MakeAllocatable(std::span<const std::int64_t> need) {
  ReclaimMovedOut();
  for (int p = 0; p < num_pools(); ++p) {
    PoolState& s = pools_[p];
    if (unlimited(p)) continue;
    while (free_blocks(p) < need[p]) {
      const bool can_evict = is_window(p) ? s.policy->size() > 0 : tree_policy_->size() > 0;
      if (!can_evict || (s.num_moving_out > 0 && s.num_moving_out >= max_moving_out_)) {
        if (s.num_moving_out > 0) {  // the rest comes from moves completing
          // Wait for as many as are missing, at most half of those in flight (so that the next
          // victims are queued while the other half still copy), at least one.
          const std::int64_t missing = need[p] - free_blocks(p);
          const std::int64_t batch =
              std::clamp<std::int64_t>(missing, 1, std::max<std::int64_t>(1, s.num_moving_out / 2));
          move_wait_target_ = reclaimed_through_ + static_cast<std::uint64_t>(batch);
          return false;
        }
        break;  // nothing to wait for either: Allocate reports it
      }
      if (is_window(p)) {
        EvictWindowVictim(p);
      } else {
        EvictTreeVictim();
      }
    }
  }
  return true;
}

BlockId BlockCache::Allocate(int p) {
  PoolState& s = pools_[p];
  std::optional<BlockId> b = s.allocator.Allocate();
  while (!b) {
    ReclaimMovedOut();
    b = s.allocator.Allocate();
    if (b) break;
    const bool can_evict = is_window(p) ? s.policy->size() > 0 : tree_policy_->size() > 0;
    // Another victim rather than a wait, while few blocks of this pool are moving out.
    if (can_evict && (s.num_moving_out == 0 || s.num_moving_out < max_moving_out_)) {
      if (is_window(p)) {
        EvictWindowVictim(p);
      } else {
        EvictTreeVictim();
      }
      b = s.allocator.Allocate();
      continue;
    }
    KVMESH_CHECK(s.num_moving_out > 0 && moves_ != nullptr)
        << "pool " << p << " has nothing to evict";
    // Last resort, with the manager's lock held: callers make room first (MakeAllocatable).
    ++s.counters.allocation_waits;
    moves_->AwaitCompletion();
  }
  if (b->value >= static_cast<std::int64_t>(s.slots.size())) {
    s.slots.resize(std::max<std::size_t>(b->value + 1, s.slots.size() * 2));
  }
  BlockSlot& sl = s.slots[b->value];
  KVMESH_DCHECK(!sl.allocated && sl.pins == 0 && sl.node == kNoNode);
  sl.allocated = true;
  sl.pins = 1;
  ++s.num_pinned;
  ++s.counters.allocated_blocks;
  return *b;
}

void BlockCache::Pin(int p, BlockId b) {
  PoolState& s = pools_[p];
  BlockSlot& sl = s.slots[b.value];
  KVMESH_DCHECK(sl.allocated) << "pin of free block " << b.value << " in pool " << p;
  if (sl.pins++ == 0) {
    ++s.num_pinned;
    if (sl.node != kNoNode && s.policy) {
      s.policy->Erase(sl.node);
      s.policy->OnAcquire(sl.node);
    }
  }
  if (sl.node == kNoNode) return;
  TreeNode& node = tree_.node(sl.node);
  if (node.pins_total++ == 0) {
    if (has_full_pools_) tree_policy_->OnAcquire(sl.node);
    UpdateTreeCandidate(sl.node);
    UpdateRemovable(sl.node);
  }
}

void BlockCache::Unpin(int p, BlockId b) {
  PoolState& s = pools_[p];
  BlockSlot& sl = s.slots[b.value];
  KVMESH_CHECK(sl.allocated && sl.pins > 0)
      << "unpin of unpinned block " << b.value << " in pool " << p;
  if (--sl.pins > 0) {
    if (sl.node != kNoNode) --tree_.node(sl.node).pins_total;
    return;
  }
  --s.num_pinned;
  if (sl.node == kNoNode) {  // private: nobody holds it any more
    sl.allocated = false;
    s.allocator.Free(b);
    return;
  }
  const NodeRef n = sl.node;
  TreeNode& node = tree_.node(n);
  const std::uint64_t stamp = ++stamp_;
  if (s.policy) {
    s.policy->OnRelease(n, stamp, node.num_children == 0);
    s.policy->Insert(n, node.priority, stamp);
  }
  if (--node.pins_total == 0) {
    node.last_use = stamp;
    if (has_full_pools_) tree_policy_->OnRelease(n, stamp, node.num_children == 0);
    UpdateRemovable(n);
    UpdateTreeCandidate(n);
  }
}

bool BlockCache::WantTreeCandidate(NodeRef n) const {
  const TreeNode& node = tree_.node(n);
  return has_full_pools_ && node.alive && !node.is_root && node.num_children == 0 &&
         node.pins_total == 0;
}

void BlockCache::UpdateTreeCandidate(NodeRef n) {
  if (!has_full_pools_) return;
  const bool want = WantTreeCandidate(n);
  const bool have = tree_policy_->Contains(n);
  if (want && !have) {
    const TreeNode& node = tree_.node(n);
    tree_policy_->Insert(n, node.priority, node.last_use);
  } else if (!want && have) {
    tree_policy_->Erase(n);
  }
}

void BlockCache::UpdateRemovable(NodeRef n) {
  // Walk up while a node's removability flips; roots are never removable.
  while (n != kNoNode) {
    TreeNode& node = tree_.node(n);
    if (node.is_root) return;
    const bool now = node.pins_total == 0 && node.blocked_children == 0;
    if (now == node.removable) return;
    node.removable = now;
    num_removable_ += now ? 1 : -1;
    TreeNode& parent = tree_.node(node.parent);
    if (now) {
      --parent.blocked_children;
    } else {
      ++parent.blocked_children;
    }
    n = node.parent;
  }
}

void BlockCache::Emit(KvEventType type, int p, BlockId b, NodeRef n) {
  const TreeNode& node = tree_.node(n);
  KvEvent e;
  e.type = type;
  e.pool = PoolId{p};
  e.block = b;
  e.content_id = node.content_id;
  e.parent_id = tree_.parent_content_id(n);
  e.num_tokens = tree_.tokens_per_block();
  e.priority = node.priority;
  e.tier = type == KvEventType::kStored ? KvTier::kPrimary : KvTier::kNone;
  e.previous_tier = type == KvEventType::kRemoved ? KvTier::kPrimary : KvTier::kNone;
  pending_events_.push_back(e);
}

void BlockCache::DropBlock(NodeRef n, int p, EvictionReason reason) {
  PoolState& s = pools_[p];
  const BlockId b = tree_.block(n, p);
  BlockSlot& sl = s.slots[b.value];
  KVMESH_DCHECK(sl.node == n && sl.pins == 0);
  const TreeNode& node = tree_.node(n);
  bool deferred = false;
  if (listener_ != nullptr) {
    const EvictedBlock evicted{PoolId{p},       b,
                               node.content_id, tree_.parent_content_id(n),
                               node.priority,   tree_.tokens_per_block(),
                               reason};
    if (moves_ != nullptr) {
      const MoveOutKind kind =
          reason == EvictionReason::kEvicted ? MoveOutKind::kEviction : MoveOutKind::kClaim;
      MoveOutTicket ticket = moves_->Issue(PoolId{p}, b, kind);
      listener_->OnEvictDeferrable(evicted, ticket);
      const bool taken = !ticket.valid();  // taken (or completed already: reclaimed later)
      if (!taken) moves_->Withdraw(ticket);
      deferred = taken && reason == EvictionReason::kEvicted;
      if (taken && reason == EvictionReason::kClaimed) pending_claims_.push_back({PoolId{p}, b});
    } else {
      listener_->OnEvict(evicted);
    }
  }
  Emit(KvEventType::kRemoved, p, b, n);
  if (s.policy) {
    if (s.policy->Contains(n)) s.policy->Erase(n);
    s.policy->OnRetire(n);
  }
  --s.counters.cached_by_priority[node.priority];
  --s.num_cached;
  sl.node = kNoNode;
  tree_.set_block(n, p, kNoBlock);
  if (reason == EvictionReason::kEvicted) {
    ++s.counters.evicted_blocks;
    if (deferred) {
      sl.moving_out = true;  // stays allocated until its ticket completes
      ++s.num_moving_out;
      ++s.counters.moved_out_blocks;
    } else {
      sl.allocated = false;
      s.allocator.Free(b);
    }
  } else {
    ++s.counters.claimed_blocks;
  }
}

void BlockCache::RemoveNode(NodeRef n) {
  while (true) {
    TreeNode& node = tree_.node(n);
    KVMESH_DCHECK(!tree_.HasAnyBlock(n) && node.pins_total == 0 && node.num_children == 0);
    if (has_full_pools_) {
      if (tree_policy_->Contains(n)) tree_policy_->Erase(n);
      tree_policy_->OnRetire(n);
    }
    if (node.removable) --num_removable_;  // a removable child is not counted as blocked
    const NodeRef parent = node.parent;
    tree_.RemoveLeaf(n);
    TreeNode& p = tree_.node(parent);
    if (p.is_root) {
      tree_.RemoveRootIfUnused(parent);
      return;
    }
    UpdateTreeCandidate(parent);
    if (tree_.HasAnyBlock(parent) || p.num_children > 0) return;
    n = parent;  // a blockless interior node of a window-only tree lost its last child
  }
}

void BlockCache::EvictTreeVictim() {
  const NodeRef n = *tree_policy_->Victim();
  for (int p = 0; p < num_pools(); ++p) {
    if (tree_.block(n, p).valid()) DropBlock(n, p, EvictionReason::kEvicted);
  }
  RemoveNode(n);
}

void BlockCache::EvictWindowVictim(int p) {
  const NodeRef n = *pools_[p].policy->Victim();
  DropBlock(n, p, EvictionReason::kEvicted);
  const TreeNode& node = tree_.node(n);
  if (!tree_.HasAnyBlock(n) && node.num_children == 0) RemoveNode(n);
}

NodeRef BlockCache::Store(NodeRef parent, std::span<const Token> tokens,
                          std::span<const BlockMmRef> mm, std::uint64_t key_hash,
                          std::span<const BlockId> blocks, int priority, std::int64_t expiry_ns,
                          const ContentId* content_id) {
  KVMESH_CHECK(static_cast<int>(blocks.size()) == num_pools());
  const NodeRef n = tree_.AddChild(parent, tokens, mm, key_hash, content_id);
  TreeNode& node = tree_.node(n);
  const std::uint64_t fingerprint = Fingerprint(n);
  if (has_full_pools_) tree_policy_->OnAdmit(n, fingerprint, node.depth);
  node.priority = static_cast<std::uint8_t>(priority);
  node.expiry_ns = expiry_ns;
  node.removable = false;  // pinned by the caller; counted as a blocked child below
  for (int p = 0; p < num_pools(); ++p) {
    const BlockId b = blocks[p];
    if (!b.valid()) continue;
    PoolState& s = pools_[p];
    BlockSlot& sl = s.slots[b.value];
    KVMESH_CHECK(sl.allocated && sl.node == kNoNode && sl.pins > 0)
        << "storing block " << b.value << " of pool " << p << " that is not private and pinned";
    sl.node = n;
    tree_.set_block(n, p, b);
    if (s.policy) s.policy->OnAdmit(n, fingerprint, node.depth);
    node.pins_total += sl.pins;
    ++s.num_cached;
    ++s.counters.stored_blocks;
    ++s.counters.cached_by_priority[priority];
    Emit(KvEventType::kStored, p, b, n);
  }
  KVMESH_CHECK(node.pins_total > 0) << "stored a node without blocks";
  ++tree_.node(parent).blocked_children;  // the new node is pinned, so not removable
  UpdateRemovable(parent);
  UpdateTreeCandidate(parent);
  if (expiry_ns != kNoExpiry) {
    expiries_.push_back({expiry_ns, n, node.generation});
    std::push_heap(expiries_.begin(), expiries_.end(), &BlockCache::ExpiryLater);
  }
  return n;
}

bool BlockCache::CanClaim(NodeRef n) const {
  const TreeNode& node = tree_.node(n);
  if (!node.alive || node.is_root || node.num_children > 0 || node.pins_total > 0) return false;
  for (int p = 0; p < num_pools(); ++p) {
    if (!tree_.block(n, p).valid()) return false;
  }
  return true;
}

void BlockCache::Claim(NodeRef n, std::span<BlockId> out) {
  KVMESH_CHECK(CanClaim(n)) << "claim of node " << n;
  for (int p = 0; p < num_pools(); ++p) {
    const BlockId b = tree_.block(n, p);
    DropBlock(n, p, EvictionReason::kClaimed);
    BlockSlot& sl = slot(p, b);
    sl.pins = 1;
    ++pools_[p].num_pinned;
    out[p] = b;
  }
  RemoveNode(n);
}

void BlockCache::SetRetention(NodeRef n, int priority, std::int64_t expiry_ns) {
  TreeNode& node = tree_.node(n);
  if (node.priority != priority) {
    for (int p = 0; p < num_pools(); ++p) {
      if (!tree_.block(n, p).valid()) continue;
      PoolState& s = pools_[p];
      --s.counters.cached_by_priority[node.priority];
      ++s.counters.cached_by_priority[priority];
      if (s.policy && s.policy->Contains(n)) s.policy->SetPriority(n, priority);
    }
    if (has_full_pools_ && tree_policy_->Contains(n)) tree_policy_->SetPriority(n, priority);
    node.priority = static_cast<std::uint8_t>(priority);
  }
  node.expiry_ns = expiry_ns;
  if (expiry_ns != kNoExpiry) {
    expiries_.push_back({expiry_ns, n, node.generation});
    std::push_heap(expiries_.begin(), expiries_.end(), &BlockCache::ExpiryLater);
  }
}

void BlockCache::ProcessExpiries(std::int64_t now_ns) {
  while (!expiries_.empty() && expiries_.front().at_ns <= now_ns) {
    std::pop_heap(expiries_.begin(), expiries_.end(), &BlockCache::ExpiryLater);
    const Expiry e = expiries_.back();
    expiries_.pop_back();
    const TreeNode& node = tree_.node(e.node);
    if (node.alive && node.generation == e.generation && node.expiry_ns == e.at_ns) {
      SetRetention(e.node, kDefaultPriority, kNoExpiry);
    }
  }
  // Stale entries (removed nodes, replaced expiries) are dropped when they surface; compact when
  // they dominate so the heap stays proportional to the tree.
  if (expiries_.size() > 2 * tree_.num_nodes() + 1024) {
    std::erase_if(expiries_, [&](const Expiry& e) {
      const TreeNode& node = tree_.node(e.node);
      return !node.alive || node.generation != e.generation || node.expiry_ns != e.at_ns;
    });
    std::make_heap(expiries_.begin(), expiries_.end(), &BlockCache::ExpiryLater);
  }
}

}  // namespace kvmesh
