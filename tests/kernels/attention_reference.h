// Dense float64 reference of paged decode attention and MLA decode, for the kernel tests.
//
// Written independently of the kernels' loop structure: for each sequence (and KV head) it first
// gathers the keys and values into dense arrays through PagedTensorLayout offsets, dequantising
// each row with kernels/quantize.h's Dequantize* head functions, then runs a textbook softmax in
// double:
//   s_t = softmax_scale * sum_d q[d] * k_t[d]         over the keys the query sees
//   lse = max(s) + log(sum_t exp(s_t - max(s)))        (natural log)
//   out = sum_t exp(s_t - lse) * v_t
// q is widened from its activation dtype exactly. Host memory only. Plain C++ (no gtest, no CUDA).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_split.h"
#include "kernels/decode_attention.h"
#include "kernels/mla_decode.h"
#include "kernels/quantize.h"

namespace kvmesh::testing {

// Output rows in the kernels' order ([num_seqs, q_len, heads]).
struct ReferenceAttention {
  std::vector<double> out;  // [rows, width]
  std::vector<double> lse;  // [rows]
  int width = 0;
};

// The dequantised row (block, layer, kv, head, slot) of a host pool, by quantize.h's head
// dequantisers.
inline std::vector<float> ReferenceDequantizedRow(const KvPoolView& pool, int layer, int kv,
                                                  int head, std::int64_t block, int slot) {
  const PagedTensorLayout& data = pool.layout.data();
  const PagedTensorLayout& scale = pool.layout.scale();
  const int n = data.inner;
  const auto* data_base = static_cast<const std::uint8_t*>(pool.base[0]);
  const auto* scale_base = static_cast<const std::uint8_t*>(pool.base[1]);
  const std::uint8_t* row = data_base + data.ByteOffset(block, layer, kv, head, slot, 0);
  std::vector<float> out(n);
  switch (pool.layout.dtype) {
    case KvDtype::kBF16:
    case KvDtype::kFP16: {
      std::vector<std::uint16_t> bits(n);
      std::memcpy(bits.data(), row, 2 * n);
      if (pool.layout.dtype == KvDtype::kBF16) {
        DequantizeHeadBf16(bits.data(), n, out.data());
      } else {
        DequantizeHeadFp16(bits.data(), n, out.data());
      }
      break;
    }
    case KvDtype::kFP8:
    case KvDtype::kINT8: {
      float s;
      std::memcpy(&s, scale_base + scale.ByteOffset(block, layer, kv, head, slot, 0), 4);
      if (pool.layout.dtype == KvDtype::kFP8) {
        DequantizeHeadFp8(row, n, s, out.data());
      } else {
        DequantizeHeadInt8(reinterpret_cast<const std::int8_t*>(row), n, s, out.data());
      }
      break;
    }
    case KvDtype::kFP8PerTensor: DequantizeHeadFp8(row, n, pool.pool_scale, out.data()); break;
    case KvDtype::kNVFP4:
      DequantizeHeadNvfp4(row, scale_base + scale.ByteOffset(block, layer, kv, head, slot, 0), n,
                          pool.pool_scale, out.data());
      break;
  }
  return out;
}

// Element i of an activation array, exactly.
inline double ReferenceActValue(ActDtype dtype, const void* base, std::int64_t i) {
  switch (dtype) {
    case ActDtype::kFP32: return static_cast<const float*>(base)[i];
    case ActDtype::kBF16: return WidenToFloat(static_cast<const Bf16*>(base)[i]);
    case ActDtype::kFP16: return WidenToFloat(static_cast<const Fp16*>(base)[i]);
  }
  return 0.0;
}

// Softmax of one query row over dense keys; appends width outputs and one lse.
inline void ReferenceSoftmaxRow(const std::vector<double>& q, const std::vector<double>& keys,
                                const std::vector<double>& values, int key_width, int value_width,
                                const std::vector<int>& visible, double softmax_scale, double* out,
                                double* lse) {
  std::vector<double> s;
  s.reserve(visible.size());
  for (const int t : visible) {
    double dot = 0.0;
    for (int d = 0; d < key_width; ++d) dot += q[d] * keys[std::size_t(t) * key_width + d];
    s.push_back(softmax_scale * dot);
  }
  const double max_s = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (const double x : s) sum += std::exp(x - max_s);
  *lse = max_s + std::log(sum);
  for (int d = 0; d < value_width; ++d) out[d] = 0.0;
  for (std::size_t i = 0; i < visible.size(); ++i) {
    const double p = std::exp(s[i] - *lse);
    for (int d = 0; d < value_width; ++d) {
      out[d] += p * values[std::size_t(visible[i]) * value_width + d];
    }
  }
}

// Keys [0, kv_len) of one (sequence, kv, head) gathered as doubles, [kv_len, width].
inline std::vector<double> ReferenceGather(const KvPoolView& pool, int layer, int kv, int head,
                                           const std::int32_t* table, int kv_len, int first_key) {
  const int tpb = pool.layout.tokens_per_block();
  const int width = pool.layout.data().inner;
  std::vector<double> dense(std::size_t(kv_len) * width, 0.0);
  for (int t = first_key; t < kv_len; ++t) {
    const std::vector<float> row =
        ReferenceDequantizedRow(pool, layer, kv, head, table[t / tpb], t % tpb);
    for (int d = 0; d < width; ++d) dense[std::size_t(t) * width + d] = row[d];
  }
  return dense;
}

// Positions of the keys query token j sees.
inline std::vector<int> ReferenceVisibleKeys(int kv_len, int q_len, int j, int window) {
  const int p = kv_len - q_len + j;
  std::vector<int> keys;
  for (int t = 0; t <= p; ++t) {
    if (window == 0 || t > p - window) keys.push_back(t);
  }
  return keys;
}

inline ReferenceAttention ReferenceDecodeAttention(const DecodeAttentionArgs& args) {
  const PagedTensorLayout& data = args.pool.layout.data();
  const int d = data.inner;
  const int group = args.num_q_heads / data.num_heads;
  ReferenceAttention ref;
  ref.width = d;
  const std::size_t rows = std::size_t(args.num_seqs) * args.q_len * args.num_q_heads;
  ref.out.assign(rows * d, 0.0);
  ref.lse.assign(rows, 0.0);
  for (int i = 0; i < args.num_seqs; ++i) {
    const int kv_len = args.kv_lens[i];
    const std::int32_t* table = args.block_table + std::int64_t{i} * args.max_blocks_per_seq;
    const int first = DecodeKeyRange(kv_len, args.q_len, args.sliding_window).begin;
    for (int g = 0; g < data.num_heads; ++g) {
      const std::vector<double> k =
          ReferenceGather(args.pool, args.layer, 0, g, table, kv_len, first);
      const std::vector<double> v =
          ReferenceGather(args.pool, args.layer, 1, g, table, kv_len, first);
      for (int j = 0; j < args.q_len; ++j) {
        const std::vector<int> visible =
            ReferenceVisibleKeys(kv_len, args.q_len, j, args.sliding_window);
        for (int hh = 0; hh < group; ++hh) {
          const std::int64_t row =
              (std::int64_t{i} * args.q_len + j) * args.num_q_heads + g * group + hh;
          std::vector<double> q(d);
          for (int x = 0; x < d; ++x) q[x] = ReferenceActValue(args.q_dtype, args.q, row * d + x);
          ReferenceSoftmaxRow(q, k, v, d, d, visible, args.softmax_scale, &ref.out[row * d],
                              &ref.lse[row]);
        }
      }
    }
  }
  return ref;
}

inline ReferenceAttention ReferenceMlaDecode(const MlaDecodeArgs& args) {
  const int latent = args.kv_lora_rank;
  const int record = args.kv_lora_rank + args.rope_dim;
  ReferenceAttention ref;
  ref.width = latent;
  const std::size_t rows = std::size_t(args.num_seqs) * args.q_len * args.num_heads;
  ref.out.assign(rows * latent, 0.0);
  ref.lse.assign(rows, 0.0);
  for (int i = 0; i < args.num_seqs; ++i) {
    const int kv_len = args.kv_lens[i];
    const std::int32_t* table = args.block_table + std::int64_t{i} * args.max_blocks_per_seq;
    const std::vector<double> keys = ReferenceGather(args.pool, args.layer, 0, 0, table, kv_len, 0);
    std::vector<double> values(std::size_t(kv_len) * latent);
    for (int t = 0; t < kv_len; ++t) {
      for (int x = 0; x < latent; ++x)
        values[std::size_t(t) * latent + x] = keys[std::size_t(t) * record + x];
    }
    for (int j = 0; j < args.q_len; ++j) {
      const std::vector<int> visible = ReferenceVisibleKeys(kv_len, args.q_len, j, 0);
      for (int h = 0; h < args.num_heads; ++h) {
        const std::int64_t row = (std::int64_t{i} * args.q_len + j) * args.num_heads + h;
        std::vector<double> q(record);
        for (int x = 0; x < latent; ++x) {
          q[x] = ReferenceActValue(args.q_dtype, args.q_nope, row * latent + x);
        }
        for (int x = 0; x < args.rope_dim; ++x) {
          q[latent + x] = ReferenceActValue(args.q_dtype, args.q_rope, row * args.rope_dim + x);
        }
        ReferenceSoftmaxRow(q, keys, values, record, latent, visible, args.softmax_scale,
                            &ref.out[row * latent], &ref.lse[row]);
      }
    }
  }
  return ref;
}

}  // namespace kvmesh::testing
