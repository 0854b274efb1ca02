// Block identity: what makes two blocks interchangeable, and the content id that names a block
// outside this process.
//
// A block's key is everything that determines its KV:
//   - the namespace (KeyNamespace): model id and revision, cache dtype, layout, tokens_per_block,
//     pool group (the set of pools one prefix tree serves, e.g. a digest of the pool plan) and
//     shard. Fixed per block manager;
//   - the cache domain of the request (CacheDomain): the per-tenant cache salt and the LoRA
//     adapter id. The salt comes from the server-side request, never from a peer;
//   - the parent block (the key is chained: block i of a prompt depends on blocks 0..i-1);
//   - the block's tokens and the multimodal items overlapping it (BlockMmRef: content hash of the
//     item and where it lies relative to the block).
//
// Inside the process the prefix tree compares full keys (parent node, tokens, multimodal refs; the
// namespace is the manager's and the domain is the tree root), so a hash collision can never
// return a wrong block. BlockKeyHash is only the in-process bucket hash, seeded per process.
//
// Content ids (what leaves the process: events, tiers, peers) are the first 128 bits of SHA-256
// (OpenSSL) over a canonical, length-prefixed little-endian encoding:
//   namespace digest = SHA256("kvmesh.ns.v1" | model_id | revision | dtype | layout |
//                             tokens_per_block | pool_group | shard_rank | shard_count)
//   domain id        = SHA256("kvmesh.domain.v1" | namespace digest | salt | lora_id)
//   block id         = SHA256("kvmesh.block.v1" | parent id | domain id | tokens | mm refs)
// where the parent id of a domain's first block is the domain id. Equal keys give equal ids; a
// change of any field gives a different id. One id names one tree node; the node's block in pool p
// is addressed as (content id, PoolId) — the tiers key blocks by that pair.
//
// Thread safety: values and pure functions. A ContentIdHasher is externally synchronised.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/content_id.h"
#include "kernels/kv_format.h"
#include "pool/block_ids.h"

namespace kvmesh {

struct KeyNamespace {
  std::string model_id;
  std::string revision;
  KvDtype cache_dtype = KvDtype::kBF16;
  KvLayout layout = KvLayout::kHND;
  std::int32_t tokens_per_block = 0;
  std::string pool_group;  // the pool set one tree serves, e.g. "full/8x128+sliding-1024/8x128"
  std::int32_t shard_rank = 0;
  std::int32_t shard_count = 1;

  friend bool operator==(const KeyNamespace&, const KeyNamespace&) = default;
};

// Everything of a request that applies to all of its blocks. Different domains never share a
// block; equal domains always can.
struct CacheDomain {
  std::string salt;           // per-tenant cache salt; empty = none
  std::uint64_t lora_id = 0;  // LoRA adapter id; 0 = the base model

  friend bool operator==(const CacheDomain&, const CacheDomain&) = default;
};

// A multimodal item (an image, an audio clip) of a prompt: its content hash and the placeholder
// tokens [begin_token, begin_token + num_tokens) it occupies.
struct MultimodalItem {
  ContentId hash;
  std::int64_t begin_token = 0;
  std::int64_t num_tokens = 0;
};

// A multimodal item as seen from one block: offset = item begin - block begin (negative when the
// item started in an earlier block).
struct BlockMmRef {
  ContentId hash;
  std::int64_t offset = 0;
  std::int64_t num_tokens = 0;
  friend bool operator==(const BlockMmRef&, const BlockMmRef&) = default;
};

// SHA-256 digest (128 bits) of the namespace.
ContentId NamespaceDigest(const KeyNamespace& ns);

// The id of a domain's tree root; the parent id of the domain's first block.
ContentId DomainContentId(const ContentId& namespace_digest, const CacheDomain& domain);

// Appends to `out` the refs of the items overlapping tokens [block_begin, block_begin + length).
// REQUIRES: items sorted by begin_token (the block manager validates this).
void MmRefsForBlock(std::span<const MultimodalItem> items, std::int64_t block_begin,
                    std::int64_t length, std::vector<BlockMmRef>* out);

// Computes content ids with one reused Sha256 context, so that a hash allocates nothing. Produces
// the same ids as the one-shot functions. Externally synchronised.
class ContentIdHasher {
 public:
  ContentId ForBlock(const ContentId& parent, const ContentId& domain,
                     std::span<const Token> tokens, std::span<const BlockMmRef> mm);
  ContentId ForDomain(const ContentId& namespace_digest, const CacheDomain& domain);

 private:
  Sha256 sha_;
};

// One-shot form of ContentIdHasher::ForBlock.
ContentId BlockContentId(const ContentId& parent, const ContentId& domain,
                         std::span<const Token> tokens, std::span<const BlockMmRef> mm);

// In-process bucket hash of (parent node, tokens, mm refs). Not an identity: the tree compares
// full keys. `seed` is chosen per process so that a client cannot aim collisions at one bucket.
std::uint64_t BlockKeyHash(std::uint64_t seed, std::uint32_t parent_node,
                           std::span<const Token> tokens, std::span<const BlockMmRef> mm);

}  // namespace kvmesh
