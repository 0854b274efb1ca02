#include "kernels/cpu/attention_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/strings.h"
#include "common/thread_pool.h"
#include "kernels/conversions.h"
#include "kernels/quantize.h"

namespace kvmesh::cpu {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

void ReadActRow(ActDtype dtype, const void* base, std::int64_t offset, int n, float scale,
                float* out) {
  switch (dtype) {
    case ActDtype::kFP32: {
      const float* src = static_cast<const float*>(base) + offset;
      for (int i = 0; i < n; ++i) out[i] = src[i] * scale;
      return;
    }
    case ActDtype::kBF16: {
      const Bf16* src = static_cast<const Bf16*>(base) + offset;
      for (int i = 0; i < n; ++i) out[i] = WidenToFloat(src[i]) * scale;
      return;
    }
    case ActDtype::kFP16: {
      const Fp16* src = static_cast<const Fp16*>(base) + offset;
      for (int i = 0; i < n; ++i) out[i] = WidenToFloat(src[i]) * scale;
      return;
    }
  }
}

void WriteActRow(ActDtype dtype, void* base, std::int64_t offset, int n, const float* values) {
  switch (dtype) {
    case ActDtype::kFP32: std::memcpy(static_cast<float*>(base) + offset, values, 4 * n); return;
    case ActDtype::kBF16: {
      std::uint16_t* dst = static_cast<std::uint16_t*>(base) + offset;
      for (int i = 0; i < n; ++i) dst[i] = FloatToBf16Rne(values[i]);
      return;
    }
    case ActDtype::kFP16: {
      std::uint16_t* dst = static_cast<std::uint16_t*>(base) + offset;
      for (int i = 0; i < n; ++i) dst[i] = FloatToHalfRne(values[i]);
      return;
    }
  }
}

Status CheckSequenceIndices(std::string_view kernel, const SequenceIndices& s) {
  const std::int64_t capacity = std::int64_t{s.max_blocks_per_seq} * s.tokens_per_block;
  for (int i = 0; i < s.num_seqs; ++i) {
    const std::int32_t kv_len = s.kv_lens[i];
    if (kv_len < s.q_len || kv_len > capacity) {
      return Status::InvalidArgument(StrCat(kernel, ": kv_lens[", i, "] ", kv_len,
                                            " is out of range [q_len ", s.q_len, ", ", capacity,
                                            "]"));
    }
    const KeyRange keys = DecodeKeyRange(kv_len, s.q_len, s.sliding_window);
    for (int b = keys.begin / s.tokens_per_block; b <= (keys.end - 1) / s.tokens_per_block; ++b) {
      const std::int32_t block = s.block_table[std::int64_t{i} * s.max_blocks_per_seq + b];
      if (block < 0 || block >= s.num_blocks) {
        return Status::InvalidArgument(StrCat(kernel, ": block_table[", i, "][", b, "] ", block,
                                              " is out of range [0, ", s.num_blocks, ")"));
      }
    }
  }
  return Status::Ok();
}

void RunParallel(ThreadPool* executor, std::int64_t n,
                 const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  if (executor == nullptr) {
    fn(0, n);
    return;
  }
  executor->ParallelFor(n, 1, fn);
}

void SoftmaxRows::Reset() {
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);
  std::fill(acc, acc + std::int64_t{rows} * width, 0.0f);
}

bool SoftmaxRows::AddScores(int r, float* scores, int n) {
  float tile_max = kNegInf;
  for (int t = 0; t < n; ++t) tile_max = std::max(tile_max, scores[t]);
  if (tile_max == kNegInf) {
    std::fill(scores, scores + n, 0.0f);
    return false;
  }
  if (tile_max > m[r]) {
    // exp(-inf) = 0 clears the (empty) state of a row's first visible tile.
    const float factor = std::exp(m[r] - tile_max);
    float* a = acc + std::int64_t{r} * width;
    for (int d = 0; d < width; ++d) a[d] *= factor;
    l[r] *= factor;
    m[r] = tile_max;
  }
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) {
    scores[t] = std::exp(scores[t] - m[r]);  // exp(-inf) = 0 for masked keys
    sum += scores[t];
  }
  l[r] += sum;
  return true;
}

float SoftmaxRows::Finish(int r, float* out_row) const {
  if (l[r] == 0.0f) {
    std::fill(out_row, out_row + width, 0.0f);
    return kNegInf;
  }
  const float inv = 1.0f / l[r];
  const float* a = acc + std::int64_t{r} * width;
  for (int d = 0; d < width; ++d) out_row[d] = a[d] * inv;
  return m[r] + std::log(l[r]);
}

void CombineSplits(const SplitWorkspaceLayout& layout, const float* partial, ActDtype out_dtype,
                   void* out, float* lse, ThreadPool* executor) {
  const int width = layout.width;
  RunParallel(executor, layout.rows, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> merged(width);
    for (std::int64_t row = begin; row < end; ++row) {
      float max_lse = kNegInf;
      for (int s = 0; s < layout.num_splits; ++s) {
        max_lse = std::max(max_lse, partial[layout.LseOffset(s, row)]);
      }
      std::fill(merged.begin(), merged.end(), 0.0f);
      float weight_sum = 0.0f;
      if (max_lse != kNegInf) {
        for (int s = 0; s < layout.num_splits; ++s) {
          const float split_lse = partial[layout.LseOffset(s, row)];
          if (split_lse == kNegInf) continue;
          const float w = std::exp(split_lse - max_lse);
          weight_sum += w;
          const float* o = partial + layout.OutOffset(s, row);
          for (int d = 0; d < width; ++d) merged[d] += w * o[d];
        }
        const float inv = 1.0f / weight_sum;
        for (int d = 0; d < width; ++d) merged[d] *= inv;
      }
      WriteActRow(out_dtype, out, row * width, width, merged.data());
      if (lse != nullptr) {
        lse[row] = max_lse == kNegInf ? kNegInf : max_lse + std::log(weight_sum);
      }
    }
  });
}

}  // namespace kvmesh::cpu
