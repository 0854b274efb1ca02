#include "pool/model_spec.h"

#include <algorithm>
#include <utility>

#include "common/strings.h"

namespace kvmesh {
namespace {

Status ValidateMla(const ModelSpec& m) {
  const MlaSpec& mla = *m.mla;
  if (mla.kv_lora_rank <= 0) {
    return Status::InvalidArgument(StrCat("kv_lora_rank ", mla.kv_lora_rank, " must be positive"));
  }
  if (mla.qk_rope_head_dim <= 0) {
    return Status::InvalidArgument(
        StrCat("qk_rope_head_dim ", mla.qk_rope_head_dim, " must be positive"));
  }
  if (mla.qk_nope_head_dim < 0 || mla.v_head_dim < 0) {
    return Status::InvalidArgument(StrCat("qk_nope_head_dim ", mla.qk_nope_head_dim,
                                          " and v_head_dim ", mla.v_head_dim,
                                          " must not be negative"));
  }
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& l = m.layers[i];
    if (l.num_kv_heads != 1) {
      return Status::InvalidArgument(StrCat("layers[", i, "].num_kv_heads ", l.num_kv_heads,
                                            " must be 1 for MLA (one latent vector per token)"));
    }
    if (l.head_dim != mla.LatentDim()) {
      return Status::InvalidArgument(StrCat(
          "layers[", i, "].head_dim ", l.head_dim, " must be kv_lora_rank + qk_rope_head_dim = ",
          mla.kv_lora_rank, " + ", mla.qk_rope_head_dim, " = ", mla.LatentDim(), " for MLA"));
    }
  }
  return Status::Ok();
}

Status ValidateIndexer(const ModelSpec& m) {
  const IndexerSpec& ix = *m.indexer;
  if (ix.index_head_dim <= 0) {
    return Status::InvalidArgument(
        StrCat("index_head_dim ", ix.index_head_dim, " must be positive"));
  }
  if (ix.index_n_heads <= 0) {
    return Status::InvalidArgument(StrCat("index_n_heads ", ix.index_n_heads, " must be positive"));
  }
  if (ix.index_topk < 0) {
    return Status::InvalidArgument(StrCat("index_topk ", ix.index_topk, " must not be negative"));
  }
  if (ix.quant_block <= 0 || ix.index_head_dim % ix.quant_block != 0) {
    return Status::InvalidArgument(StrCat("index_head_dim ", ix.index_head_dim,
                                          " is not a multiple of the indexer quant block ",
                                          ix.quant_block));
  }
  if (ix.fp4 && ix.index_head_dim % 2 != 0) {
    return Status::InvalidArgument(
        StrCat("index_head_dim ", ix.index_head_dim, " must be even for an FP4 indexer cache"));
  }
  if (ix.layer_mask.size() != m.layers.size()) {
    return Status::InvalidArgument(StrCat("indexer layer_mask has ", ix.layer_mask.size(),
                                          " entries but the model has ", m.layers.size(),
                                          " layers"));
  }
  if (ix.NumIndexedLayers() == 0) {
    return Status::InvalidArgument("indexer layer_mask selects no layer");
  }
  return Status::Ok();
}

}  // namespace

std::int32_t IndexerSpec::NumIndexedLayers() const {
  return static_cast<std::int32_t>(std::count(layer_mask.begin(), layer_mask.end(), true));
}

Status CheckLayerCount(std::int64_t num_layers) {
  if (num_layers <= kMaxModelLayers) return Status::Ok();
  return Status::InvalidArgument(StrCat("num_hidden_layers ", num_layers, " is more than ",
                                        kMaxModelLayers,
                                        " (the largest models have a few hundred layers)"));
}

Status ModelSpec::Validate() const {
  if (name.empty()) return Status::InvalidArgument("model name is empty");
  if (num_attention_heads <= 0) {
    return Status::InvalidArgument(
        StrCat("num_attention_heads ", num_attention_heads, " must be positive"));
  }
  if (layers.empty()) return Status::InvalidArgument("num_hidden_layers 0: the model has no layer");
  KVMESH_RETURN_IF_ERROR(CheckLayerCount(static_cast<std::int64_t>(layers.size())));
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    if (l.window < 0) {
      return Status::InvalidArgument(
          StrCat("layers[", i, "].window ", l.window, " must be 0 (full) or positive"));
    }
    if (l.num_kv_heads <= 0) {
      return Status::InvalidArgument(
          StrCat("layers[", i, "].num_kv_heads ", l.num_kv_heads, " must be positive"));
    }
    if (l.head_dim <= 0) {
      return Status::InvalidArgument(
          StrCat("layers[", i, "].head_dim ", l.head_dim, " must be positive"));
    }
    if (!mla && num_attention_heads % l.num_kv_heads != 0) {
      return Status::InvalidArgument(StrCat("layers[", i, "].num_kv_heads ", l.num_kv_heads,
                                            " does not divide num_attention_heads ",
                                            num_attention_heads));
    }
  }
  if (mla) KVMESH_RETURN_IF_ERROR(ValidateMla(*this));
  if (indexer) KVMESH_RETURN_IF_ERROR(ValidateIndexer(*this));
  return Status::Ok();
}

ModelSpec UniformModelSpec(std::string name, std::string family, std::int32_t num_layers,
                           std::int32_t num_attention_heads, std::int32_t num_kv_heads,
                           std::int32_t head_dim, std::int32_t window) {
  ModelSpec m;
  m.name = std::move(name);
  m.family = std::move(family);
  m.num_attention_heads = num_attention_heads;
  m.layers.assign(static_cast<std::size_t>(std::max(num_layers, 0)),
                  LayerSpec{window, num_kv_heads, head_dim});
  return m;
}

}  // namespace kvmesh
