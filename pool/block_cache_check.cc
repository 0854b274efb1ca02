// BlockCache::CheckInvariants: recomputes every counter, index and policy membership from scratch
// and compares. O(blocks + nodes); for tests and debugging.
#include <vector>

#include "common/strings.h"
#include "pool/block_cache.h"

namespace kvmesh {

#define KVMESH_INVARIANT(cond, ...) \
  if (!(cond)) return Status::Internal(StrCat("invariant ", #cond, ": ", __VA_ARGS__))

Status BlockCache::CheckNode(NodeRef n, std::vector<std::int64_t>* cached_by_prio) const {
  const TreeNode& node = tree_.node(n);
  KVMESH_INVARIANT(tree_.node(node.parent).alive, "node ", n, " has a dead parent");
  // The parent's child list contains n.
  bool linked = false;
  tree_.ForEachChild(node.parent, [&](NodeRef c) { linked = linked || c == n; });
  KVMESH_INVARIANT(linked, "node ", n, " is not in its parent's child list");
  std::uint32_t children = 0;
  std::uint32_t blocked = 0;
  tree_.ForEachChild(n, [&](NodeRef c) {
    ++children;
    blocked += tree_.node(c).removable ? 0 : 1;
  });
  KVMESH_INVARIANT(children == node.num_children, "node ", n, " child count");
  KVMESH_INVARIANT(blocked == node.blocked_children, "node ", n, " blocked children ", blocked,
                   " vs ", node.blocked_children);
  std::uint32_t pins = 0;
  bool any_block = false;
  for (int p = 0; p < num_pools(); ++p) {
    const BlockId b = tree_.block(n, p);
    if (!b.valid()) {
      KVMESH_INVARIANT(is_window(p), "node ", n, " lacks its block in full pool ", p);
      KVMESH_INVARIANT(!pools_[p].policy->Contains(n), "node ", n, " in pool ", p, " policy");
      continue;
    }
    any_block = true;
    const BlockSlot& sl = pools_[p].slots[b.value];
    KVMESH_INVARIANT(sl.allocated && sl.node == n, "pool ", p, " block ", b.value,
                     " does not point back to node ", n);
    pins += sl.pins;
    (*cached_by_prio)[p * (kMaxPriority + 1) + node.priority] += 1;
    if (is_window(p)) {
      KVMESH_INVARIANT(pools_[p].policy->Contains(n) == (sl.pins == 0), "pool ", p,
                       " policy membership of node ", n);
    }
  }
  KVMESH_INVARIANT(any_block || node.num_children > 0, "node ", n,
                   " keeps neither a block nor a child");
  KVMESH_INVARIANT(pins == node.pins_total, "node ", n, " pins ", pins, " vs ", node.pins_total);
  KVMESH_INVARIANT(node.removable == (pins == 0 && blocked == 0), "node ", n, " removable flag");
  if (has_full_pools_) {
    KVMESH_INVARIANT(tree_policy_->Contains(n) == WantTreeCandidate(n), "node ", n,
                     " tree policy membership");
  }
  return Status::Ok();
}

std::int64_t BlockCache::TotalPins(int p) const {
  std::int64_t total = 0;
  for (const BlockSlot& sl : pools_[p].slots) total += sl.pins;
  return total;
}

Status BlockCache::CheckInvariants() const {
  std::vector<std::int64_t> cached_by_prio(num_pools() * (kMaxPriority + 1), 0);
  std::int64_t removable = 0;
  std::size_t live = 0;
  std::size_t candidates = 0;
  for (NodeRef n = 0; n < tree_.node_capacity(); ++n) {
    const TreeNode& node = tree_.node(n);
    if (!node.alive) continue;
    if (node.is_root) {
      KVMESH_INVARIANT(node.root_refs > 0 || node.num_children > 0, "unused root ", n);
      KVMESH_INVARIANT(!tree_.HasAnyBlock(n), "root ", n, " holds a block");
      continue;
    }
    ++live;
    KVMESH_RETURN_IF_ERROR(CheckNode(n, &cached_by_prio));
    removable += node.removable ? 1 : 0;
    candidates += has_full_pools_ && WantTreeCandidate(n) ? 1 : 0;
  }
  KVMESH_INVARIANT(live == tree_.num_nodes(), "live nodes ", live, " vs ", tree_.num_nodes());
  KVMESH_INVARIANT(removable == num_removable_, "removable ", removable, " vs ", num_removable_);
  if (has_full_pools_) {
    KVMESH_INVARIANT(candidates == tree_policy_->size(), "tree policy size");
  }
  for (int p = 0; p < num_pools(); ++p) {
    const PoolState& s = pools_[p];
    std::int64_t allocated = 0, cached = 0, pinned = 0, unpinned_cached = 0, moving = 0;
    for (const BlockSlot& sl : s.slots) {
      if (!sl.allocated) {
        KVMESH_INVARIANT(sl.pins == 0 && sl.node == kNoNode && !sl.moving_out,
                         "free block of pool ", p, " has pins, a node or a move");
        continue;
      }
      if (sl.moving_out) {
        KVMESH_INVARIANT(sl.pins == 0 && sl.node == kNoNode, "moving-out block of pool ", p,
                         " has pins or a node");
        ++allocated;
        ++moving;
        continue;
      }
      ++allocated;
      pinned += sl.pins > 0 ? 1 : 0;
      if (sl.node != kNoNode) {
        ++cached;
        unpinned_cached += sl.pins == 0 ? 1 : 0;
        KVMESH_INVARIANT(tree_.node(sl.node).alive, "pool ", p, " block cached by a dead node");
      } else {
        KVMESH_INVARIANT(sl.pins > 0, "pool ", p, " private block without pins leaked");
      }
    }
    KVMESH_INVARIANT(allocated == s.allocator.num_allocated(), "pool ", p, " allocated ", allocated,
                     " vs allocator ", s.allocator.num_allocated());
    KVMESH_INVARIANT(cached == s.num_cached, "pool ", p, " cached count");
    KVMESH_INVARIANT(moving == s.num_moving_out, "pool ", p, " moving-out count ", moving, " vs ",
                     s.num_moving_out);
    KVMESH_INVARIANT(pinned == s.num_pinned, "pool ", p, " pinned count");
    if (s.policy) {
      KVMESH_INVARIANT(static_cast<std::int64_t>(s.policy->size()) == unpinned_cached, "pool ", p,
                       " policy size");
    }
    for (int prio = 0; prio <= kMaxPriority; ++prio) {
      KVMESH_INVARIANT(
          cached_by_prio[p * (kMaxPriority + 1) + prio] == s.counters.cached_by_priority[prio],
          "pool ", p, " cached blocks at priority ", prio);
    }
  }
  return Status::Ok();
}

#undef KVMESH_INVARIANT

}  // namespace kvmesh
