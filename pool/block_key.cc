#include "pool/block_key.h"

#include <bit>
#include <cstring>

#include "common/check.h"

namespace kvmesh {
namespace {

static_assert(std::endian::native == std::endian::little,
              "content ids hash tokens as little-endian int32; a big-endian host needs a swap");

// The byte encodings below are written against any hasher with Update/UpdateValue, so that the
// one-shot (Sha256) and the reusable (ContentIdHasher) paths cannot drift apart.
template <typename H>
void PutString(H& h, const std::string& s) {
  h.UpdateValue(static_cast<std::uint32_t>(s.size()));
  h.Update(s.data(), s.size());
}

template <typename H>
void PutTag(H& h, const char* tag) {
  h.Update(tag, std::strlen(tag));
}

template <typename H>
void PutBlock(H& h, const ContentId& parent, const ContentId& domain, std::span<const Token> tokens,
              std::span<const BlockMmRef> mm) {
  PutTag(h, "kvmesh.block.v1");
  h.Update(parent.bytes.data(), parent.bytes.size());
  h.Update(domain.bytes.data(), domain.bytes.size());
  h.UpdateValue(static_cast<std::uint32_t>(tokens.size()));
  h.Update(tokens.data(), tokens.size_bytes());
  h.UpdateValue(static_cast<std::uint32_t>(mm.size()));
  for (const BlockMmRef& r : mm) {
    h.Update(r.hash.bytes.data(), r.hash.bytes.size());
    h.UpdateValue(r.offset);
    h.UpdateValue(r.num_tokens);
  }
}

template <typename H>
void PutDomain(H& h, const ContentId& namespace_digest, const CacheDomain& domain) {
  PutTag(h, "kvmesh.domain.v1");
  h.Update(namespace_digest.bytes.data(), namespace_digest.bytes.size());
  PutString(h, domain.salt);
  h.UpdateValue(domain.lora_id);
}

constexpr std::uint64_t kMul1 = 0x9E3779B97F4A7C15ULL;
constexpr std::uint64_t kMul2 = 0xC2B2AE3D27D4EB4FULL;

inline std::uint64_t Mix(std::uint64_t h, std::uint64_t w) {
  h ^= w * kMul1;
  h = std::rotl(h, 31) * kMul2;
  return h;
}

inline std::uint64_t Finalize(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 33;
  return h;
}

}  // namespace

ContentId NamespaceDigest(const KeyNamespace& ns) {
  Sha256 h;
  PutTag(h, "kvmesh.ns.v1");
  PutString(h, ns.model_id);
  PutString(h, ns.revision);
  h.UpdateValue(static_cast<std::uint8_t>(ns.cache_dtype));
  h.UpdateValue(static_cast<std::uint8_t>(ns.layout));
  h.UpdateValue(ns.tokens_per_block);
  PutString(h, ns.pool_group);
  h.UpdateValue(ns.shard_rank);
  h.UpdateValue(ns.shard_count);
  return h.FinishContentId();
}

ContentId DomainContentId(const ContentId& namespace_digest, const CacheDomain& domain) {
  Sha256 h;
  PutDomain(h, namespace_digest, domain);
  return h.FinishContentId();
}

void MmRefsForBlock(std::span<const MultimodalItem> items, std::int64_t block_begin,
                    std::int64_t length, std::vector<BlockMmRef>* out) {
  const std::int64_t block_end = block_begin + length;
  for (const MultimodalItem& item : items) {
    if (item.begin_token >= block_end) break;  // sorted by begin
    if (item.begin_token + item.num_tokens <= block_begin) continue;
    out->push_back({item.hash, item.begin_token - block_begin, item.num_tokens});
  }
}

ContentId ContentIdHasher::ForBlock(const ContentId& parent, const ContentId& domain,
                                    std::span<const Token> tokens, std::span<const BlockMmRef> mm) {
  PutBlock(sha_, parent, domain, tokens, mm);
  return sha_.FinishContentId();
}

ContentId ContentIdHasher::ForDomain(const ContentId& namespace_digest, const CacheDomain& domain) {
  PutDomain(sha_, namespace_digest, domain);
  return sha_.FinishContentId();
}

ContentId BlockContentId(const ContentId& parent, const ContentId& domain,
                         std::span<const Token> tokens, std::span<const BlockMmRef> mm) {
  Sha256 h;  // the generic path; tests check that ContentIdHasher agrees with it
  PutBlock(h, parent, domain, tokens, mm);
  return h.FinishContentId();
}

std::uint64_t BlockKeyHash(std::uint64_t seed, std::uint32_t parent_node,
                           std::span<const Token> tokens, std::span<const BlockMmRef> mm) {
  // Four independent lanes of 8 bytes so that the multiplies overlap (about 4 bytes a cycle).
  std::uint64_t lane[4] = {seed, seed ^ kMul2, seed + kMul1, ~seed};
  const auto* bytes = reinterpret_cast<const unsigned char*>(tokens.data());
  const std::size_t size = tokens.size_bytes();
  std::size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    std::uint64_t w[4];
    std::memcpy(w, bytes + i, sizeof(w));
    for (int k = 0; k < 4; ++k) lane[k] = Mix(lane[k], w[k]);
  }
  std::uint64_t h = Mix(Mix(lane[0], lane[1]), Mix(lane[2], lane[3]));
  for (; i + 8 <= size; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, bytes + i, sizeof(w));
    h = Mix(h, w);
  }
  if (i < size) {  // one trailing token
    std::uint32_t w;
    std::memcpy(&w, bytes + i, sizeof(w));
    h = Mix(h, w);
  }
  h = Mix(Mix(h, size), parent_node);
  for (const BlockMmRef& r : mm) {
    std::uint64_t w;
    std::memcpy(&w, r.hash.bytes.data(), sizeof(w));
    h = Mix(Mix(Mix(h, w), static_cast<std::uint64_t>(r.offset)),
            static_cast<std::uint64_t>(r.num_tokens));
  }
  return Finalize(h);
}

}  // namespace kvmesh
