// MLA decode attention, weight-absorbed form (DeepSeek-V2/V3).
//
// The pool holds one latent record per token (kv_factor 1, one head, head_dim = kv_lora_rank +
// rope_dim, e.g. 512 + 64 = 576): c = record[0, kv_lora_rank), k_rope = record[kv_lora_rank, ..).
// Per head h and query token j (position p = kv_lens[i] - q_len + j, causal as in
// decode_attention.h; MLA has no sliding window):
//   score_t = softmax_scale * (q_nope[h]·c_t + q_rope[h]·k_rope_t)
//   out[h]  = sum_t softmax(score)_t * c_t            (in latent space, kv_lora_rank wide)
//   lse[h]  = log(sum_t exp(score_t))                 (natural log)
// Pools: bf16, fp8 (one FP32 scale per token over the whole record, from the scale pool) and
// fp8_per_tensor (pool_scale). Dequantisation is that of kernels/quantize.h; the CPU evaluates it
// per element, the CUDA kernel applies the token's scale once to the score and to the probability
// (the same value up to rounding).
//
// Precision: the CPU accumulates in FP32 from FP32 inputs. The CUDA kernel runs the two products
// on tensor cores (mma.sync m16n8k16, FP32 accumulation): q, the latent rows and the probabilities
// enter as BF16 (bf16 pools) or FP16 (fp8 pools, whose codes FP16 holds exactly), so it agrees
// with the CPU to about 1e-2 of max |c| rather than to FP32 rounding (stated in the GPU test).
//
// Long contexts are split as in decode attention (kernels/attention_split.h); the split kernel
// handles a tile of 16 query rows (heads × query tokens) per CTA, reading each latent row once per
// tile.
//
// Shapes:
//   q_nope [num_seqs, q_len, num_heads, kv_lora_rank]    fp32, bf16 or fp16 (q_dtype)
//   q_rope [num_seqs, q_len, num_heads, rope_dim]        q_dtype
//   out    [num_seqs, q_len, num_heads, kv_lora_rank]    fp32 or bf16
//   lse    [num_seqs, q_len, num_heads]                  fp32, optional (null: not written)
// Supported (CanImplementMlaDecode): kv_lora_rank 512 and rope_dim 64 (the pool's head_dim must be
// their sum, kv_factor 1, one head); num_heads 1..128; q_len 1..8; tokens_per_block 16..128; bf16,
// fp8 and fp8_per_tensor pools; HND or NHD (identical with one head).
// All pointers live in the backend's memory space; the workspace is 16-byte aligned.
//
// REQUIRES for the values in memory: as in decode_attention.h (q_len <= kv_lens[i] <=
// max_blocks_per_seq * tokens_per_block, block ids in range; checked by the CPU backend).
//
// Thread safety: reentrant; concurrent calls must not share a workspace or an output.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/kernel_types.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

class ThreadPool;

inline constexpr int kMlaMaxHeads = 128;
// Query rows (heads × query tokens) one CUDA CTA handles; also the split policy's unit.
inline constexpr int kMlaRowsPerTile = 16;

struct MlaDecodeArgs {
  KvPoolView pool;
  std::int32_t layer = 0;
  std::int32_t kv_lora_rank = 512;
  std::int32_t rope_dim = 64;
  std::int32_t num_seqs = 0;
  std::int32_t q_len = 1;
  std::int32_t num_heads = 0;
  const std::int32_t* kv_lens = nullptr;
  const std::int32_t* block_table = nullptr;
  std::int32_t max_blocks_per_seq = 0;
  ActDtype q_dtype = ActDtype::kBF16;
  const void* q_nope = nullptr;
  const void* q_rope = nullptr;
  float softmax_scale = 1.0f;
  ActDtype out_dtype = ActDtype::kFP32;
  void* out = nullptr;
  float* lse = nullptr;
  std::int32_t num_splits = 0;  // 0: the kernel chooses (MlaDecodeNumSplits)
};

// OK, or kInvalidArgument / kNotSupported naming the offending field and value.
Status CanImplementMlaDecode(const MlaDecodeArgs& args);
// The same, and that `workspace` holds MlaDecodeWorkspaceBytes(args) bytes, 16-byte aligned.
Status CanImplementMlaDecode(const MlaDecodeArgs& args, Workspace workspace);

// args.num_splits when > 0, else a pure function of the arguments (see DecodeAttentionNumSplits;
// the work units are (sequence, 16-row tile)). REQUIRES CanImplementMlaDecode(args).ok().
std::int32_t MlaDecodeNumSplits(const MlaDecodeArgs& args);
// 0 with one split. REQUIRES CanImplementMlaDecode(args).ok().
std::size_t MlaDecodeWorkspaceBytes(const MlaDecodeArgs& args);

namespace cpu {
// Runs on `executor` (null: the calling thread); parallel over (sequence, row tile, split).
Status MlaDecode(const MlaDecodeArgs& args, Workspace workspace, ThreadPool* executor);
}  // namespace cpu

}  // namespace kvmesh
