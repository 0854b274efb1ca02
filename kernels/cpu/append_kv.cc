// CPU twin of the append kernels (kernels/cuda/append_kv.cu): validates the host-side index arrays,
// then quantises each (token, head) row with the head quantisers of kernels/quantize.h (indexer K:
// kernels/index_k_quantize.h) straight into the pool, in parallel over tokens.
#include "kernels/append_kv.h"

#include <algorithm>
#include <cstdint>

#include "common/strings.h"
#include "common/thread_pool.h"
#include "kernels/index_k_quantize.h"
#include "kernels/quantize.h"

namespace kvmesh::cpu {
namespace {

// The ragged batch of either append.
struct Batch {
  std::int32_t num_seqs;
  const std::int32_t* cu_tokens;
  const std::int32_t* start_pos;
  const std::int32_t* block_table;
  std::int32_t max_blocks_per_seq;
  std::int32_t total_tokens;
};

// Every index a write will use, before anything is written.
Status ValidateBatch(const Batch& b, int tokens_per_block, std::int64_t num_blocks) {
  if (b.num_seqs == 0) return Status::Ok();
  if (b.cu_tokens[0] < 0) {
    return Status::InvalidArgument(StrCat("append: cu_tokens[0] ", b.cu_tokens[0], " < 0"));
  }
  const std::int64_t capacity = std::int64_t{b.max_blocks_per_seq} * tokens_per_block;
  for (std::int32_t i = 0; i < b.num_seqs; ++i) {
    const std::int64_t n = std::int64_t{b.cu_tokens[i + 1]} - b.cu_tokens[i];
    if (n < 0) {
      return Status::InvalidArgument(StrCat("append: cu_tokens decreases at sequence ", i, " (",
                                            b.cu_tokens[i], " -> ", b.cu_tokens[i + 1], ")"));
    }
    const std::int64_t start = b.start_pos[i];
    if (start < 0) {
      return Status::InvalidArgument(StrCat("append: start_pos[", i, "] ", start, " < 0"));
    }
    if (n == 0) continue;
    if (start + n > capacity) {
      return Status::InvalidArgument(
          StrCat("append: sequence ", i, " writes positions [", start, ", ", start + n,
                 ") beyond max_blocks_per_seq * tokens_per_block = ", capacity));
    }
    for (std::int64_t blk = start / tokens_per_block; blk <= (start + n - 1) / tokens_per_block;
         ++blk) {
      const std::int32_t id = b.block_table[i * std::int64_t{b.max_blocks_per_seq} + blk];
      if (id < 0 || id >= num_blocks) {
        return Status::InvalidArgument(StrCat("append: block_table[", i, "][", blk, "] = ", id,
                                              " outside [0, ", num_blocks, ")"));
      }
    }
  }
  if (b.total_tokens >= 0 && b.total_tokens != b.cu_tokens[b.num_seqs]) {
    return Status::InvalidArgument(StrCat("append: total_tokens ", b.total_tokens,
                                          " differs from cu_tokens[num_seqs] ",
                                          b.cu_tokens[b.num_seqs]));
  }
  return Status::Ok();
}

// Where token `t` goes: its sequence's block and slot.
struct Slot {
  std::int64_t block;
  int slot;
};

// REQUIRES: cu_tokens[0] <= t < cu_tokens[num_seqs] and ValidateBatch passed.
Slot SlotOf(const Batch& b, int tokens_per_block, std::int32_t t) {
  const std::int32_t* end = b.cu_tokens + b.num_seqs + 1;
  const auto seq =
      static_cast<std::int32_t>(std::upper_bound(b.cu_tokens, end, t) - b.cu_tokens) - 1;
  const std::int64_t pos = std::int64_t{b.start_pos[seq]} + (t - b.cu_tokens[seq]);
  const std::int64_t id =
      b.block_table[seq * std::int64_t{b.max_blocks_per_seq} + pos / tokens_per_block];
  return {id, static_cast<int>(pos % tokens_per_block)};
}

// Runs row(t) for every token of the batch, in parallel when there is an executor.
template <typename RowFn>
void ForEachToken(const Batch& b, ThreadPool* executor, std::int64_t min_chunk, const RowFn& row) {
  const std::int32_t first = b.cu_tokens[0];
  const std::int64_t count = std::int64_t{b.cu_tokens[b.num_seqs]} - first;
  auto run = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) row(static_cast<std::int32_t>(first + i));
  };
  if (executor == nullptr) {
    run(0, count);
  } else {
    executor->ParallelFor(count, min_chunk, run);
  }
}

template <typename In>
const In* InputRow(const void* base, std::int64_t element) {
  return static_cast<const In*>(base) + element;
}

// Quantises one (token, head) vector into the pool at (block, layer, kv, head, slot).
template <typename In>
void WriteKvRow(const KvPoolView& pool, const In* x, std::int64_t block, int layer, int kv,
                int head, int slot) {
  const PagedTensorLayout& d = pool.layout.data();
  const int n = d.inner;
  std::uint8_t* data =
      static_cast<std::uint8_t*>(pool.base[0]) + d.ByteOffset(block, layer, kv, head, slot, 0);
  const PagedTensorLayout& s = pool.layout.scale();
  switch (pool.layout.dtype) {
    case KvDtype::kBF16: QuantizeHeadBf16(x, n, reinterpret_cast<std::uint16_t*>(data)); break;
    case KvDtype::kFP16: QuantizeHeadFp16(x, n, reinterpret_cast<std::uint16_t*>(data)); break;
    case KvDtype::kFP8PerTensor: QuantizeHeadFp8PerTensor(x, n, pool.pool_scale, data); break;
    case KvDtype::kFP8:
      static_cast<float*>(pool.base[1])[s.ElementOffset(block, layer, kv, head, slot, 0)] =
          QuantizeHeadFp8(x, n, data);
      break;
    case KvDtype::kINT8:
      static_cast<float*>(pool.base[1])[s.ElementOffset(block, layer, kv, head, slot, 0)] =
          QuantizeHeadInt8(x, n, reinterpret_cast<std::int8_t*>(data));
      break;
    case KvDtype::kNVFP4:
      QuantizeHeadNvfp4(
          x, n, pool.pool_scale, data,
          static_cast<std::uint8_t*>(pool.base[1]) + s.ByteOffset(block, layer, kv, head, slot, 0));
      break;
  }
}

template <typename In>
void AppendKvRows(const AppendKvArgs& args, const Batch& b, ThreadPool* executor) {
  const PagedTensorLayout& d = args.pool.layout.data();
  const int tpb = d.tokens_per_block;
  const std::int64_t row = std::int64_t{d.num_heads} * d.inner;
  const std::int64_t stride = args.token_stride == 0 ? row : args.token_stride;
  const void* inputs[2] = {args.k, args.v};
  const std::int64_t min_chunk = std::max<std::int64_t>(1, 16384 / (row * d.kv_factor));
  ForEachToken(b, executor, min_chunk, [&](std::int32_t t) {
    const Slot where = SlotOf(b, tpb, t);
    for (int kv = 0; kv < d.kv_factor; ++kv) {
      for (int h = 0; h < d.num_heads; ++h) {
        const In* x = InputRow<In>(inputs[kv], t * stride + std::int64_t{h} * d.inner);
        WriteKvRow(args.pool, x, where.block, args.layer, kv, h, where.slot);
      }
    }
  });
}

template <typename In>
void AppendIndexKRows(const AppendIndexKArgs& args, const Batch& b, ThreadPool* executor) {
  const KvPoolView& pool = args.pool;
  const PagedTensorLayout& ik = pool.layout.index_k();
  const PagedTensorLayout& is = pool.layout.index_scale();
  const int tpb = ik.tokens_per_block;
  const int quant_block = ik.inner / is.inner;
  const std::int64_t stride = args.token_stride == 0 ? ik.inner : args.token_stride;
  const std::int64_t min_chunk = std::max<std::int64_t>(1, 16384 / ik.inner);
  ForEachToken(b, executor, min_chunk, [&](std::int32_t t) {
    const Slot where = SlotOf(b, tpb, t);
    std::uint8_t* codes = static_cast<std::uint8_t*>(pool.base[2]) +
                          ik.ByteOffset(where.block, args.index_layer, 0, 0, where.slot, 0);
    float* scales = static_cast<float*>(pool.base[3]) +
                    is.ElementOffset(where.block, args.index_layer, 0, 0, where.slot, 0);
    for (int q = 0; q < is.inner; ++q) {
      const In* x = InputRow<In>(args.index_k, t * stride + std::int64_t{q} * quant_block);
      if (ik.bits == 8) {
        scales[q] = QuantizeIndexBlockFp8(x, quant_block, codes + q * quant_block);
      } else {
        scales[q] = QuantizeIndexBlockFp4(x, quant_block, codes + q * quant_block / 2);
      }
    }
  });
}

}  // namespace

Status AppendKv(const AppendKvArgs& args, ThreadPool* executor) {
  KVMESH_RETURN_IF_ERROR(CanImplementAppendKv(args));
  const Batch b{args.num_seqs,    args.cu_tokens,          args.start_pos,
                args.block_table, args.max_blocks_per_seq, args.total_tokens};
  KVMESH_RETURN_IF_ERROR(
      ValidateBatch(b, args.pool.layout.tokens_per_block(), args.pool.num_blocks));
  if (b.num_seqs == 0) return Status::Ok();
  switch (args.act_dtype) {
    case ActDtype::kFP32: AppendKvRows<float>(args, b, executor); break;
    case ActDtype::kBF16: AppendKvRows<Bf16>(args, b, executor); break;
    case ActDtype::kFP16: AppendKvRows<Fp16>(args, b, executor); break;
  }
  return Status::Ok();
}

Status AppendIndexK(const AppendIndexKArgs& args, ThreadPool* executor) {
  KVMESH_RETURN_IF_ERROR(CanImplementAppendIndexK(args));
  const Batch b{args.num_seqs,    args.cu_tokens,          args.start_pos,
                args.block_table, args.max_blocks_per_seq, args.total_tokens};
  KVMESH_RETURN_IF_ERROR(
      ValidateBatch(b, args.pool.layout.index_k().tokens_per_block, args.pool.num_blocks));
  if (b.num_seqs == 0) return Status::Ok();
  switch (args.act_dtype) {
    case ActDtype::kFP32: AppendIndexKRows<float>(args, b, executor); break;
    case ActDtype::kBF16: AppendIndexKRows<Bf16>(args, b, executor); break;
    case ActDtype::kFP16: AppendIndexKRows<Fp16>(args, b, executor); break;
  }
  return Status::Ok();
}

}  // namespace kvmesh::cpu
