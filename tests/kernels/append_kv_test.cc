// cpu::AppendKv and cpu::AppendIndexK against the head quantisers applied independently to each
// (token, head) row: the expected pool is the initial random pool with, for every appended row, the
// bytes of QuantizeHead*(row) (indexer: QuantizeIndexBlock*) placed with PagedTensorLayout offsets.
// Comparing whole pools checks the written bytes bit for bit and that no other byte changed.
//
// Sweeps every cache dtype × both layouts × every activation dtype × dense and padded inputs, with
// sequences of 1, 3, 7, 17 and 65 tokens (and an empty one) that start and end mid-block; the MLA
// latent (576 wide) in every dtype; the indexer in FP8 and FP4 with quant block 128; the bad-input
// paths (nothing written); and a dequantisation round trip with per-dtype tolerances.
#include "kernels/append_kv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/index_k_quantize.h"
#include "kernels/quantize.h"
#include "tests/kernels/append_kv_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvmesh {
namespace {

using testing::AppendBatch;
using testing::AppendInputs;
using testing::EncodeActivations;
using testing::ExpectSamePool;
using testing::HostPool;
using testing::MakeAppendBatch;
using testing::MakeArgs;
using testing::MakeInputs;
using testing::MakeInputValues;

const std::vector<int> kTokens = {1, 3, 0, 7, 17, 65};
const std::vector<int> kStarts = {0, 5, 4, 16, 9, 30};  // mid-block starts; 30 + 65 ends mid-block

// Quantises one row with the head quantiser of the pool's dtype and places its bytes.
template <typename In>
void PlaceRow(const KvPoolView& pool, const In* x, std::int64_t block, int layer, int kv, int h,
              int slot) {
  const PagedTensorLayout& d = pool.layout.data();
  const PagedTensorLayout& s = pool.layout.scale();
  const int n = d.inner;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(d.RowBytes()));
  std::vector<std::uint8_t> block_scales(static_cast<std::size_t>(n / 16 + 1));
  float scale = 0.0f;
  bool has_scale = false;
  switch (pool.layout.dtype) {
    case KvDtype::kBF16:
      QuantizeHeadBf16(x, n, reinterpret_cast<std::uint16_t*>(codes.data()));
      break;
    case KvDtype::kFP16:
      QuantizeHeadFp16(x, n, reinterpret_cast<std::uint16_t*>(codes.data()));
      break;
    case KvDtype::kFP8PerTensor:
      QuantizeHeadFp8PerTensor(x, n, pool.pool_scale, codes.data());
      break;
    case KvDtype::kFP8:
      scale = QuantizeHeadFp8(x, n, codes.data());
      has_scale = true;
      break;
    case KvDtype::kINT8:
      scale = QuantizeHeadInt8(x, n, reinterpret_cast<std::int8_t*>(codes.data()));
      has_scale = true;
      break;
    case KvDtype::kNVFP4:
      QuantizeHeadNvfp4(x, n, pool.pool_scale, codes.data(), block_scales.data());
      break;
  }
  auto* data = static_cast<std::uint8_t*>(pool.base[0]);
  std::memcpy(data + d.ByteOffset(block, layer, kv, h, slot, 0), codes.data(), codes.size());
  auto* scales = static_cast<std::uint8_t*>(pool.base[1]);
  if (has_scale) {
    std::memcpy(scales + s.ElementOffset(block, layer, kv, h, slot, 0) * 4, &scale, 4);
  }
  if (pool.layout.dtype == KvDtype::kNVFP4) {
    std::memcpy(scales + s.ByteOffset(block, layer, kv, h, slot, 0), block_scales.data(), n / 16);
  }
}

// The expected pool after args: every row placed by PlaceRow.
template <typename In>
void PlaceAllRows(const AppendKvArgs& a, const AppendBatch& b) {
  const PagedTensorLayout& d = a.pool.layout.data();
  const int tpb = d.tokens_per_block;
  const std::int64_t stride =
      a.token_stride == 0 ? std::int64_t{d.num_heads} * d.inner : a.token_stride;
  const void* inputs[2] = {a.k, a.v};
  for (int i = 0; i < b.num_seqs(); ++i) {
    for (int j = 0; j < b.cu_tokens[i + 1] - b.cu_tokens[i]; ++j) {
      const int t = b.cu_tokens[i] + j;
      const int pos = b.start_pos[i] + j;
      const std::int64_t block = b.block_table[i * b.max_blocks_per_seq + pos / tpb];
      for (int kv = 0; kv < d.kv_factor; ++kv) {
        for (int h = 0; h < d.num_heads; ++h) {
          const In* x = static_cast<const In*>(inputs[kv]) + t * stride + h * d.inner;
          PlaceRow(a.pool, x, block, a.layer, kv, h, pos % tpb);
        }
      }
    }
  }
}

void PlaceExpected(const AppendKvArgs& a, const AppendBatch& b) {
  switch (a.act_dtype) {
    case ActDtype::kFP32: PlaceAllRows<float>(a, b); break;
    case ActDtype::kBF16: PlaceAllRows<Bf16>(a, b); break;
    case ActDtype::kFP16: PlaceAllRows<Fp16>(a, b); break;
  }
}

float PoolScaleFor(KvDtype dtype) {
  // nvfp4: a global scale with amax 8 → 448*6/8; fp8 per tensor: inputs up to ~2^12·4 fit.
  return dtype == KvDtype::kNVFP4 ? 336.0f : dtype == KvDtype::kFP8PerTensor ? 0.75f : 1.0f;
}

struct SweepParam {
  KvDtype dtype;
  KvLayout layout;
  ActDtype act;
  bool padded;
};

std::string SweepName(const ::testing::TestParamInfo<SweepParam>& info) {
  const SweepParam& p = info.param;
  return std::string(KvDtypeName(p.dtype)) + "_" + std::string(KvLayoutName(p.layout)) + "_" +
         std::string(ActDtypeName(p.act)) + (p.padded ? "_padded" : "_dense");
}

std::vector<SweepParam> AllSweepParams() {
  std::vector<SweepParam> out;
  for (int d = 0; d < kNumKvDtypes; ++d)
    for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD})
      for (ActDtype a : {ActDtype::kFP32, ActDtype::kBF16, ActDtype::kFP16})
        for (bool padded : {false, true}) out.push_back({static_cast<KvDtype>(d), l, a, padded});
  return out;
}

class AppendKvSweep : public ::testing::TestWithParam<SweepParam> {};

void RunAndCompare(const KvPoolGeometry& g, const SweepParam& p, int layer, ThreadPool* executor,
                   std::uint32_t seed) {
  const KvPoolLayout layout = MakeKvPoolLayout(g).value();
  const int tpb = g.tokens_per_block;
  // kTokens/kStarts cover 13 blocks of 16 tokens and 41 of 4; a few blocks stay unwritten.
  const std::int64_t num_blocks = tpb >= 16 ? 16 : 44;
  const AppendBatch b = MakeAppendBatch(kTokens, kStarts, tpb, num_blocks, seed);
  ASSERT_LE(b.blocks_needed, num_blocks);
  HostPool pool(layout, num_blocks, PoolScaleFor(g.dtype), seed + 1);
  HostPool expected(pool);
  const AppendInputs in = MakeInputs(layout.data(), b, p.act, p.padded, seed + 2);

  ASSERT_TRUE(cpu::AppendKv(MakeArgs(pool.view, b, in, p.act, layer, p.padded), executor).ok());
  PlaceExpected(MakeArgs(expected.view, b, in, p.act, layer, p.padded), b);
  ExpectSamePool(pool, expected);
}

TEST_P(AppendKvSweep, BytesEqualHeadQuantisersPerRow) {
  const SweepParam& p = GetParam();
  KvPoolGeometry g;
  g.dtype = p.dtype;
  g.layout = p.layout;
  g.num_layers = 2;
  g.kv_factor = 2;
  g.num_kv_heads = 3;
  g.tokens_per_block = 16;
  g.head_dim = 32;
  ThreadPool executor(3);
  RunAndCompare(g, p, /*layer=*/1, &executor, 100 + static_cast<int>(p.dtype));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, AppendKvSweep, ::testing::ValuesIn(AllSweepParams()),
                         SweepName);

// The MLA latent: every dtype and layout, with two of the input variants (the sweep above covers
// the rest of the input handling, which does not depend on the pool shape).
class AppendKvMla : public ::testing::TestWithParam<SweepParam> {};

std::vector<SweepParam> MlaParams() {
  std::vector<SweepParam> out;
  for (int d = 0; d < kNumKvDtypes; ++d) {
    for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
      out.push_back({static_cast<KvDtype>(d), l, ActDtype::kBF16, false});
      out.push_back({static_cast<KvDtype>(d), l, ActDtype::kFP32, true});
    }
  }
  return out;
}

TEST_P(AppendKvMla, Latent576) {
  const SweepParam& p = GetParam();
  KvPoolGeometry g;
  g.dtype = p.dtype;
  g.layout = p.layout;
  g.num_layers = 2;
  g.kv_factor = 1;
  g.num_kv_heads = 1;
  g.tokens_per_block = 32;
  g.head_dim = 576;
  RunAndCompare(g, p, /*layer=*/1, /*executor=*/nullptr, 200 + static_cast<int>(p.dtype));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, AppendKvMla, ::testing::ValuesIn(MlaParams()), SweepName);

// head_dim that is not a multiple of 16 (every dtype but nvfp4), one layer.
TEST(AppendKv, OddHeadDim) {
  for (KvDtype dtype :
       {KvDtype::kBF16, KvDtype::kFP16, KvDtype::kFP8, KvDtype::kFP8PerTensor, KvDtype::kINT8}) {
    for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
      SCOPED_TRACE(std::string(KvDtypeName(dtype)) + " " + std::string(KvLayoutName(l)));
      KvPoolGeometry g;
      g.dtype = dtype;
      g.layout = l;
      g.num_layers = 1;
      g.num_kv_heads = 2;
      g.tokens_per_block = 4;
      g.head_dim = 7;
      RunAndCompare(g, {dtype, l, ActDtype::kBF16, true}, 0, nullptr, 7);
    }
  }
}

TEST(AppendKv, SameBytesWithAndWithoutExecutor) {
  KvPoolGeometry g;
  g.dtype = KvDtype::kNVFP4;
  g.num_layers = 1;
  g.num_kv_heads = 8;
  g.tokens_per_block = 16;
  g.head_dim = 128;
  const KvPoolLayout layout = MakeKvPoolLayout(g).value();
  const AppendBatch b = MakeAppendBatch({300, 1, 257}, {3, 0, 31}, 16, 64, 5);
  HostPool serial(layout, 64, 100.0f, 6);
  HostPool parallel(serial);
  const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 8);
  ThreadPool executor(4);
  ASSERT_TRUE(cpu::AppendKv(MakeArgs(serial.view, b, in, ActDtype::kBF16, 0, false), nullptr).ok());
  ASSERT_TRUE(
      cpu::AppendKv(MakeArgs(parallel.view, b, in, ActDtype::kBF16, 0, false), &executor).ok());
  ExpectSamePool(parallel, serial);
}

// Reads element (kv, h) of a token back through the layout and dequantises it.
std::vector<float> ReadBackRow(const KvPoolView& pool, std::int64_t block, int layer, int kv, int h,
                               int slot) {
  const PagedTensorLayout& d = pool.layout.data();
  const PagedTensorLayout& s = pool.layout.scale();
  const int n = d.inner;
  const auto* data =
      static_cast<const std::uint8_t*>(pool.base[0]) + d.ByteOffset(block, layer, kv, h, slot, 0);
  std::vector<float> out(n);
  float scale = pool.pool_scale;
  if (ScaleKindOf(pool.layout.dtype) == KvScaleKind::kPerTokenHead) {
    std::memcpy(&scale,
                static_cast<const std::uint8_t*>(pool.base[1]) +
                    s.ElementOffset(block, layer, kv, h, slot, 0) * 4,
                4);
  }
  switch (pool.layout.dtype) {
    case KvDtype::kBF16:
      DequantizeHeadBf16(reinterpret_cast<const std::uint16_t*>(data), n, out.data());
      break;
    case KvDtype::kFP16:
      DequantizeHeadFp16(reinterpret_cast<const std::uint16_t*>(data), n, out.data());
      break;
    case KvDtype::kFP8:
    case KvDtype::kFP8PerTensor: DequantizeHeadFp8(data, n, scale, out.data()); break;
    case KvDtype::kINT8:
      DequantizeHeadInt8(reinterpret_cast<const std::int8_t*>(data), n, scale, out.data());
      break;
    case KvDtype::kNVFP4:
      DequantizeHeadNvfp4(data,
                          static_cast<const std::uint8_t*>(pool.base[1]) +
                              s.ByteOffset(block, layer, kv, h, slot, 0),
                          n, pool.pool_scale, out.data());
      break;
  }
  return out;
}

// A round trip through the pool: error relative to the row's amax within the format's step.
// Tolerances (fraction of the row amax; per-16 amax for nvfp4): bf16 2^-8, fp16 2^-10 (values here
// are normal), fp8 2^-4 relative to the element + 2^-9·amax for subnormal codes, int8 0.5/127,
// nvfp4 1/6 of the block amax + SF rounding (2^-3) — i.e. 0.25 of the block amax.
TEST(AppendKv, RoundTripWithinFormatTolerance) {
  for (int di = 0; di < kNumKvDtypes; ++di) {
    const auto dtype = static_cast<KvDtype>(di);
    SCOPED_TRACE(std::string(KvDtypeName(dtype)));
    KvPoolGeometry g;
    g.dtype = dtype;
    g.layout = KvLayout::kNHD;
    g.num_layers = 1;
    g.num_kv_heads = 2;
    g.tokens_per_block = 8;
    g.head_dim = 64;
    const KvPoolLayout layout = MakeKvPoolLayout(g).value();
    const AppendBatch b = MakeAppendBatch({13}, {2}, 8, 4, 1);
    HostPool pool(layout, 4, dtype == KvDtype::kNVFP4 ? 448.0f * 6 / 8 : 1.0f / 32, 2);
    AppendInputs in;
    in.stride = 128;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int kv = 0; kv < 2; ++kv) {
      in.values[kv].resize(13 * 128);
      for (float& x : in.values[kv]) x = normal(rng);
      in.encoded[kv] = EncodeActivations(in.values[kv], 13, 128, 128, ActDtype::kFP32);
    }
    ASSERT_TRUE(cpu::AppendKv(MakeArgs(pool.view, b, in, ActDtype::kFP32, 0, false), nullptr).ok());
    for (int j = 0; j < 13; ++j) {
      const int pos = 2 + j;
      const std::int64_t block = b.block_table[pos / 8];
      for (int kv = 0; kv < 2; ++kv) {
        for (int h = 0; h < 2; ++h) {
          const std::vector<float> got = ReadBackRow(pool.view, block, 0, kv, h, pos % 8);
          const float* x = in.values[kv].data() + j * 128 + h * 64;
          for (int i = 0; i < 64; ++i) {
            const int first = i / 16 * 16;
            float amax = 0.0f;
            for (int k = (dtype == KvDtype::kNVFP4 ? first : 0);
                 k < (dtype == KvDtype::kNVFP4 ? first + 16 : 64); ++k) {
              amax = std::max(amax, std::fabs(x[k]));
            }
            double tol = 0.0;
            switch (dtype) {
              case KvDtype::kBF16: tol = std::fabs(x[i]) * 0x1p-8; break;
              case KvDtype::kFP16: tol = std::fabs(x[i]) * 0x1p-11 + 0x1p-24; break;
              case KvDtype::kFP8:
              case KvDtype::kFP8PerTensor: tol = std::fabs(x[i]) * 0x1p-4 + amax * 0x1p-9; break;
              case KvDtype::kINT8: tol = amax * 0.5 / 127 * 1.0001; break;
              case KvDtype::kNVFP4: tol = amax * 0.25; break;
            }
            EXPECT_LE(std::fabs(got[i] - x[i]), tol) << "kv " << kv << " h " << h << " i " << i;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Indexer K.

TEST(AppendIndexK, Fp8AndFp4QuantBlock128) {
  for (bool fp4 : {false, true}) {
    for (int index_dim : {128, 256}) {
      for (ActDtype act : {ActDtype::kFP32, ActDtype::kBF16}) {
        SCOPED_TRACE(std::string(fp4 ? "fp4 " : "fp8 ") + std::to_string(index_dim));
        KvPoolGeometry g;
        g.dtype = KvDtype::kBF16;
        g.num_layers = 2;
        g.kv_factor = 1;
        g.num_kv_heads = 1;
        g.tokens_per_block = 16;
        g.head_dim = 576;
        g.index_layers = 2;
        g.index_head_dim = index_dim;
        g.index_quant_block = 128;
        g.index_fp4 = fp4;
        const KvPoolLayout layout = MakeKvPoolLayout(g).value();
        const AppendBatch b = MakeAppendBatch(kTokens, kStarts, 16, 16, 9);
        HostPool pool(layout, 16, 1.0f, 10);
        HostPool expected(pool);
        const std::int64_t stride = index_dim + 4;
        const std::vector<float> values = MakeInputValues(b.total_tokens(), index_dim, 11);
        const std::vector<std::uint8_t> encoded =
            EncodeActivations(values, b.total_tokens(), index_dim, stride, act);

        AppendIndexKArgs a;
        a.pool = pool.view;
        a.index_layer = 1;
        a.num_seqs = b.num_seqs();
        a.cu_tokens = b.cu_tokens.data();
        a.start_pos = b.start_pos.data();
        a.block_table = b.block_table.data();
        a.max_blocks_per_seq = b.max_blocks_per_seq;
        a.act_dtype = act;
        a.index_k = encoded.data();
        a.token_stride = stride;
        ThreadPool executor(2);
        ASSERT_TRUE(cpu::AppendIndexK(a, &executor).ok());

        // Expected: each quant block of each token through QuantizeIndexBlock*, placed by offsets.
        const PagedTensorLayout& ik = layout.index_k();
        const PagedTensorLayout& is = layout.index_scale();
        std::vector<float> widened(index_dim);
        for (int i = 0; i < b.num_seqs(); ++i) {
          for (int j = 0; j < b.cu_tokens[i + 1] - b.cu_tokens[i]; ++j) {
            const int t = b.cu_tokens[i] + j;
            const int pos = b.start_pos[i] + j;
            const std::int64_t block = b.block_table[i * b.max_blocks_per_seq + pos / 16];
            for (int q = 0; q < index_dim / 128; ++q) {
              // The encoded activation widened back: exact for fp32 and bf16 inputs.
              for (int e = 0; e < 128; ++e) {
                std::uint8_t* src = const_cast<std::uint8_t*>(encoded.data()) +
                                    (t * stride + q * 128 + e) * ActDtypeBytes(act);
                if (act == ActDtype::kFP32) {
                  std::memcpy(&widened[e], src, 4);
                } else {
                  std::uint16_t bits;
                  std::memcpy(&bits, src, 2);
                  widened[e] = Bf16ToFloat(bits);
                }
              }
              std::uint8_t codes[128];
              const float scale = fp4 ? QuantizeIndexBlockFp4(widened.data(), 128, codes)
                                      : QuantizeIndexBlockFp8(widened.data(), 128, codes);
              std::memcpy(
                  expected.storage[2].data() + ik.ByteOffset(block, 1, 0, 0, pos % 16, q * 128),
                  codes, fp4 ? 64 : 128);
              std::memcpy(
                  expected.storage[3].data() + is.ElementOffset(block, 1, 0, 0, pos % 16, q) * 4,
                  &scale, 4);
            }
          }
        }
        ExpectSamePool(pool, expected);
      }
    }
  }
}

TEST(AppendIndexK, Fp4RoundTrip) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(128);
  for (float& v : x) v = normal(rng);
  std::uint8_t packed[64];
  const float scale = QuantizeIndexBlockFp4(x.data(), 128, packed);
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_EQ(scale, amax / 6.0f);
  std::vector<float> back(128);
  DequantizeIndexBlockFp4(packed, 128, scale, back.data());
  for (int i = 0; i < 128; ++i) EXPECT_LE(std::fabs(back[i] - x[i]), scale * 1.0f) << i;
}

// ---------------------------------------------------------------------------------------------
// Bad input: the error names the problem and not one byte of the pool changes.

struct BadInputFixture {
  BadInputFixture()
      : layout(MakeLayout()),
        batch(MakeAppendBatch({5, 9}, {3, 14}, 8, 16, 1)),
        pool(layout, 16, 1.0f, 2),
        before(pool),
        inputs(MakeInputs(layout.data(), batch, ActDtype::kBF16, false, 3)) {}

  static KvPoolLayout MakeLayout() {
    KvPoolGeometry g;
    g.dtype = KvDtype::kFP8;
    g.num_layers = 2;
    g.num_kv_heads = 2;
    g.tokens_per_block = 8;
    g.head_dim = 16;
    return MakeKvPoolLayout(g).value();
  }
  AppendKvArgs Args() { return MakeArgs(pool.view, batch, inputs, ActDtype::kBF16, 1, false); }
  void ExpectUntouched() { ExpectSamePool(pool, before); }

  KvPoolLayout layout;
  AppendBatch batch;
  HostPool pool;
  HostPool before;
  AppendInputs inputs;
};

void ExpectInvalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s;
}

TEST(AppendKvBadInput, BlockIdOutOfRangeWritesNothing) {
  for (std::int32_t bad : {16, -1, 1 << 30}) {
    BadInputFixture f;
    // Sequence 1 covers positions [14, 23): blocks 1 and 2; spoil the last one it writes.
    f.batch.block_table[1 * f.batch.max_blocks_per_seq + 2] = bad;
    ExpectInvalid(cpu::AppendKv(f.Args(), nullptr), "block_table[1][2]");
    f.ExpectUntouched();
  }
}

TEST(AppendKvBadInput, EntriesPastTheLastPositionAreNotRead) {
  BadInputFixture f;
  // Entries the batch does not touch are -1 already (MakeAppendBatch); the append succeeds.
  ASSERT_EQ(f.batch.block_table[0 * f.batch.max_blocks_per_seq + 2], -1);
  EXPECT_TRUE(cpu::AppendKv(f.Args(), nullptr).ok());
}

TEST(AppendKvBadInput, PositionsAndCountsChecked) {
  {
    BadInputFixture f;
    f.batch.start_pos[1] = f.batch.max_blocks_per_seq * 8 - 3;  // 9 tokens do not fit
    ExpectInvalid(cpu::AppendKv(f.Args(), nullptr), "beyond max_blocks_per_seq");
    f.ExpectUntouched();
  }
  {
    BadInputFixture f;
    f.batch.start_pos[0] = -1;
    ExpectInvalid(cpu::AppendKv(f.Args(), nullptr), "start_pos[0]");
    f.ExpectUntouched();
  }
  {
    BadInputFixture f;
    f.batch.cu_tokens[2] = 3;  // below cu_tokens[1] = 5
    ExpectInvalid(cpu::AppendKv(f.Args(), nullptr), "cu_tokens decreases");
    f.ExpectUntouched();
  }
  {
    BadInputFixture f;
    AppendKvArgs a = f.Args();
    a.total_tokens = 13;
    ExpectInvalid(cpu::AppendKv(a, nullptr), "total_tokens");
    f.ExpectUntouched();
  }
}

TEST(AppendKvBadInput, ArgumentChecks) {
  BadInputFixture f;
  auto expect = [&](AppendKvArgs a, const std::string& needle) {
    ExpectInvalid(CanImplementAppendKv(a), needle);
    ExpectInvalid(cpu::AppendKv(a, nullptr), needle);
    f.ExpectUntouched();
  };
  AppendKvArgs a = f.Args();
  a.layer = 2;
  expect(a, "layer 2");
  a = f.Args();
  a.v = nullptr;
  expect(a, "input v");
  a = f.Args();
  a.token_stride = 31;
  expect(a, "token_stride 31");
  a = f.Args();
  a.pool.base[1] = nullptr;
  expect(a, "scale");
  a = f.Args();
  a.block_table = nullptr;
  expect(a, "block_table");
  a = f.Args();
  a.k = static_cast<const std::uint8_t*>(a.k) + 1;
  expect(a, "aligned");
  a = f.Args();
  a.act_dtype = static_cast<ActDtype>(7);
  expect(a, "act_dtype");
  a = f.Args();
  a.max_blocks_per_seq = 0;
  expect(a, "max_blocks_per_seq");
}

TEST(AppendKvBadInput, PoolScaleAndMlaChecks) {
  KvPoolGeometry g;
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.kv_factor = 1;
  g.tokens_per_block = 8;
  g.head_dim = 576;
  for (KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kFP8PerTensor}) {
    g.dtype = dtype;
    HostPool pool(MakeKvPoolLayout(g).value(), 2, 0.0f, 1);
    AppendKvArgs a;
    a.pool = pool.view;
    for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
      a.pool.pool_scale = bad;
      ExpectInvalid(CanImplementAppendKv(a), "pool_scale");
    }
  }
  g.dtype = KvDtype::kBF16;
  HostPool pool(MakeKvPoolLayout(g).value(), 2, 1.0f, 1);
  const std::vector<std::uint8_t> input(576 * 2);
  const std::vector<std::int32_t> cu = {0, 1}, start = {0}, table = {0};
  AppendKvArgs a;
  a.pool = pool.view;
  a.num_seqs = 1;
  a.cu_tokens = cu.data();
  a.start_pos = start.data();
  a.block_table = table.data();
  a.max_blocks_per_seq = 1;
  a.k = input.data();
  a.v = input.data();
  ExpectInvalid(CanImplementAppendKv(a), "kv_factor 1");
  a.v = nullptr;
  EXPECT_TRUE(cpu::AppendKv(a, nullptr).ok());
}

TEST(AppendKvBadInput, EmptyBatchWritesNothing) {
  BadInputFixture f;
  AppendKvArgs a = f.Args();
  a.num_seqs = 0;
  a.cu_tokens = a.start_pos = a.block_table = nullptr;
  a.k = a.v = nullptr;
  EXPECT_TRUE(cpu::AppendKv(a, nullptr).ok());
  f.ExpectUntouched();
}

TEST(AppendIndexKBadInput, Checks) {
  BadInputFixture f;  // a pool without an indexer
  AppendIndexKArgs a;
  a.pool = f.pool.view;
  ExpectInvalid(CanImplementAppendIndexK(a), "no indexer");

  KvPoolGeometry g;
  g.num_layers = 2;
  g.kv_factor = 1;
  g.num_kv_heads = 1;
  g.tokens_per_block = 8;
  g.head_dim = 64;
  g.index_layers = 1;
  g.index_head_dim = 128;
  HostPool pool(MakeKvPoolLayout(g).value(), 4, 1.0f, 5);
  HostPool before(pool);
  const std::vector<std::uint8_t> input(3 * 128 * 4);
  const std::vector<std::int32_t> cu = {0, 3}, start = {6}, table = {1, 4};
  a.pool = pool.view;
  a.num_seqs = 1;
  a.cu_tokens = cu.data();
  a.start_pos = start.data();
  a.block_table = table.data();
  a.max_blocks_per_seq = 2;
  a.act_dtype = ActDtype::kFP32;
  a.index_k = input.data();
  a.index_layer = 1;
  ExpectInvalid(CanImplementAppendIndexK(a), "index_layer 1");
  a.index_layer = 0;
  ExpectInvalid(cpu::AppendIndexK(a, nullptr), "block_table[0][1] = 4");
  ExpectSamePool(pool, before);
}

}  // namespace
}  // namespace kvmesh
