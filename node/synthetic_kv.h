// The synthetic engine's KV: K and V as a pure function of where they belong, so that any process
// can regenerate what any block must hold, and a dense reference for its attention outputs.
//
// Position seeds. Token position p of a sequence lies in block b = p / T (T tokens per block).
//   seed(p) = Mix(parent content id of block b, tokens of block b from its first token to p)
// where the parent content id is that of block b-1 (the domain id for b = 0), computed as the
// block manager computes content ids (pool/block_key.h: namespace digest, salt and LoRA id,
// chained over the full blocks; the namespace taken as if the pools were HND: the node's
// order_free_namespace_digest, so K/V do not depend on the memory order). So seed(p) depends on
// exactly what the KV of position p depends on — the prefix up to p and its cache domain — and
// never changes when tokens are appended.
//
// Values. For (seed, layer, kv, head) a splitmix64 stream gives head_dim values uniform in
// [-a, a), with an amplitude a in [0.25, 4] that varies per (position, head), so per-(token, head)
// scales of fp8/int8 and nvfp4's block scales take many values. Layers and heads are global (a
// tensor-parallel rank regenerates its own heads). Queries come from a seed of (request, step).
//
// Reference. DenseAttention computes one query row in float64 over keys and values regenerated,
// then quantised and dequantised exactly as the pool's dtype stores them (kernels/quantize.h),
// with the kernels' window rule. A wrong, stale, partial or corrupt block, or a block without its
// scales, changes the kernel's output by far more than the tolerance (AttentionMatches).
//
// Thread safety: pure functions; a PositionSeeds object is externally synchronised.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/content_id.h"
#include "kernels/kv_format.h"
#include "pool/block_ids.h"
#include "pool/block_key.h"

namespace kvmesh {

// Seeds of a sequence's positions, extended as tokens arrive.
class PositionSeeds {
 public:
  PositionSeeds(const ContentId& namespace_digest, const CacheDomain& domain,
                std::int32_t tokens_per_block);
  // Appends the seeds of `tokens` (positions size() .. size() + tokens.size() - 1).
  void Append(std::span<const Token> tokens);
  [[nodiscard]] std::int64_t size() const { return static_cast<std::int64_t>(seeds_.size()); }
  [[nodiscard]] std::uint64_t at(std::int64_t position) const {
    return seeds_[static_cast<std::size_t>(position)];
  }
  [[nodiscard]] std::span<const std::uint64_t> all() const { return seeds_; }

 private:
  std::int32_t tokens_per_block_;
  ContentId domain_id_;
  ContentId parent_;           // parent content id of the block being filled
  std::vector<Token> block_;   // tokens of the block being filled
  std::uint64_t running_ = 0;  // Mix over parent_ and block_ so far
  std::vector<std::uint64_t> seeds_;
  ContentIdHasher hasher_;
};

// head_dim values of (seed, global layer, kv, global head) into out.
void SyntheticKvHead(std::uint64_t seed, std::int32_t layer, std::int32_t kv, std::int32_t head,
                     std::span<float> out);
// The query of one head: a function of (request seed, decode step, layer, query head).
void SyntheticQueryHead(std::uint64_t request_seed, std::int32_t step, std::int32_t layer,
                        std::int32_t q_head, std::span<float> out);

// Quantises `x` as a pool of `dtype` stores one (token, head) vector and dequantises it again:
// what a reader of such a pool sees. pool_scale: fp8_per_tensor scale / nvfp4 global scale.
void StoredRoundTrip(KvDtype dtype, float pool_scale, std::span<const float> x,
                     std::span<float> out);

struct DenseAttentionQuery {
  std::span<const std::uint64_t> seeds;  // seeds of positions [0, kv_len)
  std::int32_t layer = 0;                // global layer
  std::int32_t kv_head = 0;              // global KV head
  std::int32_t head_dim = 0;
  std::int32_t window = 0;  // 0: full attention
  KvDtype dtype = KvDtype::kBF16;
  float pool_scale = 1.0f;
  double softmax_scale = 1.0;
};

// For each of the n = q.size() / head_dim query heads that read this KV head (a GQA group):
// out[i] = softmax(scale * q_i·K^T) V for a query at the last position, in float64. K and V are
// regenerated once for the whole group.
void DenseAttention(const DenseAttentionQuery& query, std::span<const float> q,
                    std::span<double> out);

// Whether a kernel output matches the reference: |out - ref| <= 2e-3 + 2e-3 * |ref| everywhere.
// `worst` receives the largest |out - ref|.
bool AttentionMatches(std::span<const float> out, std::span<const double> ref, double* worst);

}  // namespace kvmesh
