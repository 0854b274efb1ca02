// BlockManager's calls for operators (block_manager_operator.h): filtered listings, the tree's
// summary and dump, content ids by prefix, eviction on request.
#include <algorithm>
#include <unordered_map>

#include "common/strings.h"
#include "pool/block_manager.h"

namespace kvmesh {
namespace {

// The value of one hex digit, or -1.
int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool HasHexPrefix(const ContentId& id, std::string_view hex) {
  for (std::size_t i = 0; i < hex.size(); ++i) {
    const std::uint8_t byte = id.bytes[i / 2];
    const int nibble = i % 2 == 0 ? byte >> 4 : byte & 0xF;
    if (nibble != HexDigit(hex[i])) return false;
  }
  return true;
}

}  // namespace

BlockListPage BlockManager::ListCachedBlocks(std::uint64_t cursor, std::size_t limit,
                                             const CachedBlockFilter& filter,
                                             std::size_t max_scan) const {
  BlockListPage page;
  MutexLock lock(&mu_);
  ExpireRetention();
  const PrefixTree& tree = cache_.tree();
  page.total = static_cast<std::int64_t>(tree.num_nodes());
  const std::uint64_t end = tree.node_capacity();
  const std::int64_t now = NowNs();
  std::uint64_t n = cursor;
  for (; n < end && page.blocks.size() < limit && static_cast<std::size_t>(page.scanned) < max_scan;
       ++n) {
    const auto ref = static_cast<NodeRef>(n);
    const TreeNode& node = tree.node(ref);
    if (!node.alive || node.is_root) continue;
    ++page.scanned;
    if (node.priority < filter.min_priority || node.priority > filter.max_priority) continue;
    if (filter.pool && (*filter.pool < 0 || *filter.pool >= num_pools() ||
                        !tree.block(ref, *filter.pool).valid())) {
      continue;
    }
    ListedBlock b;
    b.info = DescribeNode(ref);
    if (node.expiry_ns != kNoExpiry)
      b.priority_expires_in_ns = std::max<std::int64_t>(0, node.expiry_ns - now);
    page.blocks.push_back(std::move(b));
  }
  page.next_cursor = n < end ? n : 0;
  return page;
}

TreeSummary BlockManager::SummarizeTree() const {
  TreeSummary s;
  MutexLock lock(&mu_);
  const PrefixTree& tree = cache_.tree();
  s.fanout_histogram.assign(kTreeFanoutBins, 0);
  std::vector<std::int64_t> per_root(tree.node_capacity(), 0);
  for (NodeRef n = 0; n < tree.node_capacity(); ++n) {
    const TreeNode& node = tree.node(n);
    if (!node.alive) continue;
    if (node.is_root) {
      ++s.domains;
      continue;
    }
    ++s.nodes;
    ++per_root[node.root];
    if (node.pins_total > 0) ++s.pinned_nodes;
    const auto depth = static_cast<std::size_t>(std::max(0, node.depth));
    if (s.depth_histogram.size() <= depth) s.depth_histogram.resize(depth + 1, 0);
    ++s.depth_histogram[depth];
    s.max_depth = std::max(s.max_depth, node.depth);
    if (node.num_children == 0) {
      ++s.leaves;
    } else {
      ++s.fanout_histogram[std::min<std::size_t>(node.num_children, kTreeFanoutBins - 1)];
    }
  }
  for (const std::int64_t c : per_root) {
    if (c > 0) s.domain_nodes.push_back(c);
  }
  std::sort(s.domain_nodes.rbegin(), s.domain_nodes.rend());
  return s;
}

Result<TreeDump> BlockManager::DumpTree(std::optional<ContentId> start, int max_depth,
                                        std::size_t max_nodes) const {
  TreeDump dump;
  MutexLock lock(&mu_);
  const PrefixTree& tree = cache_.tree();
  // (node, level), depth first; children pushed in reverse so that they pop in order.
  std::vector<std::pair<NodeRef, int>> stack;
  if (start) {
    const NodeRef n = tree.FindByContentId(*start);
    if (n == kNoNode || tree.node(n).is_root) {
      return Status::NotFound(StrCat("no cached block has content id ", start->ToHex()));
    }
    stack.emplace_back(n, 0);
  } else {
    std::vector<NodeRef> roots;
    tree.ForEachRoot([&](NodeRef r) { roots.push_back(r); });
    for (auto r = roots.rbegin(); r != roots.rend(); ++r) {
      std::vector<NodeRef> children;
      tree.ForEachChild(*r, [&](NodeRef c) { children.push_back(c); });
      for (auto c = children.rbegin(); c != children.rend(); ++c) stack.emplace_back(*c, 0);
    }
  }
  while (!stack.empty()) {
    const auto [n, level] = stack.back();
    stack.pop_back();
    if (dump.nodes.size() >= max_nodes) {
      dump.truncated = true;
      break;
    }
    const TreeNode& node = tree.node(n);
    TreeDumpNode d;
    d.content_id = node.content_id;
    d.parent_id = tree.parent_content_id(n);
    d.depth = node.depth;
    d.level = level;
    d.children = node.num_children;
    d.priority = node.priority;
    d.pins = node.pins_total;
    for (int p = 0; p < num_pools(); ++p) d.block_ids.push_back(tree.block(n, p).value);
    dump.nodes.push_back(std::move(d));
    if (node.num_children == 0) continue;
    if (level >= max_depth) {
      dump.truncated = true;
      continue;
    }
    std::vector<NodeRef> children;
    tree.ForEachChild(n, [&](NodeRef c) { children.push_back(c); });
    for (auto c = children.rbegin(); c != children.rend(); ++c) stack.emplace_back(*c, level + 1);
  }
  return dump;
}

Result<ContentId> BlockManager::ResolveContentIdPrefix(std::string_view hex) const {
  if (hex.empty() || hex.size() > 2 * ContentId::kBytes ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return HexDigit(c) >= 0; })) {
    return Status::InvalidArgument(
        StrCat("'", hex, "' is not a content id or a prefix of one (1 to 32 hex digits)"));
  }
  MutexLock lock(&mu_);
  const PrefixTree& tree = cache_.tree();
  if (hex.size() == 2 * ContentId::kBytes) {
    KVMESH_ASSIGN_OR_RETURN(const ContentId id, ContentId::FromHex(hex));
    const NodeRef n = tree.FindByContentId(id);
    if (n == kNoNode || tree.node(n).is_root) {
      return Status::NotFound(StrCat("no cached block has content id ", hex));
    }
    return id;
  }
  std::optional<ContentId> found;
  std::int64_t matches = 0;
  for (NodeRef n = 0; n < tree.node_capacity(); ++n) {
    const TreeNode& node = tree.node(n);
    if (!node.alive || node.is_root || !HasHexPrefix(node.content_id, hex)) continue;
    ++matches;
    found = node.content_id;
  }
  if (matches == 0) {
    return Status::NotFound(
        StrCat("no cached block's content id starts with ", hex,
               " (only the pool's blocks are looked up: one evicted, even into a tier, is not)"));
  }
  if (matches > 1) {
    return Status::InvalidArgument(StrCat(matches, " cached blocks have content ids starting with ",
                                          hex, ": give more digits"));
  }
  return *found;
}

Result<EvictOutcome> BlockManager::EvictCachedBlocks(const EvictSelection& selection) {
  if (selection.subtree.has_value() == selection.below_priority.has_value()) {
    return Status::InvalidArgument("evict: give either a content id or a priority, not both");
  }
  EvictOutcome out;
  MutexLock lock(&mu_);
  ExpireRetention();
  PrefixTree& tree = cache_.tree();
  // Post-order (children before their parent) over the selected subtrees; handles, since a
  // removal may prune blockless ancestors.
  std::vector<NodeHandle> order;
  std::vector<NodeRef> starts;
  if (selection.subtree) {
    const NodeRef n = tree.FindByContentId(*selection.subtree);
    if (n == kNoNode || tree.node(n).is_root) {
      return Status::NotFound(
          StrCat("no cached block has content id ", selection.subtree->ToHex()));
    }
    starts.push_back(n);
  } else {
    tree.ForEachRoot(
        [&](NodeRef r) { tree.ForEachChild(r, [&](NodeRef c) { starts.push_back(c); }); });
  }
  for (const NodeRef s : starts) {
    // Iterative post-order: push a node twice (first to expand, then to emit).
    std::vector<std::pair<NodeRef, bool>> work{{s, false}};
    while (!work.empty()) {
      auto [n, expanded] = work.back();
      work.pop_back();
      if (expanded) {
        order.push_back(tree.handle(n));
        continue;
      }
      work.emplace_back(n, true);
      tree.ForEachChild(n, [&](NodeRef c) { work.emplace_back(c, false); });
    }
  }
  const auto selected = [&](const TreeNode& node) {
    return selection.subtree.has_value() || node.priority < *selection.below_priority;
  };
  const auto has_every_block = [&](NodeRef n) {
    for (int p = 0; p < num_pools(); ++p) {
      if (!tree.block(n, p).valid()) return false;
    }
    return true;
  };
  // Dry run: nodes with a descendant that would stay (so they stay too).
  std::unordered_map<NodeRef, bool> keeps;
  std::vector<BlockId> claimed(static_cast<std::size_t>(num_pools()));
  for (const NodeHandle& h : order) {
    if (!tree.IsCurrent(h)) continue;
    const NodeRef n = h.node;
    const TreeNode& node = tree.node(n);
    bool keep = false;
    if (!selected(node)) {
      keep = true;
    } else if (selection.dry_run ? keeps[n] : node.num_children > 0) {
      ++out.kept_for_descendants;
      keep = true;
    } else if (node.pins_total > 0) {
      ++out.kept_pinned;
      keep = true;
    } else if (selection.dry_run ? !has_every_block(n) : !cache_.CanClaim(n)) {
      // (A dry run keeps the children it would drop: what CanClaim would say once they went.)
      ++out.kept_partial;
      keep = true;
    }
    if (keep) {
      if (selection.dry_run && node.parent != kNoNode) keeps[node.parent] = true;
      continue;
    }
    ++out.evicted;
    if (selection.dry_run) continue;
    cache_.Claim(n, claimed);
    for (int p = 0; p < num_pools(); ++p) cache_.Unpin(p, claimed[static_cast<std::size_t>(p)]);
  }
  FlushEvents();
  return out;
}

}  // namespace kvmesh
