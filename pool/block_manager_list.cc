// BlockManager::FindBlock and ListCachedBlocks: what the manager knows of cached blocks
// (block_manager.h).
#include "common/strings.h"
#include "pool/block_manager.h"

namespace kvmesh {

CachedBlockInfo BlockManager::DescribeNode(NodeRef n) const {
  const PrefixTree& tree = cache_.tree();
  const TreeNode& node = tree.node(n);
  CachedBlockInfo info;
  info.content_id = node.content_id;
  info.parent_id = tree.parent_content_id(n);
  for (int p = 0; p < num_pools(); ++p) {
    const BlockId b = tree.block(n, p);
    info.block_ids.push_back(b.value);
    info.pins.push_back(b.valid() ? cache_.pins(p, b) : 0);
  }
  info.num_tokens = tokens_per_block();
  info.depth = node.depth;
  info.priority = node.priority;
  info.last_use = node.last_use;
  if (node.expiry_ns != kNoExpiry) info.priority_expiry = TimePoint(Nanos(node.expiry_ns));
  return info;
}

Result<CachedBlockInfo> BlockManager::FindBlock(const ContentId& id) const {
  MutexLock lock(&mu_);
  ExpireRetention();
  const NodeRef n = cache_.tree().FindByContentId(id);
  if (n == kNoNode) return Status::NotFound(StrCat("no cached block has content id ", id.ToHex()));
  return DescribeNode(n);
}

CachedBlockPage BlockManager::ListCachedBlocks(std::uint64_t cursor, std::size_t limit) const {
  CachedBlockPage page;
  MutexLock lock(&mu_);
  ExpireRetention();
  const PrefixTree& tree = cache_.tree();
  const std::uint64_t end = tree.node_capacity();
  std::uint64_t n = cursor;
  for (; n < end && page.blocks.size() < limit; ++n) {
    const auto ref = static_cast<NodeRef>(n);
    const TreeNode& node = tree.node(ref);
    if (!node.alive || node.is_root) continue;
    page.blocks.push_back(DescribeNode(ref));
  }
  page.next_cursor = n < end ? n : 0;
  return page;
}

}  // namespace kvmesh
