// Test scenarios of the append kernels, shared by the CPU test (append_kv_test.cc) and the GPU test
// (append_kv_gpu_test.cu): a pool with random bytes, a ragged batch of sequences with their block
// tables, and inputs with awkward values. Plain C++ (no gtest, no CUDA), host memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/append_kv.h"
#include "kernels/conversions.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh::testing {

// The memory of a pool in host memory, every byte random at the start.
struct HostPool {
  HostPool(const KvPoolLayout& layout, std::int64_t blocks, float pool_scale, std::uint32_t seed) {
    view.layout = layout;
    view.num_blocks = blocks;
    view.pool_scale = pool_scale;
    std::mt19937 rng(seed);
    for (int c = 0; c < kNumKvComponents; ++c) {
      const auto& t = layout.components[c];
      if (!t.present()) continue;
      storage[c].resize(static_cast<std::size_t>(t.BytesPerBlock() * blocks));
      for (std::size_t i = 0; i < storage[c].size(); i += 4) {
        const std::uint32_t r = rng();
        for (std::size_t j = i; j < std::min(i + 4, storage[c].size()); ++j) {
          storage[c][j] = static_cast<std::uint8_t>(r >> (8 * (j - i)));
        }
      }
      view.base[c] = storage[c].data();
    }
  }
  HostPool(const HostPool& other) : view(other.view) {
    for (int c = 0; c < kNumKvComponents; ++c) {
      storage[c] = other.storage[c];
      if (view.base[c] != nullptr) view.base[c] = storage[c].data();
    }
  }
  HostPool& operator=(const HostPool&) = delete;

  std::vector<std::uint8_t> storage[kNumKvComponents];
  KvPoolView view;
};

// A ragged batch: sequence i appends tokens[i] tokens at positions [starts[i], starts[i] +
// tokens[i]). Every block a sequence covers up to its last position has a distinct id (random
// order); entries past that are -1, so a kernel that reads them would fail.
struct AppendBatch {
  std::vector<std::int32_t> cu_tokens;
  std::vector<std::int32_t> start_pos;
  std::vector<std::int32_t> block_table;
  std::int32_t max_blocks_per_seq = 0;
  std::int64_t blocks_needed = 0;

  std::int32_t num_seqs() const { return static_cast<std::int32_t>(start_pos.size()); }
  std::int32_t total_tokens() const { return cu_tokens.back(); }
};

inline AppendBatch MakeAppendBatch(const std::vector<int>& tokens, const std::vector<int>& starts,
                                   int tokens_per_block, std::int64_t num_blocks,
                                   std::uint32_t seed) {
  AppendBatch b;
  b.cu_tokens.push_back(0);
  int max_blocks = 1;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    b.cu_tokens.push_back(b.cu_tokens.back() + tokens[i]);
    b.start_pos.push_back(starts[i]);
    const int end = starts[i] + tokens[i];
    max_blocks = std::max(max_blocks, (end + tokens_per_block - 1) / tokens_per_block + 1);
  }
  b.max_blocks_per_seq = max_blocks;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::size_t next = 0;
  b.block_table.assign(tokens.size() * max_blocks, -1);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int end = starts[i] + tokens[i];
    const int used = (end + tokens_per_block - 1) / tokens_per_block;
    for (int blk = 0; blk < used; ++blk) b.block_table[i * max_blocks + blk] = ids.at(next++);
  }
  b.blocks_needed = static_cast<std::int64_t>(next);
  return b;
}

// FP32 values of one head vector: mostly scaled normals whose magnitude differs from row to row,
// and every few rows an awkward one (all zero, NaN, ±Inf, -0, subnormal, huge, one outlier).
inline std::vector<float> MakeInputValues(std::int64_t rows, int row_len, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(rows * row_len));
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t r = 0; r < rows; ++r) {
    float* x = v.data() + r * row_len;
    const float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 24) - 12);
    for (int i = 0; i < row_len; ++i) x[i] = normal(rng) * magnitude;
    switch (r % 11) {
      case 3: std::fill(x, x + row_len, 0.0f); break;
      case 5: x[rng() % row_len] = nan; break;
      case 6:
        x[rng() % row_len] = inf;
        x[rng() % row_len] = -inf;
        break;
      case 7:
        x[0] = -0.0f;
        x[row_len - 1] = 1e-40f;
        break;
      case 8: x[rng() % row_len] = 3.0e38f; break;
      case 9: x[rng() % row_len] *= 1000.0f; break;
      case 10:
        for (int i = 0; i < row_len; ++i) x[i] = -1e-42f * static_cast<float>(i + 1);
        break;
      default: break;
    }
  }
  return v;
}

// Activations of `act` dtype: rows of `row_len` values, `stride` elements apart (stride ≥ row_len;
// the gap is filled with NaN so a kernel that reads it writes NaN codes).
inline std::vector<std::uint8_t> EncodeActivations(const std::vector<float>& values,
                                                   std::int64_t rows, int row_len,
                                                   std::int64_t stride, ActDtype act) {
  const int eb = ActDtypeBytes(act);
  std::vector<std::uint8_t> out(
      static_cast<std::size_t>(std::max<std::int64_t>(1, rows * stride) * eb));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < stride; ++i) {
      const float x =
          i < row_len ? values[r * row_len + i] : std::numeric_limits<float>::quiet_NaN();
      std::uint8_t* dst = out.data() + (r * stride + i) * eb;
      if (act == ActDtype::kFP32) {
        std::memcpy(dst, &x, 4);
      } else {
        const std::uint16_t bits = act == ActDtype::kBF16 ? FloatToBf16Rne(x) : FloatToHalfRne(x);
        std::memcpy(dst, &bits, 2);
      }
    }
  }
  return out;
}

// Inputs of one append: values and their encoding, plus the argument struct pointing at them.
struct AppendInputs {
  std::vector<float> values[2];
  std::vector<std::uint8_t> encoded[2];
  std::int64_t stride = 0;
};

inline AppendInputs MakeInputs(const PagedTensorLayout& d, const AppendBatch& b, ActDtype act,
                               bool padded, std::uint32_t seed) {
  AppendInputs in;
  const int row = d.num_heads * d.inner;
  in.stride = padded ? row + 8 : row;
  for (int kv = 0; kv < d.kv_factor; ++kv) {
    in.values[kv] =
        MakeInputValues(std::int64_t{b.total_tokens()} * d.num_heads, d.inner, seed + 17 * kv);
    in.encoded[kv] = EncodeActivations(in.values[kv], b.total_tokens(), row, in.stride, act);
  }
  return in;
}

inline AppendKvArgs MakeArgs(const KvPoolView& view, const AppendBatch& b, const AppendInputs& in,
                             ActDtype act, int layer, bool padded) {
  AppendKvArgs a;
  a.pool = view;
  a.layer = layer;
  a.num_seqs = b.num_seqs();
  a.cu_tokens = b.cu_tokens.data();
  a.start_pos = b.start_pos.data();
  a.block_table = b.block_table.data();
  a.max_blocks_per_seq = b.max_blocks_per_seq;
  a.act_dtype = act;
  a.k = in.encoded[0].data();
  a.v = view.layout.data().kv_factor == 2 ? in.encoded[1].data() : nullptr;
  a.token_stride = padded ? in.stride : 0;
  a.total_tokens = b.total_tokens();
  return a;
}

}  // namespace kvmesh::testing
