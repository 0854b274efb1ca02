// Argument checks of the append kernels, shared by the CPU twin and the CUDA launchers.
#include "kernels/append_kv.h"

#include <cmath>
#include <cstdint>

#include "common/strings.h"

namespace kvmesh {
namespace {

bool AlignedTo(const void* p, std::uintptr_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

bool ValidActDtype(ActDtype d) {
  return d == ActDtype::kFP32 || d == ActDtype::kBF16 || d == ActDtype::kFP16;
}

// The checks common to both appends: the ragged batch's pointers and the input.
Status CheckBatch(std::int32_t num_seqs, const std::int32_t* cu_tokens,
                  const std::int32_t* start_pos, const std::int32_t* block_table,
                  std::int32_t max_blocks_per_seq, std::int32_t total_tokens, ActDtype act_dtype) {
  if (num_seqs < 0) return Status::InvalidArgument(StrCat("append: num_seqs ", num_seqs, " < 0"));
  if (total_tokens < -1) {
    return Status::InvalidArgument(
        StrCat("append: total_tokens ", total_tokens, " (use -1 for unknown)"));
  }
  if (!ValidActDtype(act_dtype)) {
    return Status::InvalidArgument(
        StrCat("append: act_dtype ", static_cast<int>(act_dtype), " is not fp32, bf16 or fp16"));
  }
  if (num_seqs == 0) return Status::Ok();
  if (cu_tokens == nullptr || start_pos == nullptr || block_table == nullptr) {
    return Status::InvalidArgument("append: cu_tokens, start_pos and block_table are required");
  }
  if (max_blocks_per_seq <= 0) {
    return Status::InvalidArgument(
        StrCat("append: max_blocks_per_seq ", max_blocks_per_seq, " must be positive"));
  }
  return Status::Ok();
}

Status CheckInput(const char* name, const void* p, ActDtype act_dtype) {
  if (p == nullptr) return Status::InvalidArgument(StrCat("append: input ", name, " is null"));
  if (!AlignedTo(p, static_cast<std::uintptr_t>(ActDtypeBytes(act_dtype)))) {
    return Status::InvalidArgument(StrCat("append: input ", name, " is not aligned to its ",
                                          ActDtypeName(act_dtype), " elements"));
  }
  return Status::Ok();
}

Status CheckComponentBase(const KvPoolView& pool, KvComponent c) {
  const void* base = pool.base[static_cast<int>(c)];
  if (base == nullptr) {
    return Status::InvalidArgument(
        StrCat("append: pool component ", KvComponentName(c), " has no base pointer"));
  }
  if (!AlignedTo(base, 4)) {
    return Status::InvalidArgument(
        StrCat("append: pool component ", KvComponentName(c), " is not 4-byte aligned"));
  }
  return Status::Ok();
}

Status CheckTokenStride(std::int64_t token_stride, std::int64_t row) {
  if (token_stride != 0 && token_stride < row) {
    return Status::InvalidArgument(StrCat("append: token_stride ", token_stride,
                                          " is smaller than one token's ", row, " elements"));
  }
  return Status::Ok();
}

}  // namespace

Status CanImplementAppendKv(const AppendKvArgs& args) {
  const KvPoolView& pool = args.pool;
  const PagedTensorLayout& d = pool.layout.data();
  const KvDtype dtype = pool.layout.dtype;
  if (!d.present()) return Status::InvalidArgument("append: the pool has no data component");
  if (d.bits != KvDtypeBits(dtype)) {
    return Status::InvalidArgument(
        StrCat("append: data component of ", d.bits, " bits for dtype ", KvDtypeName(dtype)));
  }
  if (pool.num_blocks < 0) {
    return Status::InvalidArgument(StrCat("append: pool num_blocks ", pool.num_blocks, " < 0"));
  }
  KVMESH_RETURN_IF_ERROR(CheckComponentBase(pool, KvComponent::kData));
  if (ScaleKindOf(dtype) != KvScaleKind::kNone) {
    if (!pool.layout.scale().present()) {
      return Status::InvalidArgument(
          StrCat("append: a ", KvDtypeName(dtype), " pool needs a scale component"));
    }
    KVMESH_RETURN_IF_ERROR(CheckComponentBase(pool, KvComponent::kScale));
  }
  if (dtype == KvDtype::kNVFP4 && d.inner % kNvfp4BlockSize != 0) {
    return Status::InvalidArgument(
        StrCat("append: nvfp4 head_dim ", d.inner, " is not a multiple of 16"));
  }
  if (HasPoolScale(dtype) && !(std::isfinite(pool.pool_scale) && pool.pool_scale > 0.0f)) {
    return Status::InvalidArgument(StrCat("append: pool_scale ", pool.pool_scale, " of a ",
                                          KvDtypeName(dtype), " pool must be finite and > 0"));
  }
  if (args.layer < 0 || args.layer >= d.num_layers) {
    return Status::InvalidArgument(
        StrCat("append: layer ", args.layer, " outside [0, ", d.num_layers, ")"));
  }
  KVMESH_RETURN_IF_ERROR(CheckBatch(args.num_seqs, args.cu_tokens, args.start_pos, args.block_table,
                                    args.max_blocks_per_seq, args.total_tokens, args.act_dtype));
  if (d.kv_factor == 1 && args.v != nullptr) {
    return Status::InvalidArgument("append: v given for a pool with kv_factor 1 (MLA: k only)");
  }
  KVMESH_RETURN_IF_ERROR(CheckTokenStride(args.token_stride, std::int64_t{d.num_heads} * d.inner));
  if (args.num_seqs == 0) return Status::Ok();
  KVMESH_RETURN_IF_ERROR(CheckInput("k", args.k, args.act_dtype));
  if (d.kv_factor == 2) KVMESH_RETURN_IF_ERROR(CheckInput("v", args.v, args.act_dtype));
  return Status::Ok();
}

Status CanImplementAppendIndexK(const AppendIndexKArgs& args) {
  const KvPoolView& pool = args.pool;
  const PagedTensorLayout& ik = pool.layout.index_k();
  const PagedTensorLayout& is = pool.layout.index_scale();
  if (!ik.present() || !is.present()) {
    return Status::InvalidArgument("append index_k: the pool has no indexer components");
  }
  if ((ik.bits != 8 && ik.bits != 4) || is.bits != 32 || is.inner <= 0 ||
      ik.inner % is.inner != 0 || ik.kv_factor != 1 || ik.num_heads != 1) {
    return Status::InvalidArgument("append index_k: indexer components of an unexpected shape");
  }
  const int quant_block = ik.inner / is.inner;
  if (ik.bits == 4 && quant_block % 2 != 0) {
    return Status::NotSupported(StrCat("append index_k: FP4 quant block ", quant_block,
                                       " is odd (blocks would split bytes)"));
  }
  if (pool.num_blocks < 0) {
    return Status::InvalidArgument(StrCat("append: pool num_blocks ", pool.num_blocks, " < 0"));
  }
  KVMESH_RETURN_IF_ERROR(CheckComponentBase(pool, KvComponent::kIndexK));
  KVMESH_RETURN_IF_ERROR(CheckComponentBase(pool, KvComponent::kIndexScale));
  if (args.index_layer < 0 || args.index_layer >= ik.num_layers) {
    return Status::InvalidArgument(StrCat("append index_k: index_layer ", args.index_layer,
                                          " outside [0, ", ik.num_layers, ")"));
  }
  KVMESH_RETURN_IF_ERROR(CheckBatch(args.num_seqs, args.cu_tokens, args.start_pos, args.block_table,
                                    args.max_blocks_per_seq, args.total_tokens, args.act_dtype));
  KVMESH_RETURN_IF_ERROR(CheckTokenStride(args.token_stride, ik.inner));
  if (args.num_seqs == 0) return Status::Ok();
  return CheckInput("index_k", args.index_k, args.act_dtype);
}

}  // namespace kvmesh
