// MLA decode attention, weight-absorbed form (DeepSeek-V2/V3).
//
// The pool holds one latent record per token (kv_factor 1, one head, head_dim = kv_lora_rank +
// rope_dim, e.g. 512 + 64 = 576): c = record[0, kv_lora_rank), k_rope = record[kv_lora_rank, ..).
// Per head h and query token j (position p = kv_lens[i] - q_len + j, causal as in
// decode_attention.h):
//   score_t = softmax_scale * (q_nope[h]·c_t + q_rope[h]·k_rope_t)
//   out[h]  = sum_t softmax(score)_t * c_t            (in latent space, kv_lora_rank wide)
// Pools: bf16 and fp8 (per-token scale over the whole record).
//
// Shapes:
//   q_nope [num_seqs, q_len, num_heads, kv_lora_rank]    q_rope [num_seqs, q_len, num_heads,
//   rope_dim] out    [num_seqs, q_len, num_heads, kv_lora_rank]    lse    [num_seqs, q_len,
//   num_heads] (optional)
// All pointers live in the backend's memory space. Thread safety: reentrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/kernel_types.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

class ThreadPool;

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
  std::int32_t num_splits = 0;
};

Status CanImplementMlaDecode(const MlaDecodeArgs& args);
std::size_t MlaDecodeWorkspaceBytes(const MlaDecodeArgs& args);

namespace cpu {
Status MlaDecode(const MlaDecodeArgs& args, Workspace workspace, ThreadPool* executor);
}  // namespace cpu

}  // namespace kvmesh
