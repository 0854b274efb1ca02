// PoolPlan: how a model's KV cache is split into pools and how big each pool is.
//
// Layers that share (attention window, KV heads, head size) share one pool; a model whose layers
// differ (Gemma-3: sliding and global layers; GPT-OSS) gets several. Every pool is a set of
// component tensors with one set of block ids (kernels/paged_kv_layout.h):
//
//   data         [num_blocks, layers, kv_factor, kv_heads, tokens_per_block, head_dim]  (HND)
//                [num_blocks, layers, kv_factor, tokens_per_block, kv_heads, head_dim]  (NHD)
//   scale        fp8/int8: FP32 per (token, head); nvfp4: UE4M3 per 16 elements
//   index_k      DeepSeek-V3.2 indexer K on the pool's masked layers (FP8 or FP4)
//   index_scale  FP32 per indexer quant block
//   + a pool-wide FP32 constant for fp8_per_tensor and nvfp4 (PoolSpec::pool_scale)
//
// Sizes (all integers; a block's bytes are a multiple of tokens_per_block):
//   bytes_per_token = sum over pools of bytes_per_block(all components) / tokens_per_block
//   budget          = min(floor(primary_free_bytes * free_gpu_memory_fraction),
//                         max_tokens * bytes_per_token)          (max_tokens is an upper bound)
//   pool budget     = floor(budget * share)                       (equal shares unless configured)
//   num_blocks      = floor(pool budget / bytes_per_block)
//
// Pools are ordered by their first layer, so plans are deterministic. A plan is a plain value,
// built once at start-up; thread-safe as values are.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/paged_kv_layout.h"
#include "pool/cache_config.h"
#include "pool/model_spec.h"

namespace kvmesh {

// Index of a pool in its plan.
struct PoolId {
  std::int32_t value = -1;
  friend constexpr auto operator<=>(const PoolId&, const PoolId&) = default;
};
inline std::ostream& operator<<(std::ostream& os, PoolId id) { return os << id.value; }

// What layers of one pool have in common.
struct PoolKey {
  std::int32_t window = 0;  // 0 = full attention
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  // clang-tidy 14 reads the defaulted <=> as a comparison with literal 0.
  // NOLINTNEXTLINE(modernize-use-nullptr)
  friend auto operator<=>(const PoolKey&, const PoolKey&) = default;
};
// "full/8x128" (full attention, 8 KV heads of 128), "sliding-1024/16x128".
std::string PoolKeyString(const PoolKey& key);

struct PoolSpec {
  PoolId id;
  PoolKey key;
  std::vector<std::int32_t> layers;       // global layer ids, ascending; local layer l = layers[l]
  std::vector<std::int32_t> index_slots;  // [layers.size()]: indexer layer of local l, or -1
  KvPoolGeometry geometry;
  KvPoolLayout layout;  // in the configured order (geometry.layout)
  PoolScale pool_scale;
  double share = 0;
  std::int64_t budget_bytes = 0;
  std::int64_t num_blocks = 0;

  [[nodiscard]] std::int32_t tokens_per_block() const { return geometry.tokens_per_block; }
  [[nodiscard]] std::int64_t tokens() const { return num_blocks * geometry.tokens_per_block; }
  // Bytes of one block over every component.
  [[nodiscard]] std::int64_t bytes_per_block() const { return layout.BytesPerBlock(); }
  // Bytes of one block of one component (0 when absent).
  [[nodiscard]] std::int64_t ComponentBytesPerBlock(KvComponent c) const;
  [[nodiscard]] std::int64_t bytes_per_token() const {
    return bytes_per_block() / geometry.tokens_per_block;
  }
  // Bytes of the whole pool: num_blocks * bytes_per_block.
  [[nodiscard]] std::int64_t pool_bytes() const { return num_blocks * bytes_per_block(); }
  // The same pool in `order` (strides of the other order, e.g. for an HND <-> NHD copy).
  [[nodiscard]] KvPoolLayout LayoutIn(KvLayout order) const { return WithOrder(layout, order); }
};

// Where a global layer lives.
struct LayerLocation {
  PoolId pool;
  std::int32_t local_layer = -1;  // index in the pool's layer dimension
  std::int32_t index_slot = -1;   // index in the pool's indexer components, or -1
};

struct PoolPlan {
  std::string model_name;
  std::string model_revision;
  CacheConfig cache;
  std::int64_t primary_free_bytes = 0;
  std::int64_t fraction_bytes = 0;     // floor(primary_free_bytes * free_gpu_memory_fraction)
  std::int64_t max_tokens_bytes = -1;  // max_tokens * bytes_per_token; -1 without max_tokens
  std::int64_t budget_bytes = 0;       // min of the two
  std::int64_t bytes_per_token = 0;    // over every pool
  std::vector<PoolSpec> pools;
  std::vector<LayerLocation> layer_locations;  // [num_layers]

  [[nodiscard]] bool limited_by_max_tokens() const {
    return max_tokens_bytes >= 0 && max_tokens_bytes < fraction_bytes;
  }
  // REQUIRES: id names a pool of this plan.
  [[nodiscard]] const PoolSpec& pool(PoolId id) const;
  // REQUIRES: 0 <= layer < layer_locations.size().
  [[nodiscard]] const LayerLocation& Locate(std::int32_t layer) const;
  // Sum of pool_bytes() over the pools (<= budget_bytes).
  [[nodiscard]] std::int64_t TotalPoolBytes() const;
};

// Groups the layers into pools and sizes them.
// Errors: kInvalidArgument for an invalid model or config (the message names the field), a
// pool_shares count that is not the number of pools, or a geometry the dtype cannot store (nvfp4
// needs head_dim % 16 == 0); kResourceExhausted when a pool would get no block (the message gives
// the pool's budget and block size).
Result<PoolPlan> BuildPoolPlan(const ModelSpec& model, const CacheConfig& cache,
                               std::int64_t primary_free_bytes);

}  // namespace kvmesh

template <>
struct std::hash<kvmesh::PoolId> {
  std::size_t operator()(kvmesh::PoolId id) const noexcept {
    return std::hash<std::int32_t>()(id.value);
  }
};
