// What an operator asks of a block manager (kvctl's live commands through the node): filtered
// pages of the cached blocks, a summary and a dump of the prefix tree, content ids by prefix, and
// eviction on request. The calls are BlockManager methods (declared in block_manager.h,
// implemented in block_manager_operator.cc); these are their argument and result types.
//
// Costs: every call takes the manager's lock once. A listing page scans at most max_scan nodes
// (the next page continues from its cursor), so a page never holds the lock for a scan of a whole
// large tree; the tree summary and the prefix resolution walk every node (O(nodes): about a
// millisecond per 100,000 nodes); eviction on request visits the selected subtree.
//
// Eviction on request (BlockManager::EvictCachedBlocks). The selection is either a block and
// every block below it (content_id), or every block whose priority is below `below_priority`.
// Selected nodes go leaves first, each as a whole (its block in every pool), under the manager's
// ordinary rules: a node goes only when nothing pins it (no running sequence, restore or transfer)
// and no child of it stays (a child without its parent could never be matched) — so a parent
// whose child is kept is kept too. Each node leaves through the same path as a claimed block
// (BlockCache::Claim): the eviction listener sees it (the tiers take a copy at or above their
// offload priority unless one is held: it is offloaded as an evicted block would be), KV events
// say removed, and the pool's statistics count it as claimed; its blocks are then free. A node
// missing a block in some (sliding-window) pool cannot be claimed and is kept (kept_partial).
// dry_run counts what would go without changing anything (the counts assume no concurrent change).
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/content_id.h"

namespace kvmesh {

struct CachedBlockFilter {
  std::optional<int> pool;  // only nodes holding a block in this pool
  int min_priority = 0;
  int max_priority = 100;
};

// The shape of the prefix tree now.
struct TreeSummary {
  std::int64_t nodes = 0;  // non-root nodes
  std::int64_t domains = 0;
  std::int64_t leaves = 0;
  std::int64_t pinned_nodes = 0;
  std::int32_t max_depth = -1;
  std::vector<std::int64_t> depth_histogram;   // [depth]
  std::vector<std::int64_t> fanout_histogram;  // [children] of inner nodes; the last bin: more
  std::vector<std::int64_t> domain_nodes;      // per domain, largest first
};

struct TreeDumpNode {
  ContentId content_id;
  ContentId parent_id;
  std::int32_t depth = 0;
  std::int32_t level = 0;  // below the start
  std::uint32_t children = 0;
  int priority = 0;
  std::uint32_t pins = 0;
  std::vector<std::int32_t> block_ids;  // per pool
};

struct TreeDump {
  std::vector<TreeDumpNode> nodes;  // preorder
  bool truncated = false;
};

struct EvictSelection {
  std::optional<ContentId> subtree;  // this node and every node below it
  std::optional<int> below_priority;
  bool dry_run = false;
};

struct EvictOutcome {
  std::int64_t evicted = 0;
  std::int64_t kept_pinned = 0;
  std::int64_t kept_for_descendants = 0;
  std::int64_t kept_partial = 0;
};

inline constexpr int kTreeFanoutBins = 17;  // 0..15 children, then 16 or more

}  // namespace kvmesh
