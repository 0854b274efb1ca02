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

// Four floats as one value (GCC/Clang vector extension: one SSE or NEON register); lane-wise IEEE
// operations, like scalar code.
typedef float Float4 __attribute__((vector_size(16)));

inline Float4 LoadFloat4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// q · k over D dims (a multiple of 16), with 16 independent partial sums in four vector
// accumulators, so the loop is neither scalar nor bound by the latency of one chain of additions;
// the partial sums are added pairwise at the end. The order of operations is fixed by the code.
template <int D>
float Dot(const float* q, const float* k) {
  static_assert(D % 16 == 0);
  Float4 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  for (int d = 0; d < D; d += 16) {
    a0 += LoadFloat4(q + d) * LoadFloat4(k + d);
    a1 += LoadFloat4(q + d + 4) * LoadFloat4(k + d + 4);
    a2 += LoadFloat4(q + d + 8) * LoadFloat4(k + d + 8);
    a3 += LoadFloat4(q + d + 12) * LoadFloat4(k + d + 12);
  }
  const Float4 a = (a0 + a1) + (a2 + a3);
  return (a[0] + a[2]) + (a[1] + a[3]);
}

// acc[0, D) += p[t] * values[t][0, D) for t = 0, 1, .., n-1 in that order (skipping p[t] == 0),
// holding 16 dims of acc in registers across the n keys.
template <int D>
void AccumulateValues(const float* p, int n, const float* values, float* acc) {
  static_assert(D % 16 == 0);
  for (int d = 0; d < D; d += 16) {
    Float4 a0 = LoadFloat4(acc + d), a1 = LoadFloat4(acc + d + 4);
    Float4 a2 = LoadFloat4(acc + d + 8), a3 = LoadFloat4(acc + d + 12);
    for (int t = 0; t < n; ++t) {
      if (p[t] == 0.0f) continue;
      const Float4 w = {p[t], p[t], p[t], p[t]};
      const float* v = values + std::int64_t{t} * D + d;
      a0 += w * LoadFloat4(v);
      a1 += w * LoadFloat4(v + 4);
      a2 += w * LoadFloat4(v + 8);
      a3 += w * LoadFloat4(v + 12);
    }
    std::memcpy(acc + d, &a0, sizeof(a0));
    std::memcpy(acc + d + 4, &a1, sizeof(a1));
    std::memcpy(acc + d + 8, &a2, sizeof(a2));
    std::memcpy(acc + d + 12, &a3, sizeof(a3));
  }
}

// Merges the splits of `layout` (workspace `partial`) into out/lse for rows [0, layout.rows).
void CombineSplits(const SplitWorkspaceLayout& layout, const float* partial, ActDtype out_dtype,
                   void* out, float* lse, ThreadPool* executor);

}  // namespace kvmesh::cpu
