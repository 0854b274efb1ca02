// Paged KV append with quantise-on-write.
//
// AppendKv writes the new tokens' K and V of ONE layer for a ragged batch of sequences into a pool
// through the sequences' block tables, in the pool's layout (HND or NHD), converting to the pool's
// dtype and writing its side pools: the FP32 scale per (token, head) for fp8 and int8, the UE4M3
// block scales per 16 elements for nvfp4 (with the pool's global scale, KvPoolView::pool_scale), or
// nothing for bf16/fp16/fp8_per_tensor (which uses pool_scale as its one scale). The bytes written
// for each (token, head) are exactly those of the head quantisers in kernels/quantize.h
// (QuantizeHeadBf16/Fp16/Fp8/Fp8PerTensor/Int8/Nvfp4 on that head vector), on the CPU and on the
// GPU; nothing else in the pool is touched.
//
// MLA: a pool with kv_factor 1 and one head takes the 576-wide latent (kv_lora_rank + rope dims) in
// `k`, with `v` null. AppendIndexK writes the sparse-attention indexer K (component kIndexK and its
// FP32 scale per quant block, kIndexScale) of one indexer layer, quantised per quant block as
// kernels/index_k_quantize.h states (FP8 or FP4 with an FP32 scale per block).
//
// Shapes (elements of act_dtype; token_stride elements between consecutive tokens, 0 = dense):
//   k, v        [total_tokens, num_kv_heads, head_dim]
//   index_k     [total_tokens, index_head_dim]
//   cu_tokens   [num_seqs + 1]   sequence i owns rows [cu_tokens[i], cu_tokens[i+1])
//   start_pos   [num_seqs]       position (in its sequence) of sequence i's first new token
//   block_table [num_seqs, max_blocks_per_seq]   position p of sequence i lands in block
//               block_table[i * max_blocks_per_seq + p / tokens_per_block], slot p %
//               tokens_per_block
// All pointers live in the backend's memory space (kernels/kernel_types.h): host memory for
// cpu::AppendKv, device memory for cuda::LaunchAppendKv (kernels/append_kv_cuda.h). Input rows must
// be aligned to their element size; pool component bases to 4 bytes (16 lets the GPU use vector
// loads and stores).
//
// Validation:
//   - CanImplement* checks what can be checked without reading the index arrays (layer range,
//     pointers, kv_factor vs v, token_stride, pool scale, alignment). Both backends run it first.
//   - The CPU twin then reads the index arrays: cu_tokens not decreasing, start_pos ≥ 0, every
//     position inside max_blocks_per_seq * tokens_per_block, every block id a touched position
//     needs inside [0, pool.num_blocks), total_tokens (when given) equal to cu_tokens[num_seqs].
//     Any violation is kInvalidArgument naming the sequence and value, and NOTHING is written.
//   - The GPU cannot read device-side index arrays before launching without a synchronisation, so
//     the CUDA kernel checks each row instead and skips (does not write) a row whose block id or
//     position is out of range: a bad table never writes outside the pool, but the valid rows of
//     the same launch are written. Callers (pool/, which builds the tables on the host) own the
//     tables' correctness; the CPU twin is the place where a table is validated.
//
// Why `total_tokens` (added to the first version of this API): cu_tokens[num_seqs] lives in device
// memory for the CUDA backend, so the launcher cannot size its grid from it. The kernel still reads
// cu_tokens itself, so a wrong hint costs speed (idle or looping blocks), never correctness.
//
// Thread safety: reentrant; concurrent appends must not write the same (block, slot), and two
// sequences of one batch must not map a position to the same (block, slot).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/kernel_types.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

class ThreadPool;

struct AppendKvArgs {
  KvPoolView pool;
  std::int32_t layer = 0;  // layer index inside the pool
  std::int32_t num_seqs = 0;
  const std::int32_t* cu_tokens = nullptr;
  const std::int32_t* start_pos = nullptr;
  const std::int32_t* block_table = nullptr;
  std::int32_t max_blocks_per_seq = 0;
  ActDtype act_dtype = ActDtype::kBF16;
  const void* k = nullptr;
  const void* v = nullptr;  // null for MLA (kv_factor 1)
  std::int64_t token_stride = 0;
  // cu_tokens[num_seqs] as known on the host, or -1 when unknown (see above).
  std::int32_t total_tokens = -1;
};

struct AppendIndexKArgs {
  KvPoolView pool;
  std::int32_t index_layer = 0;  // layer index inside the kIndexK component
  std::int32_t num_seqs = 0;
  const std::int32_t* cu_tokens = nullptr;
  const std::int32_t* start_pos = nullptr;
  const std::int32_t* block_table = nullptr;
  std::int32_t max_blocks_per_seq = 0;
  ActDtype act_dtype = ActDtype::kBF16;
  const void* index_k = nullptr;  // [total_tokens, index_head_dim]
  std::int64_t token_stride = 0;
  std::int32_t total_tokens = -1;  // as in AppendKvArgs
};

// OK, or kInvalidArgument / kNotSupported naming what is unsupported. Checks what can be checked
// without reading the index arrays (layer range, pointers present, kv_factor vs v, ...).
Status CanImplementAppendKv(const AppendKvArgs& args);
Status CanImplementAppendIndexK(const AppendIndexKArgs& args);

namespace cpu {
// Reads the host-side index arrays; block ids and positions out of range are kInvalidArgument and
// nothing is written. Runs on `executor` (null: the calling thread). Returns when every byte is
// written.
Status AppendKv(const AppendKvArgs& args, ThreadPool* executor);
Status AppendIndexK(const AppendIndexKArgs& args, ThreadPool* executor);
}  // namespace cpu

}  // namespace kvmesh
