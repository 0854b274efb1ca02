// Test scenarios of paged decode attention and MLA decode, shared by the CPU tests
// (decode_attention_test.cc, mla_decode_test.cc), the GPU tests (attention_gpu_test.cu) and the
// benchmarks: host pools filled by quantising random K/V with kernels/quantize.h's QuantizeHead*
// into shuffled block-table positions (independent of the append kernel), ragged batches, queries,
// and the comparison against the float64 reference. Plain C++ (no gtest, no CUDA), host memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/strings.h"
#include "kernels/attention_split.h"
#include "kernels/decode_attention.h"
#include "kernels/mla_decode.h"
#include "kernels/paged_kv_layout.h"
#include "kernels/quantize.h"
#include "tests/kernels/attention_reference.h"

namespace kvmesh::testing {

// A pool in host memory. Every byte starts as 0xFF, which is NaN in bf16, fp16, fp8 and as an FP32
// scale (and a NaN block scale for nvfp4): a kernel that reads a row nobody wrote produces NaN.
struct HostKvPool {
  HostKvPool(const KvPoolLayout& layout, std::int64_t blocks, float pool_scale) {
    view.layout = layout;
    view.num_blocks = blocks;
    view.pool_scale = pool_scale;
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& t = layout.components[c];
      if (!t.present()) continue;
      storage[c].assign(static_cast<std::size_t>(t.BytesPerBlock() * blocks), 0xFF);
      view.base[c] = storage[c].data();
    }
  }
  HostKvPool(const HostKvPool&) = delete;
  HostKvPool& operator=(const HostKvPool&) = delete;

  // Quantises x[0, inner) into row (block, layer, kv, head, slot) with the pool's QuantizeHead*.
  void WriteRow(std::int64_t block, int layer, int kv, int head, int slot, const float* x) {
    const PagedTensorLayout& data = view.layout.data();
    const PagedTensorLayout& scale = view.layout.scale();
    const int n = data.inner;
    std::uint8_t* row = storage[0].data() + data.ByteOffset(block, layer, kv, head, slot, 0);
    std::uint8_t* scale_row =
        scale.present() ? storage[1].data() + scale.ByteOffset(block, layer, kv, head, slot, 0)
                        : nullptr;
    switch (view.layout.dtype) {
      case KvDtype::kBF16:
      case KvDtype::kFP16: {
        std::vector<std::uint16_t> bits(n);
        if (view.layout.dtype == KvDtype::kBF16) {
          QuantizeHeadBf16(x, n, bits.data());
        } else {
          QuantizeHeadFp16(x, n, bits.data());
        }
        std::memcpy(row, bits.data(), 2 * n);
        return;
      }
      case KvDtype::kFP8: {
        const float s = QuantizeHeadFp8(x, n, row);
        std::memcpy(scale_row, &s, 4);
        return;
      }
      case KvDtype::kFP8PerTensor: QuantizeHeadFp8PerTensor(x, n, view.pool_scale, row); return;
      case KvDtype::kINT8: {
        const float s = QuantizeHeadInt8(x, n, reinterpret_cast<std::int8_t*>(row));
        std::memcpy(scale_row, &s, 4);
        return;
      }
      case KvDtype::kNVFP4: QuantizeHeadNvfp4(x, n, view.pool_scale, row, scale_row); return;
    }
  }

  std::vector<std::uint8_t> storage[kNumKvComponents];
  KvPoolView view;
};

// A small, quick generator for test data (splitmix64): the pools of the sweeps hold millions of
// values, and std::normal_distribution over mt19937 dominated the test's run time.
class TestRng {
 public:
  explicit TestRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  // Approximately N(0, 1): the centred sum of four uniforms (Irwin-Hall), variance 4/12.
  float Normal() {
    const float sum = Uniform() + Uniform() + Uniform() + Uniform();
    return (sum - 2.0f) * 1.7320508f;
  }

 private:
  std::uint64_t state_;
};

// Random vectors with the shape of real K/V: N(0, 1) times a per-token magnitude (log-normal), and
// now and then an outlier element.
inline void FillKvValues(TestRng& rng, float* x, int n) {
  const float magnitude = std::exp(0.5f * rng.Normal());
  for (int i = 0; i < n; ++i) {
    x[i] = magnitude * rng.Normal();
    if (rng.Uniform() < 0.01f) x[i] *= 6.0f;
  }
}

// Block tables of a ragged batch: every block a sequence covers gets a distinct id, in shuffled
// order over a pool with spare blocks; entries past the sequence's last block, and the blocks that
// lie wholly before its sliding window, are -1 (a kernel that reads them fails).
struct BatchTables {
  std::vector<std::int32_t> kv_lens;
  std::vector<std::int32_t> block_table;
  std::int32_t max_blocks_per_seq = 0;
  std::int64_t num_blocks = 0;
};

inline BatchTables MakeBatchTables(const std::vector<int>& kv_lens, int tpb, std::uint32_t seed) {
  BatchTables b;
  b.kv_lens.assign(kv_lens.begin(), kv_lens.end());
  int max_blocks = 1;
  std::int64_t needed = 0;
  for (const int len : kv_lens) {
    max_blocks = std::max(max_blocks, (len + tpb - 1) / tpb);
    needed += (len + tpb - 1) / tpb;
  }
  b.max_blocks_per_seq = max_blocks + 1;  // one spare column of -1
  b.num_blocks = needed + needed / 2 + 3;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(b.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.block_table.assign(kv_lens.size() * b.max_blocks_per_seq, -1);
  std::size_t next = 0;
  for (std::size_t i = 0; i < kv_lens.size(); ++i) {
    for (int blk = 0; blk < (kv_lens[i] + tpb - 1) / tpb; ++blk) {
      b.block_table[i * b.max_blocks_per_seq + blk] = ids[next++];
    }
  }
  return b;
}

// Drops the block ids of blocks wholly before every query's window (after the pool is written).
inline void ForgetBlocksBeforeWindow(BatchTables& b, int tpb, int q_len, int window) {
  for (std::size_t i = 0; i < b.kv_lens.size(); ++i) {
    const KeyRange keys = DecodeKeyRange(b.kv_lens[i], q_len, window);
    for (int blk = 0; blk < keys.begin / tpb; ++blk)
      b.block_table[i * b.max_blocks_per_seq + blk] = -1;
  }
}

// Random activations of `dtype`, about N(0, 1), as bytes.
inline std::vector<std::uint8_t> RandomActivations(ActDtype dtype, std::int64_t n, TestRng& rng) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) * ActDtypeBytes(dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = rng.Normal();
    if (dtype == ActDtype::kFP32) {
      std::memcpy(&bytes[i * 4], &x, 4);
    } else {
      const std::uint16_t h = dtype == ActDtype::kBF16 ? FloatToBf16Rne(x) : FloatToHalfRne(x);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

inline float DefaultPoolScale(KvDtype dtype) {
  // fp8 per tensor: values up to about 16 map into the E4M3 range; nvfp4: gs = 448 * 6 / 16.
  if (dtype == KvDtype::kFP8PerTensor) return 16.0f / 448.0f;
  if (dtype == KvDtype::kNVFP4) return 448.0f * 6.0f / 16.0f;
  return 1.0f;
}

// ---------------------------------------------------------------------------------------------
// Decode attention

struct DecodeCase {
  KvDtype dtype = KvDtype::kBF16;
  KvLayout layout = KvLayout::kHND;
  int head_dim = 128;
  int num_kv_heads = 2;
  int num_q_heads = 8;
  int tokens_per_block = 16;
  int q_len = 1;
  int window = 0;
  ActDtype q_dtype = ActDtype::kBF16;
  ActDtype out_dtype = ActDtype::kFP32;
  int num_splits = 0;
  std::vector<int> kv_lens = {1, 3, 7, 17, 65};
  std::uint32_t seed = 1;

  [[nodiscard]] std::string Name() const {
    return StrCat(KvDtypeName(dtype), "_", KvLayoutName(layout), "_d", head_dim, "_kv",
                  num_kv_heads, "_q", num_q_heads, "_tpb", tokens_per_block, "_qlen", q_len, "_win",
                  window, "_q", ActDtypeName(q_dtype), "_out", ActDtypeName(out_dtype), "_splits",
                  num_splits);
  }
};

// A decode problem in host memory: the pool's layer 1 of 2 holds the keys (layer 0 stays 0xFF).
struct DecodeProblem {
  explicit DecodeProblem(const DecodeCase& c)
      : spec(c),
        tables(MakeBatchTables(c.kv_lens, c.tokens_per_block, c.seed)),
        pool(Layout(c), tables.num_blocks, DefaultPoolScale(c.dtype)) {
    TestRng rng(c.seed * 7919u + 13u);
    std::vector<float> x(c.head_dim);
    for (std::size_t i = 0; i < c.kv_lens.size(); ++i) {
      for (int t = 0; t < c.kv_lens[i]; ++t) {
        const std::int32_t block =
            tables.block_table[i * tables.max_blocks_per_seq + t / c.tokens_per_block];
        for (int kv = 0; kv < 2; ++kv) {
          for (int h = 0; h < c.num_kv_heads; ++h) {
            FillKvValues(rng, x.data(), c.head_dim);
            pool.WriteRow(block, kLayer, kv, h, t % c.tokens_per_block, x.data());
            if (kv == 1) {
              for (const float v : ReferenceDequantizedRow(pool.view, kLayer, kv, h, block,
                                                           t % c.tokens_per_block)) {
                max_abs_v = std::max(max_abs_v, std::fabs(v));
              }
            }
          }
        }
      }
    }
    ForgetBlocksBeforeWindow(tables, c.tokens_per_block, c.q_len, c.window);
    q = RandomActivations(c.q_dtype, Rows() * c.head_dim, rng);
  }

  static KvPoolLayout Layout(const DecodeCase& c) {
    KvPoolGeometry g;
    g.dtype = c.dtype;
    g.layout = c.layout;
    g.num_layers = 2;
    g.kv_factor = 2;
    g.num_kv_heads = c.num_kv_heads;
    g.tokens_per_block = c.tokens_per_block;
    g.head_dim = c.head_dim;
    return MakeKvPoolLayout(g).value();
  }

  [[nodiscard]] std::int64_t Rows() const {
    return std::int64_t(spec.kv_lens.size()) * spec.q_len * spec.num_q_heads;
  }

  // Arguments over host memory (the CPU backend) with the given outputs.
  DecodeAttentionArgs Args(void* out, float* lse) const {
    DecodeAttentionArgs a;
    a.pool = pool.view;
    a.layer = kLayer;
    a.num_seqs = static_cast<std::int32_t>(spec.kv_lens.size());
    a.q_len = spec.q_len;
    a.num_q_heads = spec.num_q_heads;
    a.kv_lens = tables.kv_lens.data();
    a.block_table = tables.block_table.data();
    a.max_blocks_per_seq = tables.max_blocks_per_seq;
    a.q_dtype = spec.q_dtype;
    a.q = q.data();
    a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
    a.sliding_window = spec.window;
    a.out_dtype = spec.out_dtype;
    a.out = out;
    a.lse = lse;
    a.num_splits = spec.num_splits;
    return a;
  }

  static constexpr int kLayer = 1;
  DecodeCase spec;
  BatchTables tables;
  HostKvPool pool;
  std::vector<std::uint8_t> q;
  float max_abs_v = 0.0f;
};

// Makes keys score -inf for every query row (review finding: a -inf score on a row's first visible
// key gave NaN in the CUDA kernel; the rule is that such a key is not visible, as on the CPU): the
// K row of position 0 of sequence 0 (every row's first visible key without a window) and of
// position 2 of sequence 1 becomes (-inf, 0, ..., 0), and element 0 of every query becomes +1.
// REQUIRES a bf16 or fp16 pool and queries, window 0, at least two sequences of >= 4 tokens.
inline void PlantNegativeInfinityKeys(DecodeProblem& p) {
  const DecodeCase& c = p.spec;
  std::vector<float> x(c.head_dim, 0.0f);
  x[0] = -INFINITY;
  const int where[2][2] = {{0, 0}, {1, 2}};  // (sequence, position)
  for (const auto& w : where) {
    const std::int32_t block =
        p.tables.block_table[w[0] * p.tables.max_blocks_per_seq + w[1] / c.tokens_per_block];
    for (int h = 0; h < c.num_kv_heads; ++h) {
      p.pool.WriteRow(block, DecodeProblem::kLayer, 0, h, w[1] % c.tokens_per_block, x.data());
    }
  }
  const std::uint16_t one =
      c.q_dtype == ActDtype::kBF16 ? FloatToBf16Rne(1.0f) : FloatToHalfRne(1.0f);
  for (std::int64_t row = 0; row < p.Rows(); ++row) {
    std::memcpy(&p.q[static_cast<std::size_t>(row * c.head_dim) * 2], &one, 2);
  }
}

// ---------------------------------------------------------------------------------------------
// MLA decode

struct MlaCase {
  KvDtype dtype = KvDtype::kBF16;
  KvLayout layout = KvLayout::kHND;
  int num_heads = 16;
  int tokens_per_block = 64;
  int q_len = 1;
  ActDtype q_dtype = ActDtype::kBF16;
  ActDtype out_dtype = ActDtype::kFP32;
  int num_splits = 0;
  std::vector<int> kv_lens = {1, 3, 7, 17, 65};
  std::uint32_t seed = 1;
  // Multiplies every latent value (and the fp8_per_tensor pool scale); the softmax scale is divided
  // by it, so the scores are those of value_scale 1. Tiny and huge values give per-token (and pool)
  // scales far outside FP16's normal range (1/65504 .. 65504).
  float value_scale = 1.0f;

  [[nodiscard]] std::string Name() const {
    return StrCat(KvDtypeName(dtype), "_", KvLayoutName(layout), "_h", num_heads, "_tpb",
                  tokens_per_block, "_qlen", q_len, "_q", ActDtypeName(q_dtype), "_out",
                  ActDtypeName(out_dtype), "_splits", num_splits,
                  value_scale == 1.0f ? std::string() : StrCat("_values", value_scale));
  }
};

struct MlaProblem {
  static constexpr int kLatent = 512;
  static constexpr int kRope = 64;
  static constexpr int kLayer = 1;

  explicit MlaProblem(const MlaCase& c)
      : spec(c),
        tables(MakeBatchTables(c.kv_lens, c.tokens_per_block, c.seed)),
        pool(Layout(c), tables.num_blocks, DefaultPoolScale(c.dtype) * c.value_scale) {
    TestRng rng(c.seed * 104729u + 7u);
    std::vector<float> x(kLatent + kRope);
    for (std::size_t i = 0; i < c.kv_lens.size(); ++i) {
      for (int t = 0; t < c.kv_lens[i]; ++t) {
        const std::int32_t block =
            tables.block_table[i * tables.max_blocks_per_seq + t / c.tokens_per_block];
        FillKvValues(rng, x.data(), kLatent + kRope);
        for (float& v : x) v *= c.value_scale;
        pool.WriteRow(block, kLayer, 0, 0, t % c.tokens_per_block, x.data());
        const std::vector<float> row =
            ReferenceDequantizedRow(pool.view, kLayer, 0, 0, block, t % c.tokens_per_block);
        for (int d = 0; d < kLatent; ++d) max_abs_v = std::max(max_abs_v, std::fabs(row[d]));
      }
    }
    q_nope = RandomActivations(c.q_dtype, Rows() * kLatent, rng);
    q_rope = RandomActivations(c.q_dtype, Rows() * kRope, rng);
  }

  static KvPoolLayout Layout(const MlaCase& c) {
    KvPoolGeometry g;
    g.dtype = c.dtype;
    g.layout = c.layout;
    g.num_layers = 2;
    g.kv_factor = 1;
    g.num_kv_heads = 1;
    g.tokens_per_block = c.tokens_per_block;
    g.head_dim = kLatent + kRope;
    return MakeKvPoolLayout(g).value();
  }

  [[nodiscard]] std::int64_t Rows() const {
    return std::int64_t(spec.kv_lens.size()) * spec.q_len * spec.num_heads;
  }

  MlaDecodeArgs Args(void* out, float* lse) const {
    MlaDecodeArgs a;
    a.pool = pool.view;
    a.layer = kLayer;
    a.num_seqs = static_cast<std::int32_t>(spec.kv_lens.size());
    a.q_len = spec.q_len;
    a.num_heads = spec.num_heads;
    a.kv_lens = tables.kv_lens.data();
    a.block_table = tables.block_table.data();
    a.max_blocks_per_seq = tables.max_blocks_per_seq;
    a.q_dtype = spec.q_dtype;
    a.q_nope = q_nope.data();
    a.q_rope = q_rope.data();
    // DeepSeek's scale is 1/sqrt(192) for the 128 + 64 qk dims before absorption.
    a.softmax_scale = 1.0f / std::sqrt(192.0f) / spec.value_scale;
    a.out_dtype = spec.out_dtype;
    a.out = out;
    a.lse = lse;
    a.num_splits = spec.num_splits;
    return a;
  }

  MlaCase spec;
  BatchTables tables;
  HostKvPool pool;
  std::vector<std::uint8_t> q_nope, q_rope;
  float max_abs_v = 0.0f;
};

// ---------------------------------------------------------------------------------------------
// The sweeps shared by the CPU tests and the GPU tests

// A representative grid: every value of every dimension appears, not the full product.
inline std::vector<DecodeCase> DecodeSweepCases() {
  const KvDtype dtypes[] = {KvDtype::kBF16,         KvDtype::kFP16, KvDtype::kFP8,
                            KvDtype::kFP8PerTensor, KvDtype::kINT8, KvDtype::kNVFP4};
  const KvLayout layouts[] = {KvLayout::kHND, KvLayout::kNHD};
  const int head_dims[] = {64, 128, 256};
  const int heads[][2] = {{4, 4}, {2, 8}, {1, 8}};  // groups 1 (MHA), 4 (GQA), 8 (MQA)
  const int tpbs[] = {16, 32, 64, 128};
  const int windows[] = {0, 0, 37};
  const ActDtype q_dtypes[] = {ActDtype::kBF16, ActDtype::kFP32, ActDtype::kFP16};
  const ActDtype out_dtypes[] = {ActDtype::kFP32, ActDtype::kBF16};
  const int splits[] = {0, 1, 5};
  std::vector<DecodeCase> cases;
  for (int di = 0; di < 6; ++di) {
    for (int li = 0; li < 2; ++li) {
      for (int v = 0; v < 3; ++v) {
        const int i = di * 6 + li * 3 + v;
        DecodeCase c;
        c.dtype = dtypes[di];
        c.layout = layouts[li];
        c.head_dim = head_dims[(v + li + di) % 3];
        c.num_kv_heads = heads[(v + di) % 3][0];
        c.num_q_heads = heads[(v + di) % 3][1];
        c.tokens_per_block = tpbs[i % 4];
        c.q_len = 1 + (i * 3) % 8;
        c.window = windows[(v + li + di / 2) % 3];
        c.q_dtype = q_dtypes[(i / 2) % 3];
        c.out_dtype = out_dtypes[(v + di) % 2];
        c.num_splits = splits[(i + 1) % 3];
        // Every other case has a long sequence (several splits); the rest stop at 400 tokens to
        // keep the float64 reference quick.
        c.kv_lens = {1, 3, 7, 17, 65, 128, i % 2 == 0 ? 1100 : 400};
        for (int& len : c.kv_lens) len = std::max(len, c.q_len);
        c.seed = 100 + i;
        cases.push_back(c);
      }
    }
  }
  // The most common decode shape — one query token, a GQA group of at most 4 (the 4-row kernels) —
  // for every head_dim and codec: the grid above misses five of those kernel instantiations
  // (review finding). attention_instances_test.cc checks that every instantiation has a case.
  const KvDtype per_codec[3][3] = {{KvDtype::kBF16, KvDtype::kFP16, KvDtype::kBF16},
                                   {KvDtype::kFP8, KvDtype::kINT8, KvDtype::kFP8PerTensor},
                                   {KvDtype::kNVFP4, KvDtype::kNVFP4, KvDtype::kNVFP4}};
  int k = 0;
  for (const int head_dim : head_dims) {
    for (int codec = 0; codec < 3; ++codec) {
      DecodeCase c;
      c.dtype = per_codec[codec][k % 3];
      c.layout = layouts[k % 2];
      c.head_dim = head_dim;
      c.num_kv_heads = k % 2 == 0 ? 2 : 4;
      c.num_q_heads = k % 2 == 0 ? 8 : 4;  // groups 4 and 1
      c.tokens_per_block = tpbs[k % 4];
      c.q_len = 1;
      c.window = k % 4 == 3 ? 37 : 0;
      c.q_dtype = q_dtypes[k % 3];
      c.out_dtype = out_dtypes[k % 2];
      c.num_splits = splits[k % 3];
      c.kv_lens = {1, 5, 33, 200};
      c.seed = 200 + k;
      cases.push_back(c);
      ++k;
    }
  }
  return cases;
}

// The MLA grid: every value of every dimension appears.
inline std::vector<MlaCase> MlaSweepCases() {
  const KvDtype dtypes[] = {KvDtype::kBF16, KvDtype::kFP8, KvDtype::kFP8PerTensor};
  const KvLayout layouts[] = {KvLayout::kHND, KvLayout::kNHD};
  const int heads[] = {1, 16, 20, 128};
  const int tpbs[] = {16, 32, 64, 128};
  const ActDtype q_dtypes[] = {ActDtype::kBF16, ActDtype::kFP32, ActDtype::kFP16};
  const ActDtype out_dtypes[] = {ActDtype::kFP32, ActDtype::kBF16};
  const int splits[] = {0, 1, 3};
  std::vector<MlaCase> cases;
  int small = 0;  // cases with fewer than 128 heads, which take every q_len
  for (int di = 0; di < 3; ++di) {
    for (int li = 0; li < 2; ++li) {
      for (int v = 0; v < 2; ++v) {
        const int i = di * 4 + li * 2 + v;
        MlaCase c;
        c.dtype = dtypes[di];
        c.layout = layouts[li];
        c.num_heads = heads[(i + di) % 4];
        c.tokens_per_block = tpbs[i % 4];
        // 128 heads × 8 query tokens is 1024 rows: keep the reference quick with fewer tokens.
        c.q_len = c.num_heads == 128 ? 1 + i % 2 : 1 + (small++ * 3) % 8;
        c.q_dtype = q_dtypes[i % 3];
        c.out_dtype = out_dtypes[(v + di) % 2];
        c.num_splits = splits[i % 3];
        // Long sequences where there are few query rows (the reference costs rows × keys).
        const int long_len = c.num_heads * c.q_len <= 16 ? 700 : 300;
        c.kv_lens = c.num_heads == 128 ? std::vector<int>{3, 65, 300}
                                       : std::vector<int>{1, 3, 7, 17, 65, long_len};
        for (int& len : c.kv_lens) len = std::max(len, c.q_len);
        c.seed = 300 + i;
        cases.push_back(c);
      }
    }
  }
  // FP8 pools whose scales leave FP16's normal range (review finding: the kernel staged
  // probability × token scale as FP16): per-token scales of ~2e-8 and ~2e-5 (amax ~1e-5, ~1e-2),
  // and of ~2e5 (amax ~1e8, above FP16's 65504); pool scales of ~4e-7 and ~4e5.
  const float value_scales[] = {1e-6f, 1e-3f, 1e7f};
  int k = 0;
  for (const KvDtype dtype : {KvDtype::kFP8, KvDtype::kFP8PerTensor}) {
    for (const float value_scale : value_scales) {
      if (dtype == KvDtype::kFP8PerTensor && value_scale == 1e-3f) continue;
      MlaCase c;
      c.dtype = dtype;
      c.layout = layouts[k % 2];
      c.num_heads = heads[1 + k % 2];
      c.tokens_per_block = tpbs[k % 4];
      c.q_len = 1 + k % 3;
      c.q_dtype = q_dtypes[k % 3];
      c.out_dtype = out_dtypes[k % 2];
      c.num_splits = splits[k % 3];
      c.kv_lens = {1, 5, 33, 150};
      for (int& len : c.kv_lens) len = std::max(len, c.q_len);
      c.seed = 400 + k;
      c.value_scale = value_scale;
      cases.push_back(c);
      ++k;
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Comparison

// Output bytes of `dtype` as floats.
inline std::vector<float> OutputValues(ActDtype dtype, const std::vector<std::uint8_t>& bytes) {
  const std::size_t n = bytes.size() / ActDtypeBytes(dtype);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(ReferenceActValue(dtype, bytes.data(), i));
  return v;
}

struct AttentionErrors {
  double max_out_error = 0.0;  // max |out - ref| / max |V|
  double max_lse_error = 0.0;  // max |lse - ref| / max(1, |ref|)
  bool finite = true;
};

inline AttentionErrors CompareAttention(const std::vector<float>& out,
                                        const std::vector<float>& lse,
                                        const std::vector<double>& ref_out,
                                        const std::vector<double>& ref_lse, double max_abs_v) {
  AttentionErrors e;
  const double v_scale = std::max(max_abs_v, 1e-30);
  for (std::size_t i = 0; i < ref_out.size(); ++i) {
    if (!std::isfinite(out[i])) e.finite = false;
    e.max_out_error = std::max(e.max_out_error, std::fabs(out[i] - ref_out[i]) / v_scale);
  }
  for (std::size_t i = 0; i < ref_lse.size() && i < lse.size(); ++i) {
    if (!std::isfinite(lse[i])) e.finite = false;
    e.max_lse_error = std::max(
        e.max_lse_error, std::fabs(lse[i] - ref_lse[i]) / std::max(1.0, std::fabs(ref_lse[i])));
  }
  return e;
}

}  // namespace kvmesh::testing
