// PrefixTree: the content-addressed tree of cached token blocks of one model (one namespace).
//
// A node is one full token block of a prefix: tokens_per_block tokens, the multimodal refs that
// overlap them, its parent, and one block slot per pool (kNoBlock where that pool holds none).
// Roots are cache domains (salt, LoRA adapter): a root has no tokens and no blocks, and its
// content id is the domain id, so blocks of different domains can never meet in one subtree.
//
// Children are found through one hash index over (parent, tokens, mm refs) and compared by full
// key — tokens and mm refs — never by hash alone. Nodes are also indexed by content id (128-bit
// SHA-256, see block_key.h), the key by which tiers, peers and events name a block.
//
// Storage is flat: nodes live in a vector and are named by index (NodeRef); a removed node's index
// is reused, and its generation counter is bumped so that a stale NodeHandle can be detected.
// Tokens live in one arena ([node][tokens_per_block]) and block slots in another
// ([node][num_pools]); creating or removing a node allocates only when those vectors grow
// (multimodal refs, rare, are kept in a side table).
//
// The tree holds structure only. Which blocks are pinned, evictable or free is the BlockCache's
// business (block_cache.h). Thread safety: externally synchronised.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/content_id.h"
#include "pool/block_ids.h"
#include "pool/block_key.h"
#include "pool/eviction_policy.h"
#include "pool/flat_node_index.h"

namespace kvmesh {

using NodeRef = std::uint32_t;
inline constexpr NodeRef kNoNode = FlatNodeIndex::kEmpty;
inline constexpr std::int64_t kNoExpiry = std::numeric_limits<std::int64_t>::max();

// A node index with the generation it had when taken; stale once the node is removed.
struct NodeHandle {
  NodeRef node = kNoNode;
  std::uint32_t generation = 0;
};

struct TreeNode {
  std::uint64_t key_hash = 0;  // bucket hash in the children index
  ContentId content_id;
  std::uint64_t last_use = 0;          // stamp of the last time the node became unpinned
  std::int64_t expiry_ns = kNoExpiry;  // when `priority` falls back to kDefaultPriority
  NodeRef parent = kNoNode;
  NodeRef root = kNoNode;  // the domain root above this node (itself for a root)
  NodeRef first_child = kNoNode;
  NodeRef prev_sibling = kNoNode;
  NodeRef next_sibling = kNoNode;
  std::uint32_t num_children = 0;
  std::uint32_t generation = 0;
  // Block-cache bookkeeping (block_cache.h): pins over all pools, children that are not
  // removable, sequences using a root.
  std::uint32_t pins_total = 0;
  std::uint32_t blocked_children = 0;
  std::uint32_t root_refs = 0;
  std::uint32_t mm_slot = kNoNode;  // index into the mm side table, or kNoNode
  std::int32_t depth = -1;          // block index of this block in its prompts; -1 for a root
  std::uint8_t priority = kDefaultPriority;
  bool alive = false;
  bool is_root = false;
  bool removable = true;  // no pins in this node's subtree (block_cache.h)
};

class PrefixTree {
 public:
  // REQUIRES: tokens_per_block > 0, num_pools > 0.
  PrefixTree(std::int32_t tokens_per_block, int num_pools, const ContentId& namespace_digest,
             std::uint64_t hash_seed);

  [[nodiscard]] std::int32_t tokens_per_block() const { return tokens_per_block_; }
  [[nodiscard]] int num_pools() const { return num_pools_; }
  [[nodiscard]] const ContentId& namespace_digest() const { return namespace_digest_; }

  // The root of `domain`, created on first use; each call takes a reference that ReleaseRoot
  // gives back. A root without references and children is removed.
  NodeRef AcquireRoot(const CacheDomain& domain);
  void ReleaseRoot(NodeRef root);
  // The root of `domain` if it exists, else kNoNode. Takes no reference.
  [[nodiscard]] NodeRef FindRoot(const CacheDomain& domain) const;

  // The bucket hash of a child key (BlockKeyHash with this tree's seed).
  [[nodiscard]] std::uint64_t KeyHash(NodeRef parent, std::span<const Token> tokens,
                                      std::span<const BlockMmRef> mm) const {
    return BlockKeyHash(hash_seed_, parent, tokens, mm);
  }
  // The child of `parent` with exactly these tokens and mm refs, or kNoNode. `hash` is
  // KeyHash(parent, tokens, mm) when the caller has it already.
  [[nodiscard]] NodeRef FindChild(NodeRef parent, std::span<const Token> tokens,
                                  std::span<const BlockMmRef> mm) const {
    return FindChild(parent, tokens, mm, KeyHash(parent, tokens, mm));
  }
  [[nodiscard]] NodeRef FindChild(NodeRef parent, std::span<const Token> tokens,
                                  std::span<const BlockMmRef> mm, std::uint64_t hash) const;
  // Creates that child (no blocks yet; content id computed). REQUIRES: it does not exist,
  // tokens.size() == tokens_per_block, hash == KeyHash(parent, tokens, mm).
  // `content_id`: ChildContentId of the same arguments when the caller computed it already (the
  // SHA-256 is then not computed again); null computes it.
  NodeRef AddChild(NodeRef parent, std::span<const Token> tokens, std::span<const BlockMmRef> mm,
                   std::uint64_t hash, const ContentId* content_id = nullptr);
  NodeRef AddChild(NodeRef parent, std::span<const Token> tokens, std::span<const BlockMmRef> mm) {
    return AddChild(parent, tokens, mm, KeyHash(parent, tokens, mm));
  }
  // Removes a non-root leaf. Its block slots must be empty (the block cache frees them first).
  void RemoveLeaf(NodeRef node);
  // Removes a root with no children and no references.
  void RemoveRootIfUnused(NodeRef root);

  [[nodiscard]] NodeRef FindByContentId(const ContentId& id) const;
  // The content id that a child with these tokens and mm refs gets under a node whose content id
  // is `parent_id`, in the domain of `root` (what AddChild computes). Not const: the hasher's
  // context is reused.
  ContentId ChildContentId(const ContentId& parent_id, NodeRef root, std::span<const Token> tokens,
                           std::span<const BlockMmRef> mm) {
    return hasher_.ForBlock(parent_id, nodes_[root].content_id, tokens, mm);
  }

  TreeNode& node(NodeRef n) { return nodes_[n]; }
  [[nodiscard]] const TreeNode& node(NodeRef n) const { return nodes_[n]; }
  [[nodiscard]] NodeHandle handle(NodeRef n) const { return {n, nodes_[n].generation}; }
  [[nodiscard]] bool IsCurrent(const NodeHandle& h) const {
    return h.node != kNoNode && h.node < nodes_.size() && nodes_[h.node].alive &&
           nodes_[h.node].generation == h.generation;
  }
  [[nodiscard]] std::span<const Token> tokens(NodeRef n) const {
    return {tokens_.data() + static_cast<std::size_t>(n) * tokens_per_block_,
            static_cast<std::size_t>(tokens_per_block_)};
  }
  [[nodiscard]] std::span<const BlockMmRef> mm(NodeRef n) const {
    const std::uint32_t s = nodes_[n].mm_slot;
    if (s == kNoNode) return {};
    return mm_slots_[s];
  }
  [[nodiscard]] BlockId block(NodeRef n, int pool) const {
    return blocks_[static_cast<std::size_t>(n) * num_pools_ + pool];
  }
  void set_block(NodeRef n, int pool, BlockId b) {
    blocks_[static_cast<std::size_t>(n) * num_pools_ + pool] = b;
  }
  [[nodiscard]] bool HasAnyBlock(NodeRef n) const;
  // The content id of the node's parent (the domain id for a depth-0 node).
  [[nodiscard]] const ContentId& parent_content_id(NodeRef n) const {
    return nodes_[nodes_[n].parent].content_id;
  }

  // Alive non-root nodes.
  [[nodiscard]] std::size_t num_nodes() const { return num_nodes_; }
  [[nodiscard]] std::size_t num_roots() const { return roots_.size(); }
  // One past the largest node index ever used (for iteration over nodes()).
  [[nodiscard]] NodeRef node_capacity() const { return static_cast<NodeRef>(nodes_.size()); }

  template <typename F>
  void ForEachChild(NodeRef parent, F&& f) const {
    for (NodeRef c = nodes_[parent].first_child; c != kNoNode; c = nodes_[c].next_sibling) f(c);
  }
  template <typename F>
  void ForEachRoot(F&& f) const {
    for (const auto& [key, root] : roots_) f(root);
  }

 private:
  using DomainKey = std::pair<std::string, std::uint64_t>;

  NodeRef NewNode();
  void FreeNode(NodeRef n);
  [[nodiscard]] bool KeyEquals(NodeRef n, std::span<const Token> tokens,
                               std::span<const BlockMmRef> mm) const;

  std::int32_t tokens_per_block_;
  int num_pools_;
  ContentId namespace_digest_;
  std::uint64_t hash_seed_;

  std::vector<TreeNode> nodes_;
  std::vector<NodeRef> free_nodes_;
  std::vector<Token> tokens_;    // [node][tokens_per_block]
  std::vector<BlockId> blocks_;  // [node][num_pools]
  std::vector<std::vector<BlockMmRef>> mm_slots_;
  std::vector<std::uint32_t> free_mm_slots_;
  FlatNodeIndex children_;    // key_hash -> node
  FlatNodeIndex by_content_;  // first 8 bytes of the content id -> node
  std::map<DomainKey, NodeRef> roots_;
  static constexpr std::size_t kDomainIdCacheSize = 4096;
  std::map<DomainKey, ContentId> domain_ids_;
  std::size_t num_nodes_ = 0;
  ContentIdHasher hasher_;
};

}  // namespace kvmesh
