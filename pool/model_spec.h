// ModelSpec: what a model's attention layers need from the KV cache, layer by layer.
//
// A ModelSpec is the input of the pool plan (pool/pool_plan.h). It says, for every layer, the
// attention window (0 = full attention) and the geometry of one cached token of that layer as the
// cache stores it:
//
//   ordinary attention   kv_factor 2 (K and V), num_kv_heads heads of head_dim elements
//   MLA (DeepSeek-V2/V3) kv_factor 1, num_kv_heads 1, head_dim = kv_lora_rank + qk_rope_head_dim
//                        (512 + 64 = 576): one latent vector per token, rope dims included
//
// plus the query-head count (attention kernels need the GQA group size) and the optional sparse
// attention indexer of DeepSeek-V3.2 (its own K cache on the layers `layer_mask` selects).
//
// Specs come from a Hugging Face config.json (pool/hf_config.h) or a built-in preset
// (pool/model_presets.h); Validate() is the one consistency check both go through.
//
// A plain value; thread-safe as values are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvmesh {

// One attention layer as the cache sees it.
struct LayerSpec {
  std::int32_t window = 0;        // attention window in tokens; 0 = full attention
  std::int32_t num_kv_heads = 0;  // cached heads (1 for MLA)
  std::int32_t head_dim = 0;      // elements per cached head (576 for the DeepSeek MLA latent)

  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

// Multi-head latent attention (DeepSeek-V2/V3). The cache holds kv_lora_rank + qk_rope_head_dim
// elements per token; the other two are for the attention kernels.
struct MlaSpec {
  std::int32_t kv_lora_rank = 0;      // 512 for DeepSeek-V2/V3
  std::int32_t qk_rope_head_dim = 0;  // 64
  std::int32_t qk_nope_head_dim = 0;  // 128
  std::int32_t v_head_dim = 0;        // 128

  [[nodiscard]] std::int32_t LatentDim() const { return kv_lora_rank + qk_rope_head_dim; }
  friend bool operator==(const MlaSpec&, const MlaSpec&) = default;
};

// Sparse-attention indexer (DeepSeek-V3.2): a K cache of its own per selected layer, one head of
// index_head_dim elements per token, quantised in blocks of quant_block elements (FP8 E4M3, or
// E2M1 when fp4), one FP32 scale per quant block.
struct IndexerSpec {
  std::int32_t index_head_dim = 0;  // 128 for DeepSeek-V3.2
  std::int32_t index_n_heads = 0;   // 64: query heads of the indexer (not cached)
  std::int32_t index_topk = 0;      // 2048: tokens the indexer selects (not cached)
  std::int32_t quant_block = 128;
  bool fp4 = false;
  std::vector<bool> layer_mask;  // [num_layers]; true = the layer has an indexer

  [[nodiscard]] std::int32_t NumIndexedLayers() const;
  friend bool operator==(const IndexerSpec&, const IndexerSpec&) = default;
};

// The most layers a model may have: the largest models have a few hundred (Llama-3.1-405B: 126).
// A bound keeps a config with a stray digit (28152064 layers) an error, not minutes of planning and
// gigabytes of layer specs.
inline constexpr std::int32_t kMaxModelLayers = 1024;
// kInvalidArgument when `num_layers` is above kMaxModelLayers (ModelSpec::Validate, and the HF
// config reader before any per-layer work).
Status CheckLayerCount(std::int64_t num_layers);

struct ModelSpec {
  std::string name;      // e.g. "meta-llama/Meta-Llama-3-8B"; part of every block namespace
  std::string revision;  // model revision (commit) when known, else empty
  std::string family;    // "llama", "gemma3", "deepseek_v3", ... (the config's model_type)
  std::int32_t num_attention_heads = 0;  // query heads
  std::vector<LayerSpec> layers;         // [num_layers]
  std::optional<MlaSpec> mla;
  std::optional<IndexerSpec> indexer;

  [[nodiscard]] std::int32_t num_layers() const { return static_cast<std::int32_t>(layers.size()); }
  // 1 for MLA, 2 otherwise.
  [[nodiscard]] std::int32_t kv_factor() const { return mla ? 1 : 2; }

  // OK, or kInvalidArgument naming the first inconsistent field and its value, e.g.
  // "layers[3].num_kv_heads 7 does not divide num_attention_heads 32".
  [[nodiscard]] Status Validate() const;

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

// A model whose every layer has the same geometry (full attention unless `window` > 0).
ModelSpec UniformModelSpec(std::string name, std::string family, std::int32_t num_layers,
                           std::int32_t num_attention_heads, std::int32_t num_kv_heads,
                           std::int32_t head_dim, std::int32_t window = 0);

}  // namespace kvmesh
