// Pieces the CPU attention kernels (decode_attention.cc, mla_decode.cc) share: activation rows in
// and out, running a loop on the executor, the per-row online-softmax state, and the combine step
// over splits. Internal to kernels/cpu.
//
// Thread safety: the functions are reentrant; a SoftmaxRows object is confined to one task.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>

#include "common/status.h"
#include "kernels/attention_split.h"
#include "kernels/kernel_types.h"

namespace kvmesh {
class ThreadPool;
}

namespace kvmesh::cpu {

// out[0, n) = float(row element) * scale for an activation row of `dtype` starting at element
// `offset` of `base`.
void ReadActRow(ActDtype dtype, const void* base, std::int64_t offset, int n, float scale,
                float* out);

// Writes values[0, n) as `dtype` (fp32, or bf16 rounded to nearest even) at element `offset`.
void WriteActRow(ActDtype dtype, void* base, std::int64_t offset, int n, const float* values);

// The REQUIRES on values in memory of decode attention and MLA decode: q_len <= kv_lens[i] <=
// max_blocks_per_seq * tokens_per_block, and the block ids of every key a query sees (the keys of
// DecodeKeyRange) in [0, num_blocks). kInvalidArgument naming the sequence and value otherwise.
struct SequenceIndices {
  std::int32_t num_seqs = 0;
  std::int32_t q_len = 1;
  const std::int32_t* kv_lens = nullptr;
  const std::int32_t* block_table = nullptr;
  std::int32_t max_blocks_per_seq = 0;
  std::int32_t tokens_per_block = 0;
  std::int64_t num_blocks = 0;
  std::int32_t sliding_window = 0;
};
Status CheckSequenceIndices(std::string_view kernel, const SequenceIndices& s);

// fn(begin, end) over chunks of [0, n) on `executor`, or on the caller when it is null.
void RunParallel(ThreadPool* executor, std::int64_t n,
                 const std::function<void(std::int64_t, std::int64_t)>& fn);

// Online softmax of `rows` query rows over a stream of key tiles, FP32:
//   m[r] = the largest score so far, l[r] = sum exp(score - m[r]), acc[r][:] = sum exp(score -
//   m[r]) * v
// AddScores turns a tile of scores (-inf = masked) into probabilities p (in place) against an
// updated m, rescaling l and acc when m grows.
struct SoftmaxRows {
  int rows = 0;
  int width = 0;
  float* m = nullptr;    // [rows]
  float* l = nullptr;    // [rows]
  float* acc = nullptr;  // [rows, width]

  void Reset();
  // scores[0, n) of row r become probabilities; returns false when all were masked (p all 0).
  bool AddScores(int r, float* scores, int n);
  // acc[r][:] / l[r], and lse = m + log(l) (natural log); -inf and zeros when l == 0.
  float Finish(int r, float* out_row) const;
};

// Keys per tile of the CPU kernels.
inline constexpr int kKeyTile = 16;

// scores[t] = q · key t for a tile of keys stored transposed, keys_t[d * kKeyTile + t], so the loop
// vectorises over keys (no horizontal reduction).
template <int D>
void TileScores(const float* q, const float* keys_t, float* scores) {
  float s[kKeyTile] = {};
  for (int d = 0; d < D; ++d) {
    const float qd = q[d];
    const float* k = keys_t + d * kKeyTile;
    for (int t = 0; t < kKeyTile; ++t) s[t] += qd * k[t];
  }
  std::memcpy(scores, s, sizeof(s));
}

// acc[0, D) += p * v[0, D).
template <int D>
void AddWeighted(float p, const float* v, float* acc) {
  for (int d = 0; d < D; ++d) acc[d] += p * v[d];
}

// Merges the splits of `layout` (workspace `partial`) into out/lse for rows [0, layout.rows).
void CombineSplits(const SplitWorkspaceLayout& layout, const float* partial, ActDtype out_dtype,
                   void* out, float* lse, ThreadPool* executor);

}  // namespace kvmesh::cpu
