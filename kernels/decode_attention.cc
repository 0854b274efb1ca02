#include "kernels/decode_attention.h"

#include <algorithm>

#include "common/strings.h"
#include "kernels/attention_checks.h"
#include "kernels/attention_split.h"

namespace kvmesh {
namespace {

constexpr std::string_view kKernel = "decode_attention";

// Split policy (see DecodeAttentionNumSplits): about 8 waves of CTAs over 132 SMs, at least 256
// keys per split, at most 64 splits.
constexpr std::int64_t kTargetUnits = 8 * 132;
constexpr std::int64_t kMinKeysPerSplit = 256;
constexpr std::int32_t kMaxAutoSplits = 64;

}  // namespace

Status CanImplementDecodeAttention(const DecodeAttentionArgs& args) {
  KVMESH_RETURN_IF_ERROR(CheckAttentionPool(kKernel, args.pool, args.layer));
  const PagedTensorLayout& data = args.pool.layout.data();
  if (data.kv_factor != 2) {
    return Status::InvalidArgument(StrCat(kKernel, ": the pool has kv_factor ", data.kv_factor,
                                          "; decode attention needs K and V (2), MLA pools go "
                                          "to MlaDecode"));
  }
  const int head_dim = data.inner;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    return Status::NotSupported(
        StrCat(kKernel, ": head_dim ", head_dim, " is not supported (64, 128 or 256)"));
  }
  KVMESH_RETURN_IF_ERROR(CheckAttentionBatch(kKernel, args.num_seqs, args.q_len,
                                             args.max_blocks_per_seq, args.softmax_scale,
                                             args.num_splits));
  KVMESH_RETURN_IF_ERROR(CheckAttentionDtypes(kKernel, args.q_dtype, args.out_dtype));
  if (args.num_q_heads <= 0 || args.num_q_heads % data.num_heads != 0) {
    return Status::InvalidArgument(StrCat(kKernel, ": num_q_heads ", args.num_q_heads,
                                          " is not a positive multiple of num_kv_heads ",
                                          data.num_heads));
  }
  if (args.sliding_window < 0) {
    return Status::InvalidArgument(
        StrCat(kKernel, ": sliding_window ", args.sliding_window, " is negative"));
  }
  if (args.num_seqs > 0) {
    if (args.q == nullptr) return Status::InvalidArgument(StrCat(kKernel, ": q is null"));
    if (args.out == nullptr) return Status::InvalidArgument(StrCat(kKernel, ": out is null"));
    if (args.kv_lens == nullptr) {
      return Status::InvalidArgument(StrCat(kKernel, ": kv_lens is null"));
    }
    if (args.block_table == nullptr) {
      return Status::InvalidArgument(StrCat(kKernel, ": block_table is null"));
    }
  }
  return Status::Ok();
}

Status CanImplementDecodeAttention(const DecodeAttentionArgs& args, Workspace workspace) {
  KVMESH_RETURN_IF_ERROR(CanImplementDecodeAttention(args));
  return CheckAttentionWorkspace(kKernel, workspace, DecodeAttentionWorkspaceBytes(args));
}

std::int32_t DecodeAttentionNumSplits(const DecodeAttentionArgs& args) {
  if (args.num_splits > 0) return args.num_splits;
  const PagedTensorLayout& data = args.pool.layout.data();
  std::int64_t max_keys = std::int64_t{args.max_blocks_per_seq} * data.tokens_per_block;
  if (args.sliding_window > 0) {
    max_keys = std::min<std::int64_t>(max_keys, args.sliding_window + args.q_len - 1);
  }
  return ChooseNumSplits(max_keys, std::int64_t{args.num_seqs} * data.num_heads, kTargetUnits,
                         kMinKeysPerSplit, kMaxAutoSplits);
}

std::size_t DecodeAttentionWorkspaceBytes(const DecodeAttentionArgs& args) {
  const SplitWorkspaceLayout layout{
      .rows = std::int64_t{args.num_seqs} * args.q_len * args.num_q_heads,
      .width = args.pool.layout.data().inner,
      .num_splits = DecodeAttentionNumSplits(args)};
  return layout.Bytes();
}

}  // namespace kvmesh
