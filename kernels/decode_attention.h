// Paged decode attention over every cache format and layout.
//
// For each sequence i (kv_lens[i] tokens in the cache, the last q_len of which are the query
// tokens) and each query head h, query token j sits at position p = kv_lens[i] - q_len + j and
// attends to keys at positions [max(0, p - sliding_window + 1), p] (all of [0, p] when
// sliding_window is 0), in the pool's layer `layer`, dequantising K and V on read:
//   out = softmax(softmax_scale * q·K^T) V,   lse = log(sum(exp(softmax_scale * q·K^T)))  (natural
//   log)
// GQA/MQA/MHA: query head h reads KV head h / (num_q_heads / num_kv_heads).
// Long contexts are split into num_splits partitions per (sequence, KV head), each producing a
// partial output and log-sum-exp in the workspace, then combined.
//
// Shapes (act dtypes for q and out):
//   q           [num_seqs, q_len, num_q_heads, head_dim]
//   out         [num_seqs, q_len, num_q_heads, head_dim]      fp32 or bf16
//   lse         [num_seqs, q_len, num_q_heads]                 fp32, optional (null: not written)
//   kv_lens     [num_seqs]
//   block_table [num_seqs, max_blocks_per_seq]
// Supported: head_dim 64, 128, 256; tokens_per_block 16..128; q_len 1..8; every KvDtype; HND and
// NHD. All pointers live in the backend's memory space.
//
// Thread safety: reentrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/kernel_types.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

class ThreadPool;

inline constexpr int kMaxDecodeQueryTokens = 8;

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
  std::int32_t num_splits = 0;  // 0: the kernel chooses
};

Status CanImplementDecodeAttention(const DecodeAttentionArgs& args);
// Workspace the kernel needs for these arguments (partial outputs and log-sum-exps of the splits).
std::size_t DecodeAttentionWorkspaceBytes(const DecodeAttentionArgs& args);

namespace cpu {
Status DecodeAttention(const DecodeAttentionArgs& args, Workspace workspace, ThreadPool* executor);
}  // namespace cpu

}  // namespace kvmesh
