#include "kernels/mla_decode.h"

#include <algorithm>

#include "common/strings.h"
#include "kernels/attention_checks.h"
#include "kernels/attention_split.h"

namespace kvmesh {
namespace {

constexpr std::string_view kKernel = "mla_decode";

// One CTA per SM (large shared-memory pipeline), about 4 waves over 132 SMs.
constexpr std::int64_t kTargetUnits = 4 * 132;
constexpr std::int64_t kMinKeysPerSplit = 256;
constexpr std::int32_t kMaxAutoSplits = 64;

}  // namespace

Status CanImplementMlaDecode(const MlaDecodeArgs& args) {
  KVMESH_RETURN_IF_ERROR(CheckAttentionPool(kKernel, args.pool, args.layer));
  const PagedTensorLayout& data = args.pool.layout.data();
  const KvDtype dtype = args.pool.layout.dtype;
  if (dtype != KvDtype::kBF16 && dtype != KvDtype::kFP8 && dtype != KvDtype::kFP8PerTensor) {
    return Status::NotSupported(StrCat(kKernel, ": pool dtype ", KvDtypeName(dtype),
                                       " is not supported (bf16, fp8, fp8_per_tensor)"));
  }
  if (args.kv_lora_rank != 512 || args.rope_dim != 64) {
    return Status::NotSupported(StrCat(kKernel, ": kv_lora_rank ", args.kv_lora_rank,
                                       " / rope_dim ", args.rope_dim,
                                       " is not supported (512 / 64)"));
  }
  if (data.kv_factor != 1 || data.num_heads != 1 ||
      data.inner != args.kv_lora_rank + args.rope_dim) {
    return Status::InvalidArgument(StrCat(kKernel, ": the pool (kv_factor ", data.kv_factor,
                                          ", heads ", data.num_heads, ", head_dim ", data.inner,
                                          ") is not an MLA latent pool (1, 1, ",
                                          args.kv_lora_rank + args.rope_dim, ")"));
  }
  KVMESH_RETURN_IF_ERROR(CheckAttentionBatch(kKernel, args.num_seqs, args.q_len,
                                             args.max_blocks_per_seq, args.softmax_scale,
                                             args.num_splits));
  KVMESH_RETURN_IF_ERROR(CheckAttentionDtypes(kKernel, args.q_dtype, args.out_dtype));
  if (args.num_heads < 1 || args.num_heads > kMlaMaxHeads) {
    return Status::NotSupported(StrCat(kKernel, ": num_heads ", args.num_heads,
                                       " is not supported (1..", kMlaMaxHeads, ")"));
  }
  if (args.num_seqs > 0) {
    if (args.q_nope == nullptr || args.q_rope == nullptr) {
      return Status::InvalidArgument(StrCat(kKernel, ": q_nope or q_rope is null"));
    }
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

Status CanImplementMlaDecode(const MlaDecodeArgs& args, Workspace workspace) {
  KVMESH_RETURN_IF_ERROR(CanImplementMlaDecode(args));
  return CheckAttentionWorkspace(kKernel, workspace, MlaDecodeWorkspaceBytes(args));
}

std::int32_t MlaDecodeNumSplits(const MlaDecodeArgs& args) {
  if (args.num_splits > 0) return args.num_splits;
  const std::int64_t max_keys =
      std::int64_t{args.max_blocks_per_seq} * args.pool.layout.tokens_per_block();
  const std::int64_t rows = std::int64_t{args.num_heads} * args.q_len;
  const std::int64_t tiles = (rows + kMlaRowsPerTile - 1) / kMlaRowsPerTile;
  return ChooseNumSplits(max_keys, std::int64_t{args.num_seqs} * tiles, kTargetUnits,
                         kMinKeysPerSplit, kMaxAutoSplits);
}

std::size_t MlaDecodeWorkspaceBytes(const MlaDecodeArgs& args) {
  const SplitWorkspaceLayout layout{
      .rows = std::int64_t{args.num_seqs} * args.q_len * args.num_heads,
      .width = args.kv_lora_rank,
      .num_splits = MlaDecodeNumSplits(args)};
  return layout.Bytes();
}

}  // namespace kvmesh
