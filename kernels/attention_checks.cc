#include "kernels/attention_checks.h"

#include <cmath>

#include "common/strings.h"
#include "kernels/decode_attention.h"

namespace kvmesh {

Status CheckAttentionPool(std::string_view kernel, const KvPoolView& pool, std::int32_t layer) {
  const PagedTensorLayout& data = pool.layout.data();
  if (!data.present() || pool.base[static_cast<int>(KvComponent::kData)] == nullptr) {
    return Status::InvalidArgument(StrCat(kernel, ": the pool has no data component"));
  }
  if (pool.num_blocks <= 0) {
    return Status::InvalidArgument(
        StrCat(kernel, ": pool.num_blocks ", pool.num_blocks, " is not positive"));
  }
  const int tpb = data.tokens_per_block;
  if (tpb < 16 || tpb > 128 || (tpb & (tpb - 1)) != 0) {
    return Status::NotSupported(StrCat(kernel, ": tokens_per_block ", tpb,
                                       " is not supported (a power of two in [16, 128])"));
  }
  if (layer < 0 || layer >= data.num_layers) {
    return Status::InvalidArgument(
        StrCat(kernel, ": layer ", layer, " is out of range [0, ", data.num_layers, ")"));
  }
  const KvDtype dtype = pool.layout.dtype;
  if (static_cast<int>(dtype) >= kNumKvDtypes) {
    return Status::InvalidArgument(
        StrCat(kernel, ": pool dtype ", static_cast<int>(dtype), " is not a cache dtype"));
  }
  if (data.bits != KvDtypeBits(dtype)) {
    return Status::InvalidArgument(StrCat(kernel, ": data component has ", data.bits,
                                          " bits per element, ", KvDtypeName(dtype), " has ",
                                          KvDtypeBits(dtype)));
  }
  if (ScaleKindOf(dtype) != KvScaleKind::kNone) {
    const PagedTensorLayout& scale = pool.layout.scale();
    const bool shaped = scale.present() && scale.order == data.order &&
                        scale.num_layers == data.num_layers && scale.kv_factor == data.kv_factor &&
                        scale.num_heads == data.num_heads && scale.tokens_per_block == tpb;
    if (!shaped || pool.base[static_cast<int>(KvComponent::kScale)] == nullptr) {
      return Status::InvalidArgument(StrCat(kernel, ": ", KvDtypeName(dtype),
                                            " needs a scale component shaped like the data"));
    }
  }
  if (HasPoolScale(dtype) && !(std::isfinite(pool.pool_scale) && pool.pool_scale > 0.0f)) {
    return Status::InvalidArgument(StrCat(kernel, ": pool_scale ", pool.pool_scale, " for ",
                                          KvDtypeName(dtype), " is not finite and positive"));
  }
  return Status::Ok();
}

Status CheckAttentionDtypes(std::string_view kernel, ActDtype q_dtype, ActDtype out_dtype) {
  if (static_cast<int>(q_dtype) > static_cast<int>(ActDtype::kFP16)) {
    return Status::InvalidArgument(
        StrCat(kernel, ": q_dtype ", static_cast<int>(q_dtype), " is not an activation dtype"));
  }
  if (out_dtype != ActDtype::kFP32 && out_dtype != ActDtype::kBF16) {
    return Status::NotSupported(StrCat(kernel, ": out_dtype ", static_cast<int>(out_dtype),
                                       " is not supported (fp32 or bf16)"));
  }
  return Status::Ok();
}

Status CheckAttentionBatch(std::string_view kernel, std::int32_t num_seqs, std::int32_t q_len,
                           std::int32_t max_blocks_per_seq, float softmax_scale,
                           std::int32_t num_splits) {
  if (num_seqs < 0) {
    return Status::InvalidArgument(StrCat(kernel, ": num_seqs ", num_seqs, " is negative"));
  }
  if (q_len < 1 || q_len > kMaxDecodeQueryTokens) {
    return Status::NotSupported(
        StrCat(kernel, ": q_len ", q_len, " is not supported (1..", kMaxDecodeQueryTokens, ")"));
  }
  if (max_blocks_per_seq < 1) {
    return Status::InvalidArgument(
        StrCat(kernel, ": max_blocks_per_seq ", max_blocks_per_seq, " is not positive"));
  }
  if (!(std::isfinite(softmax_scale) && softmax_scale > 0.0f)) {
    return Status::InvalidArgument(
        StrCat(kernel, ": softmax_scale ", softmax_scale, " is not finite and positive"));
  }
  if (num_splits < 0 || num_splits > kMaxDecodeSplits) {
    return Status::InvalidArgument(StrCat(kernel, ": num_splits ", num_splits,
                                          " is out of range [0, ", kMaxDecodeSplits, "]"));
  }
  return Status::Ok();
}

Status CheckAttentionWorkspace(std::string_view kernel, Workspace workspace, std::size_t needed) {
  if (needed == 0) return Status::Ok();
  if (workspace.data == nullptr || workspace.bytes < needed) {
    return Status::InvalidArgument(
        StrCat(kernel, ": workspace of ", workspace.bytes, " bytes is too small, needs ", needed));
  }
  if (reinterpret_cast<std::uintptr_t>(workspace.data) % 16 != 0) {
    return Status::InvalidArgument(StrCat(kernel, ": workspace is not 16-byte aligned"));
  }
  return Status::Ok();
}

}  // namespace kvmesh
