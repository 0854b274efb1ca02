#include "pool/prefix_tree.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace kvmesh {
namespace {

std::uint64_t ContentHash(const ContentId& id) {
  std::uint64_t h;
  std::memcpy(&h, id.bytes.data(), sizeof(h));
  return h;
}

}  // namespace

PrefixTree::PrefixTree(std::int32_t tokens_per_block, int num_pools,
                       const ContentId& namespace_digest, std::uint64_t hash_seed)
    : tokens_per_block_(tokens_per_block),
      num_pools_(num_pools),
      namespace_digest_(namespace_digest),
      hash_seed_(hash_seed) {
  KVMESH_CHECK(tokens_per_block > 0 && num_pools > 0);
}

NodeRef PrefixTree::NewNode() {
  NodeRef n;
  if (!free_nodes_.empty()) {
    n = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    n = static_cast<NodeRef>(nodes_.size());
    KVMESH_CHECK(n != kNoNode) << "prefix tree node index overflow";
    nodes_.emplace_back();
    tokens_.resize(tokens_.size() + tokens_per_block_);
    blocks_.resize(blocks_.size() + num_pools_, kNoBlock);
  }
  TreeNode& node = nodes_[n];
  const std::uint32_t generation = node.generation;
  node = TreeNode{};
  node.generation = generation;
  node.alive = true;
  return n;
}

void PrefixTree::FreeNode(NodeRef n) {
  TreeNode& node = nodes_[n];
  if (node.mm_slot != kNoNode) {
    mm_slots_[node.mm_slot].clear();
    free_mm_slots_.push_back(node.mm_slot);
  }
  node.alive = false;
  ++node.generation;
  free_nodes_.push_back(n);
}

NodeRef PrefixTree::AcquireRoot(const CacheDomain& domain) {
  DomainKey key{domain.salt, domain.lora_id};
  auto it = roots_.find(key);
  if (it == roots_.end()) {
    const NodeRef r = NewNode();
    TreeNode& root = nodes_[r];
    root.is_root = true;
    root.root = r;
    auto cached = domain_ids_.find(key);
    if (cached == domain_ids_.end()) {
      // Roots come and go with their last sequence; the id of a recent domain is kept so that
      // re-creating its root costs no hash. Bounded: cleared when it grows past the limit.
      if (domain_ids_.size() >= kDomainIdCacheSize) domain_ids_.clear();
      cached = domain_ids_.emplace(key, hasher_.ForDomain(namespace_digest_, domain)).first;
    }
    root.content_id = cached->second;
    it = roots_.emplace(std::move(key), r).first;
  }
  ++nodes_[it->second].root_refs;
  return it->second;
}

NodeRef PrefixTree::FindRoot(const CacheDomain& domain) const {
  auto it = roots_.find(DomainKey{domain.salt, domain.lora_id});
  return it == roots_.end() ? kNoNode : it->second;
}

void PrefixTree::ReleaseRoot(NodeRef root) {
  TreeNode& r = nodes_[root];
  KVMESH_CHECK(r.is_root && r.root_refs > 0) << "releasing root " << root;
  --r.root_refs;
  RemoveRootIfUnused(root);
}

void PrefixTree::RemoveRootIfUnused(NodeRef root) {
  const TreeNode& r = nodes_[root];
  if (!r.is_root || r.root_refs > 0 || r.num_children > 0) return;
  for (auto it = roots_.begin(); it != roots_.end(); ++it) {
    if (it->second == root) {
      roots_.erase(it);
      break;
    }
  }
  FreeNode(root);
}

bool PrefixTree::KeyEquals(NodeRef n, std::span<const Token> tokens,
                           std::span<const BlockMmRef> mm) const {
  if (std::memcmp(tokens_.data() + static_cast<std::size_t>(n) * tokens_per_block_, tokens.data(),
                  tokens.size_bytes()) != 0) {
    return false;
  }
  const auto own = this->mm(n);
  return std::equal(own.begin(), own.end(), mm.begin(), mm.end());
}

NodeRef PrefixTree::FindChild(NodeRef parent, std::span<const Token> tokens,
                              std::span<const BlockMmRef> mm, std::uint64_t hash) const {
  KVMESH_DCHECK(tokens.size() == static_cast<std::size_t>(tokens_per_block_));
  return children_.Find(
      hash, [&](NodeRef c) { return nodes_[c].parent == parent && KeyEquals(c, tokens, mm); });
}

NodeRef PrefixTree::AddChild(NodeRef parent, std::span<const Token> tokens,
                             std::span<const BlockMmRef> mm, std::uint64_t hash,
                             const ContentId* content_id) {
  KVMESH_CHECK(tokens.size() == static_cast<std::size_t>(tokens_per_block_));
  KVMESH_DCHECK(hash == KeyHash(parent, tokens, mm));
  KVMESH_DCHECK(FindChild(parent, tokens, mm, hash) == kNoNode);
  const NodeRef n = NewNode();
  TreeNode& node = nodes_[n];
  TreeNode& p = nodes_[parent];
  node.parent = parent;
  node.root = p.root;
  node.depth = p.depth + 1;
  node.key_hash = hash;
  std::memcpy(tokens_.data() + static_cast<std::size_t>(n) * tokens_per_block_, tokens.data(),
              tokens.size_bytes());
  if (!mm.empty()) {
    if (free_mm_slots_.empty()) {
      node.mm_slot = static_cast<std::uint32_t>(mm_slots_.size());
      mm_slots_.emplace_back();
    } else {
      node.mm_slot = free_mm_slots_.back();
      free_mm_slots_.pop_back();
    }
    mm_slots_[node.mm_slot].assign(mm.begin(), mm.end());
  }
  if (content_id != nullptr) {
    node.content_id = *content_id;
    KVMESH_DCHECK(node.content_id == ChildContentId(p.content_id, node.root, tokens, mm));
  } else {
    node.content_id = ChildContentId(p.content_id, node.root, tokens, mm);
  }
  // Link as the first child.
  node.next_sibling = p.first_child;
  if (p.first_child != kNoNode) nodes_[p.first_child].prev_sibling = n;
  p.first_child = n;
  ++p.num_children;
  children_.Insert(node.key_hash, n);
  by_content_.Insert(ContentHash(node.content_id), n);
  ++num_nodes_;
  return n;
}

void PrefixTree::RemoveLeaf(NodeRef n) {
  TreeNode& node = nodes_[n];
  KVMESH_CHECK(node.alive && !node.is_root && node.num_children == 0)
      << "RemoveLeaf of node " << n << " that is not a live leaf";
  KVMESH_DCHECK(!HasAnyBlock(n));
  TreeNode& p = nodes_[node.parent];
  if (node.prev_sibling != kNoNode) {
    nodes_[node.prev_sibling].next_sibling = node.next_sibling;
  } else {
    p.first_child = node.next_sibling;
  }
  if (node.next_sibling != kNoNode) nodes_[node.next_sibling].prev_sibling = node.prev_sibling;
  --p.num_children;
  children_.Erase(node.key_hash, n);
  by_content_.Erase(ContentHash(node.content_id), n);
  --num_nodes_;
  FreeNode(n);
}

NodeRef PrefixTree::FindByContentId(const ContentId& id) const {
  return by_content_.Find(ContentHash(id), [&](NodeRef n) { return nodes_[n].content_id == id; });
}

bool PrefixTree::HasAnyBlock(NodeRef n) const {
  for (int p = 0; p < num_pools_; ++p) {
    if (block(n, p).valid()) return true;
  }
  return false;
}

}  // namespace kvmesh
