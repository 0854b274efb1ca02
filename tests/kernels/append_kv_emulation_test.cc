// The CUDA append kernel's device code (kernels/cuda/append_kv.cuh), run on the CPU through the
// host shims of cuda_emulation.h, against cpu::AppendKv byte for byte over whole pools. Smaller
// versions of the GPU test's cases (append_kv_gpu_test.cu; the emulation is slow under sanitizers):
// every dtype × layout × input dtype, dense and padded; head dims from 7 to 576 (one lane per row,
// up to a warp looping over chunks); vector and element-wise paths; the indexer; rows with bad
// block ids. Runs on every machine (label cpu): on machines without a GPU it is the only execution
// the kernel's logic gets.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/kernels/cuda_emulation.h"
// The device code, compiled as C++ against the shims above.
#include "kernels/cuda/append_kv.cuh"
#include "tests/kernels/append_kv_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvmesh {
namespace {

using testing::AppendBatch;
using testing::AppendInputs;
using testing::CaseName;
using testing::EmulateGrid;
using testing::ExpectSamePool;
using testing::HostPool;
using testing::MakeAppendBatch;
using testing::MakeArgs;
using testing::MakeInputs;
using testing::SmallGeometry;

Status EmulateRows(const cuda::AppendParams& p, ActDtype act, unsigned int grid) {
  switch (act) {
    case ActDtype::kFP32:
      return EmulateGrid(&cuda::AppendRowsKernel<float>, p, grid, 1, cuda::kThreads, true);
    case ActDtype::kBF16:
      return EmulateGrid(&cuda::AppendRowsKernel<Bf16>, p, grid, 1, cuda::kThreads, true);
    case ActDtype::kFP16:
      return EmulateGrid(&cuda::AppendRowsKernel<Fp16>, p, grid, 1, cuda::kThreads, true);
  }
  return Status::InvalidArgument("unknown act dtype");
}

struct Case {
  KvPoolGeometry g;
  ActDtype act = ActDtype::kBF16;
  bool padded = false;
  int layer = 0;
  std::vector<int> tokens = {1, 3, 0, 7, 17, 65};
  std::vector<int> starts = {0, 5, 4, 16, 9, 30};
  int shift = 0;  // bytes the kernel's input is moved by (misalignment)
  unsigned int grid = 1;
};

std::int64_t BlocksFor(const Case& c) {
  std::int64_t n = 0;
  const int tpb = c.g.tokens_per_block;
  for (std::size_t i = 0; i < c.tokens.size(); ++i)
    n += (c.starts[i] + c.tokens[i] + tpb - 1) / tpb;
  return n + 3;
}

void RunCase(const Case& c) {
  const KvPoolLayout layout = MakeKvPoolLayout(c.g).value();
  const std::int64_t num_blocks = BlocksFor(c);
  const AppendBatch b = MakeAppendBatch(c.tokens, c.starts, c.g.tokens_per_block, num_blocks, 3);
  const float pool_scale = c.g.dtype == KvDtype::kNVFP4 ? 336.0f : 0.75f;
  HostPool expected(layout, num_blocks, pool_scale, 4);
  HostPool emulated(expected);
  const AppendInputs in = MakeInputs(layout.data(), b, c.act, c.padded, 5);
  ASSERT_TRUE(
      cpu::AppendKv(MakeArgs(expected.view, b, in, c.act, c.layer, c.padded), nullptr).ok());

  // The kernel's inputs, moved by `shift` bytes inside 16-byte aligned storage.
  std::vector<std::uint64_t> storage[2];
  AppendKvArgs a = MakeArgs(emulated.view, b, in, c.act, c.layer, c.padded);
  const void** inputs[2] = {&a.k, &a.v};
  for (int kv = 0; kv < layout.data().kv_factor; ++kv) {
    storage[kv].resize(in.encoded[kv].size() / 8 + 4);
    auto* dst = reinterpret_cast<std::uint8_t*>(storage[kv].data()) + c.shift;
    std::memcpy(dst, in.encoded[kv].data(), in.encoded[kv].size());
    *inputs[kv] = dst;
  }
  ASSERT_TRUE(CanImplementAppendKv(a).ok());
  KVMESH_ASSERT_OK(EmulateRows(cuda::MakeAppendKvParams(a), c.act, c.grid));
  ExpectSamePool(emulated, expected);
}

TEST(AppendKvEmulation, EveryFormatLayoutAndInput) {
  for (int di = 0; di < kNumKvDtypes; ++di) {
    for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
      for (ActDtype a : {ActDtype::kFP32, ActDtype::kBF16, ActDtype::kFP16}) {
        for (bool padded : {false, true}) {
          if (padded && a != ActDtype::kFP16) continue;  // one padded input type is enough here
          const auto d = static_cast<KvDtype>(di);
          SCOPED_TRACE(CaseName(d, l, a) + (padded ? " padded" : " dense"));
          Case c;
          c.g = SmallGeometry(d, l, 3, 16, 32);
          c.act = a;
          c.padded = padded;
          c.layer = 1;
          RunCase(c);
        }
      }
    }
  }
}

TEST(AppendKvEmulation, HeadDims64To256VectorPathAndTwoBlocks) {
  for (int head_dim : {64, 256}) {  // 128: the misaligned and indexer cases below
    for (int di = 0; di < kNumKvDtypes; ++di) {
      for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
        const auto d = static_cast<KvDtype>(di);
        SCOPED_TRACE(CaseName(d, l, ActDtype::kBF16) + " head_dim " + std::to_string(head_dim));
        Case c;
        c.g = SmallGeometry(d, l, 4, 16, head_dim);
        c.tokens = {3, 20};  // small: the emulation is slow under sanitizers; the GPU test has more
        c.starts = {15, 30};
        c.grid = 2;
        RunCase(c);
      }
    }
  }
}

TEST(AppendKvEmulation, MlaLatent576) {
  for (int di = 0; di < kNumKvDtypes; ++di) {
    for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
      const auto d = static_cast<KvDtype>(di);
      SCOPED_TRACE(CaseName(d, l, ActDtype::kFP32));
      Case c;
      c.g = SmallGeometry(d, l, 1, 16, 576);
      c.g.kv_factor = 1;
      c.act = ActDtype::kFP32;
      RunCase(c);
    }
  }
}

TEST(AppendKvEmulation, OddSizesAndMisalignedInputs) {
  for (int head_dim : {7, 24, 40}) {
    for (KvDtype d :
         {KvDtype::kBF16, KvDtype::kFP16, KvDtype::kFP8, KvDtype::kFP8PerTensor, KvDtype::kINT8}) {
      SCOPED_TRACE(CaseName(d, KvLayout::kNHD, ActDtype::kFP16) + " head_dim " +
                   std::to_string(head_dim));
      Case c;
      c.g = SmallGeometry(d, KvLayout::kNHD, 2, 4, head_dim);
      c.act = ActDtype::kFP16;
      RunCase(c);
    }
  }
  for (int di = 0; di < kNumKvDtypes; ++di) {
    for (int shift : {2, 8}) {
      const auto d = static_cast<KvDtype>(di);
      SCOPED_TRACE(CaseName(d, KvLayout::kHND, ActDtype::kBF16) + " shift " +
                   std::to_string(shift));
      Case c;
      c.g = SmallGeometry(d, KvLayout::kHND, 2, 16, 128);
      c.shift = shift;
      RunCase(c);
    }
  }
}

TEST(AppendKvEmulation, VectorPathIsChosenOnlyWhenAligned) {
  const KvPoolLayout layout =
      MakeKvPoolLayout(SmallGeometry(KvDtype::kFP8, KvLayout::kHND, 8, 16, 128)).value();
  alignas(16) static std::uint8_t buffer[64];
  AppendKvArgs a;
  a.pool.layout = layout;
  a.pool.base[0] = buffer;
  a.pool.base[1] = buffer;
  a.act_dtype = ActDtype::kBF16;
  a.k = buffer;
  a.v = buffer;
  cuda::AppendParams p = cuda::MakeAppendKvParams(a);
  EXPECT_TRUE(p.vec);
  EXPECT_EQ(p.group, 8);
  EXPECT_EQ(p.chunks, 8);
  a.v = buffer + 2;
  EXPECT_FALSE(cuda::MakeAppendKvParams(a).vec);
  a.v = buffer;
  a.token_stride = 8 * 128 + 4;
  EXPECT_FALSE(cuda::MakeAppendKvParams(a).vec);
}

TEST(AppendKvEmulation, IndexerFp8AndFp4) {
  for (bool fp4 : {false, true}) {
    for (int quant_block : {64, 128}) {
      SCOPED_TRACE(std::string(fp4 ? "fp4" : "fp8") + " quant block " +
                   std::to_string(quant_block));
      KvPoolGeometry g = SmallGeometry(KvDtype::kFP8, KvLayout::kHND, 1, 16, 576);
      g.kv_factor = 1;
      g.index_layers = 2;
      g.index_head_dim = 256;
      g.index_quant_block = quant_block;
      g.index_fp4 = fp4;
      const KvPoolLayout layout = MakeKvPoolLayout(g).value();
      const AppendBatch b = MakeAppendBatch({1, 3, 7, 17, 65}, {0, 5, 16, 9, 30}, 16, 20, 6);
      HostPool expected(layout, 20, 1.0f, 7);
      HostPool emulated(expected);
      const std::int64_t stride = 256 + 8;
      const std::vector<std::uint8_t> encoded =
          testing::EncodeActivations(testing::MakeInputValues(b.total_tokens() * 2, 128, 8),
                                     b.total_tokens(), 256, stride, ActDtype::kBF16);
      AppendIndexKArgs a;
      a.pool = expected.view;
      a.index_layer = 1;
      a.num_seqs = b.num_seqs();
      a.cu_tokens = b.cu_tokens.data();
      a.start_pos = b.start_pos.data();
      a.block_table = b.block_table.data();
      a.max_blocks_per_seq = b.max_blocks_per_seq;
      a.act_dtype = ActDtype::kBF16;
      a.index_k = encoded.data();
      a.token_stride = stride;
      a.total_tokens = b.total_tokens();
      ASSERT_TRUE(cpu::AppendIndexK(a, nullptr).ok());
      a.pool = emulated.view;
      KVMESH_ASSERT_OK(EmulateRows(cuda::MakeAppendIndexKParams(a), a.act_dtype, 2));
      ExpectSamePool(emulated, expected);
    }
  }
}

TEST(AppendKvEmulation, OutOfRangeRowsAreSkipped) {
  const KvPoolLayout layout =
      MakeKvPoolLayout(SmallGeometry(KvDtype::kFP8, KvLayout::kHND, 2, 16, 64)).value();
  AppendBatch b = MakeAppendBatch({9, 8, 3, 4}, {20, 2, 0, 0}, 16, 8, 9);
  b.block_table[1 * b.max_blocks_per_seq + 0] = 9;  // beyond the 8 blocks the view declares
  b.block_table[2 * b.max_blocks_per_seq + 0] = 1 << 20;
  b.start_pos[3] = -40;
  HostPool big(layout, 16, 1.0f, 10);  // blocks 8..15 are a guard
  HostPool expected(big);
  HostPool emulated(big);
  expected.view.num_blocks = emulated.view.num_blocks = 8;
  const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 11);
  AppendBatch only0 = b;
  only0.cu_tokens.resize(2);
  only0.start_pos.resize(1);
  only0.block_table.resize(b.max_blocks_per_seq);
  ASSERT_TRUE(
      cpu::AppendKv(MakeArgs(expected.view, only0, in, ActDtype::kBF16, 0, false), nullptr).ok());
  const AppendKvArgs a = MakeArgs(emulated.view, b, in, ActDtype::kBF16, 0, false);
  ASSERT_TRUE(CanImplementAppendKv(a).ok());
  KVMESH_ASSERT_OK(EmulateRows(cuda::MakeAppendKvParams(a), ActDtype::kBF16, 2));
  ExpectSamePool(emulated, expected);
}

// Review finding: a total_tokens hint of 0 made the launcher return OK without launching. The grid
// comes from AppendCtas: at least one CTA, which loops over the rows cu_tokens gives.
TEST(AppendKvEmulation, ZeroTokenCountHintStillWritesEveryRow) {
  for (const std::int32_t hint : {0, 1, -1}) {
    SCOPED_TRACE(hint);
    const KvPoolLayout layout =
        MakeKvPoolLayout(SmallGeometry(KvDtype::kFP8, KvLayout::kHND, 4, 16, 128)).value();
    const AppendBatch b = MakeAppendBatch({9, 40, 3}, {0, 7, 30}, 16, 12, 21);
    HostPool expected(layout, 12, 1.0f, 22);
    HostPool emulated(expected);
    const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 23);
    ASSERT_TRUE(
        cpu::AppendKv(MakeArgs(expected.view, b, in, ActDtype::kBF16, 0, false), nullptr).ok());
    AppendKvArgs a = MakeArgs(emulated.view, b, in, ActDtype::kBF16, 0, false);
    a.total_tokens = hint;
    const cuda::AppendParams p = cuda::MakeAppendKvParams(a);
    const std::int64_t ctas = cuda::AppendCtas(p, a.total_tokens, /*resident_ctas=*/4);
    EXPECT_GE(ctas, 1);
    KVMESH_ASSERT_OK(EmulateRows(p, ActDtype::kBF16, static_cast<unsigned int>(ctas)));
    ExpectSamePool(emulated, expected);
  }
}

// Review finding: with an unknown token count, more than 2^31 - 1 rows were clamped on the device.
// The row count is 64-bit and rows past 2^31 are located with 64-bit divisions.
TEST(AppendKvEmulation, MoreThan2To31RowsAreCountedAndLocated) {
  const KvPoolLayout layout =
      MakeKvPoolLayout(SmallGeometry(KvDtype::kBF16, KvLayout::kHND, 8, 16, 64)).value();
  const std::int32_t cu[] = {0, 1 << 30};
  const std::int32_t start[] = {0};
  const std::int32_t table[] = {0};
  AppendKvArgs a;
  a.pool.layout = layout;
  a.pool.num_blocks = 1;
  a.num_seqs = 1;
  a.cu_tokens = cu;
  a.start_pos = start;
  a.block_table = table;
  a.max_blocks_per_seq = 1;
  const cuda::AppendParams p = cuda::MakeAppendKvParams(a);
  const std::int64_t rows = std::int64_t{1} << 34;  // 2^30 tokens × K, V × 8 heads
  EXPECT_EQ(cuda::LaunchRows(p), rows);
  const std::int64_t r = (std::int64_t{1} << 33) + 8 + 5;  // token 2^29, V, head 5
  const cuda::RowTarget t = cuda::LocateRow<std::uint64_t>(p, 0, r);
  EXPECT_EQ(t.token, 1 << 29);
  EXPECT_EQ(t.kv, 1);
  EXPECT_EQ(t.head, 5);
  EXPECT_FALSE(t.valid);  // position 2^29 is past the one-block table: skipped, not wrapped
  const cuda::RowTarget low = cuda::LocateRow<std::uint32_t>(p, 0, 8 + 5);
  EXPECT_EQ(low.token, 0);
  EXPECT_EQ(low.kv, 1);
  EXPECT_EQ(low.head, 5);
  EXPECT_TRUE(low.valid);
}

}  // namespace
}  // namespace kvmesh
