// Paged decode attention over every cache format and layout.
//
// For each sequence i (kv_lens[i] tokens in the cache, the last q_len of which are the query
// tokens) and each query head h, query token j sits at position p = kv_lens[i] - q_len + j and
// attends to keys at positions [max(0, p - sliding_window + 1), p] (all of [0, p] when
// sliding_window is 0), in the pool's layer `layer`, dequantising K and V on read:
//   out = softmax(softmax_scale * q·K^T) V,   lse = log(sum(exp(softmax_scale * q·K^T)))  (natural
//   log)
// Every query row sees at least its own key, so out and lse are always defined. A key whose score
// is -inf (an infinite K or q element) counts as not visible, on both backends. GQA/MQA/MHA: query
// head h reads KV head h / (num_q_heads / num_kv_heads). Position p of sequence i is in block
// block_table[i * max_blocks_per_seq + p / tokens_per_block], slot p % tokens_per_block.
//
// Dequantisation on read is the arithmetic of kernels/quantize.h (Dequantize*Element): bf16/fp16
// widen; fp8 and int8 code × the FP32 scale of (token, head) from the scale pool; fp8_per_tensor
// code × pool.pool_scale; nvfp4 e2m1 × its UE4M3 block scale (one per 16 elements) / pool_scale.
// The CPU backend evaluates exactly those functions per element. The CUDA kernels regroup the
// multiplications by a scale (a per-token scale is applied once to the dot product, 1/gs once per
// block), which is the same value up to FP32 rounding; both accumulate in FP32.
//
// Long contexts are split into num_splits partitions per (sequence, KV head), each producing a
// partial output and log-sum-exp in the workspace (kernels/attention_split.h), then combined. With
// one split the kernel writes out and lse directly and needs no workspace.
//
// Shapes (act dtypes for q and out):
//   q           [num_seqs, q_len, num_q_heads, head_dim]               fp32, bf16 or fp16
//   out         [num_seqs, q_len, num_q_heads, head_dim]               fp32 or bf16
//   lse         [num_seqs, q_len, num_q_heads]                 fp32, optional (null: not written)
//   kv_lens     [num_seqs]
//   block_table [num_seqs, max_blocks_per_seq]
// Supported (CanImplementDecodeAttention): head_dim 64, 128, 256; tokens_per_block 16..128 (a power
// of two); q_len 1..8; num_q_heads a multiple of num_kv_heads; kv_factor 2; every KvDtype; HND and
// NHD; num_splits 0..kMaxDecodeSplits. All pointers live in the backend's memory space; the
// workspace is 16-byte aligned.
//
// REQUIRES, for the values in memory (checked by the CPU backend, which returns kInvalidArgument
// and writes nothing; the CUDA kernels cannot report them and treat a key whose block id is out of
// range as absent and clamp kv_lens into [q_len, max_blocks_per_seq * tokens_per_block]):
//   q_len <= kv_lens[i] <= max_blocks_per_seq * tokens_per_block, and every block id the sequence
//   reads is in [0, pool.num_blocks).
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

inline constexpr int kMaxDecodeQueryTokens = 8;
inline constexpr int kMaxDecodeSplits = 256;

struct DecodeAttentionArgs {
  KvPoolView pool;
  std::int32_t layer = 0;
  std::int32_t num_seqs = 0;
  std::int32_t q_len = 1;
  std::int32_t num_q_heads = 0;
  const std::int32_t* kv_lens = nullptr;
  const std::int32_t* block_table = nullptr;
  std::int32_t max_blocks_per_seq = 0;
  ActDtype q_dtype = ActDtype::kBF16;
  const void* q = nullptr;
  float softmax_scale = 1.0f;
  std::int32_t sliding_window = 0;  // 0: full attention
  ActDtype out_dtype = ActDtype::kFP32;
  void* out = nullptr;
  float* lse = nullptr;
  std::int32_t num_splits = 0;  // 0: the kernel chooses (DecodeAttentionNumSplits)
};

// OK, or kInvalidArgument / kNotSupported naming the offending field and value. Checks what can be
// checked without reading the arrays (see REQUIRES above for those).
Status CanImplementDecodeAttention(const DecodeAttentionArgs& args);
// The same, and that `workspace` holds DecodeAttentionWorkspaceBytes(args) bytes, 16-byte aligned.
Status CanImplementDecodeAttention(const DecodeAttentionArgs& args, Workspace workspace);

// The number of splits the kernels use: args.num_splits when > 0, else a pure function of the
// arguments (ChooseNumSplits in kernels/attention_split.h): the longest possible key range
// (max_blocks_per_seq * tokens_per_block, or the sliding window), the number of (sequence, KV
// head) pairs, and a target of work units for a 132-SM GPU. The same on both backends.
// REQUIRES CanImplementDecodeAttention(args).ok().
std::int32_t DecodeAttentionNumSplits(const DecodeAttentionArgs& args);

// Workspace the kernel needs for these arguments (partial outputs and log-sum-exps of the splits;
// 0 with one split). REQUIRES CanImplementDecodeAttention(args).ok().
std::size_t DecodeAttentionWorkspaceBytes(const DecodeAttentionArgs& args);

namespace cpu {
// Runs on `executor` (null: the calling thread) and returns when out and lse are written.
// Parallel over (sequence, KV head, split), then over output rows for the combine.
Status DecodeAttention(const DecodeAttentionArgs& args, Workspace workspace, ThreadPool* executor);
}  // namespace cpu

}  // namespace kvmesh
