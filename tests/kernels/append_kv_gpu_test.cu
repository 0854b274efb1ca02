// The CUDA append (kernels/append_kv_cuda.h) against its CPU twin, byte for byte over whole pools
// (written rows, side pools, and every byte that must stay untouched): every cache dtype × both
// layouts × every activation dtype, dense and padded inputs, head dims 7..576 (one lane per row up
// to a whole warp looping over chunks), vector and element-wise paths (a misaligned input), the MLA
// latent, the indexer (FP8 and FP4), an unknown token count, and rows with bad block ids (skipped).
//
// Label gpu: skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/append_kv.h"
#include "kernels/append_kv_cuda.h"
#include "tests/kernels/append_kv_test_util.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvmesh {
namespace {

using testing::AppendBatch;
using testing::AppendInputs;
using testing::CaseName;
using testing::CopyFromBuffer;
using testing::CopyToBuffer;
using testing::CudaBuffer;
using testing::CudaPool;
using testing::DeviceArrays;
using testing::ExpectSameComponents;
using testing::FirstDifferentByte;
using testing::HostPool;
using testing::MakeAppendBatch;
using testing::MakeArgs;
using testing::MakeInputs;
using testing::SmallGeometry;

struct Case {
  KvPoolGeometry g;
  ActDtype act = ActDtype::kBF16;
  bool padded = false;
  int layer = 0;
  std::vector<int> tokens = {1, 3, 0, 7, 17, 65};
  std::vector<int> starts = {0, 5, 4, 16, 9, 30};
  int shift = 0;  // bytes the device input is moved by (misalignment)
  bool unknown_total = false;
  bool zero_total = false;  // a wrong total_tokens hint of 0
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
  HostPool host(layout, num_blocks, pool_scale, 4);
  CudaPool device(host.view);
  const AppendInputs in = MakeInputs(layout.data(), b, c.act, c.padded, 5);

  ASSERT_TRUE(cpu::AppendKv(MakeArgs(host.view, b, in, c.act, c.layer, c.padded), nullptr).ok());

  const DeviceArrays arrays(b, in.encoded, layout.data().kv_factor, c.shift);
  AppendKvArgs a = MakeArgs(device.view, b, in, c.act, c.layer, c.padded);
  a.cu_tokens = arrays.cu();
  a.start_pos = arrays.start();
  a.block_table = arrays.table();
  a.k = arrays.input(0);
  a.v = layout.data().kv_factor == 2 ? arrays.input(1) : nullptr;
  if (c.unknown_total) a.total_tokens = -1;
  if (c.zero_total) a.total_tokens = 0;
  const Status s = cuda::LaunchAppendKv(a, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectSameComponents(device, host);
}

TEST(AppendKvGpu, EveryFormatLayoutAndInput) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (int di = 0; di < kNumKvDtypes; ++di) {
    for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
      for (ActDtype a : {ActDtype::kFP32, ActDtype::kBF16, ActDtype::kFP16}) {
        for (bool padded : {false, true}) {
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

TEST(AppendKvGpu, HeadDims64To256VectorPath) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (int head_dim : {64, 128, 256}) {
    for (int di = 0; di < kNumKvDtypes; ++di) {
      for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
        const auto d = static_cast<KvDtype>(di);
        SCOPED_TRACE(CaseName(d, l, ActDtype::kBF16) + " head_dim " + std::to_string(head_dim));
        Case c;
        c.g = SmallGeometry(d, l, 8, 64, head_dim);
        c.tokens = {1, 3, 7, 17, 65, 300};
        c.starts = {0, 63, 5, 64, 30, 1};
        RunCase(c);
      }
    }
  }
}

TEST(AppendKvGpu, MlaLatent576) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (int di = 0; di < kNumKvDtypes; ++di) {
    for (KvLayout l : {KvLayout::kHND, KvLayout::kNHD}) {
      for (ActDtype a : {ActDtype::kFP32, ActDtype::kBF16}) {
        const auto d = static_cast<KvDtype>(di);
        SCOPED_TRACE(CaseName(d, l, a));
        Case c;
        c.g = SmallGeometry(d, l, 1, 64, 576);
        c.g.kv_factor = 1;
        c.act = a;
        RunCase(c);
      }
    }
  }
}

// Rows that are not whole 16-element chunks, and inputs that are not 16-byte aligned: the
// element-wise path.
TEST(AppendKvGpu, OddSizesAndMisalignedInputs) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
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
    for (int shift : {2, 4, 8}) {
      const auto d = static_cast<KvDtype>(di);
      SCOPED_TRACE(CaseName(d, KvLayout::kHND, ActDtype::kBF16) + " shift " +
                   std::to_string(shift));
      Case c;
      c.g = SmallGeometry(d, KvLayout::kHND, 4, 16, 128);
      c.shift = shift;
      RunCase(c);
    }
  }
}

TEST(AppendKvGpu, UnknownTokenCount) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (KvDtype d : {KvDtype::kFP8, KvDtype::kNVFP4}) {
    Case c;
    c.g = SmallGeometry(d, KvLayout::kNHD, 8, 32, 128);
    c.unknown_total = true;
    c.tokens = {5, 2000, 1};
    c.starts = {3, 0, 31};
    RunCase(c);
  }
}

// A small append of the quantising formats: the case scripts/gpu-check runs under
// compute-sanitizer.
TEST(AppendKvGpu, SmallCaseForSanitizers) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (KvDtype d : {KvDtype::kFP8, KvDtype::kNVFP4}) {
    Case c;
    c.g = SmallGeometry(d, KvLayout::kHND, 2, 16, 128);
    c.tokens = {3, 20};
    c.starts = {0, 9};
    RunCase(c);
  }
}

// Review finding: a total_tokens hint of 0 returned OK without launching (the header promises that
// a wrong hint costs speed, never correctness).
TEST(AppendKvGpu, ZeroTokenCountHintStillWritesEveryRow) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  Case c;
  c.g = SmallGeometry(KvDtype::kFP8, KvLayout::kHND, 4, 16, 128);
  c.zero_total = true;
  RunCase(c);
}

// Review finding: errors were reported by the wrong launcher. An error an earlier call left as
// CUDA's last error is not this launch's; a launch that succeeds leaves none.
__global__ void NothingKernel() {}

TEST(AppendKvGpu, StaleErrorIsNotReportedAsTheLaunchError) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  EXPECT_NE(
      cudaFuncSetAttribute(&NothingKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 30),
      cudaSuccess);
  Case c;
  c.g = SmallGeometry(KvDtype::kBF16, KvLayout::kNHD, 2, 16, 64);
  RunCase(c);  // asserts that the launch returned OK
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(AppendKvGpu, IndexerFp8AndFp4) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (bool fp4 : {false, true}) {
    for (int quant_block : {64, 128}) {
      for (ActDtype act : {ActDtype::kFP32, ActDtype::kBF16}) {
        SCOPED_TRACE(std::string(fp4 ? "fp4" : "fp8") + " quant block " +
                     std::to_string(quant_block) + " " + std::string(ActDtypeName(act)));
        KvPoolGeometry g = SmallGeometry(KvDtype::kFP8, KvLayout::kHND, 1, 16, 576);
        g.kv_factor = 1;
        g.index_layers = 2;
        g.index_head_dim = 256;
        g.index_quant_block = quant_block;
        g.index_fp4 = fp4;
        const KvPoolLayout layout = MakeKvPoolLayout(g).value();
        const AppendBatch b = MakeAppendBatch({1, 3, 7, 17, 65}, {0, 5, 16, 9, 30}, 16, 20, 6);
        HostPool host(layout, 20, 1.0f, 7);
        CudaPool device(host.view);
        const std::int64_t stride = 256 + 8;
        const std::vector<std::uint8_t> encoded =
            testing::EncodeActivations(testing::MakeInputValues(b.total_tokens() * 2, 128, 8),
                                       b.total_tokens(), 256, stride, act);

        AppendIndexKArgs a;
        a.pool = host.view;
        a.index_layer = 1;
        a.num_seqs = b.num_seqs();
        a.cu_tokens = b.cu_tokens.data();
        a.start_pos = b.start_pos.data();
        a.block_table = b.block_table.data();
        a.max_blocks_per_seq = b.max_blocks_per_seq;
        a.act_dtype = act;
        a.index_k = encoded.data();
        a.token_stride = stride;
        a.total_tokens = b.total_tokens();
        ASSERT_TRUE(cpu::AppendIndexK(a, nullptr).ok());

        const DeviceArrays arrays(b, &encoded, 1, 0);
        a.pool = device.view;
        a.cu_tokens = arrays.cu();
        a.start_pos = arrays.start();
        a.block_table = arrays.table();
        a.index_k = arrays.input(0);
        const Status s = cuda::LaunchAppendIndexK(a, nullptr);
        ASSERT_TRUE(s.ok()) << s;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ExpectSameComponents(device, host);
      }
    }
  }
}

// The kernel cannot validate device-side tables before it runs: rows whose block id or position
// is out of range are skipped, the rest are written, and nothing outside the pool changes.
TEST(AppendKvGpu, OutOfRangeRowsAreSkipped) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  const KvPoolLayout layout =
      MakeKvPoolLayout(SmallGeometry(KvDtype::kFP8, KvLayout::kHND, 2, 16, 64)).value();
  // Sequence 0 is fine; sequence 1 (positions 2..9 of its one block) names block 9 of an 8-block
  // pool (inside the allocation: the guard below would see a write); sequence 2 names block
  // 1 << 20; sequence 3 starts at a negative position.
  AppendBatch b = MakeAppendBatch({9, 8, 3, 4}, {20, 2, 0, 0}, 16, 8, 9);
  b.block_table[1 * b.max_blocks_per_seq + 0] = 9;
  b.block_table[2 * b.max_blocks_per_seq + 0] = 1 << 20;
  b.start_pos[3] = -40;
  HostPool host(layout, 8, 1.0f, 10);
  // A guard after the pool in the same allocation: the bytes of 8 more blocks.
  HostPool big(layout, 16, 1.0f, 10);
  CudaPool device(big.view);
  device.view.num_blocks = 8;
  const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 11);

  // Expected: sequence 0 alone, on the first 8 blocks of `big`.
  HostPool expected(big);
  AppendBatch only0 = b;
  only0.cu_tokens.resize(2);
  only0.start_pos.resize(1);
  only0.block_table.resize(b.max_blocks_per_seq);
  expected.view.num_blocks = 8;
  ASSERT_TRUE(
      cpu::AppendKv(MakeArgs(expected.view, only0, in, ActDtype::kBF16, 0, false), nullptr).ok());
  // The CPU twin refuses the whole batch.
  EXPECT_EQ(cpu::AppendKv(MakeArgs(host.view, b, in, ActDtype::kBF16, 0, false), nullptr).code(),
            StatusCode::kInvalidArgument);

  const DeviceArrays arrays(b, in.encoded, 2, 0);
  AppendKvArgs a = MakeArgs(device.view, b, in, ActDtype::kBF16, 0, false);
  a.cu_tokens = arrays.cu();
  a.start_pos = arrays.start();
  a.block_table = arrays.table();
  a.k = arrays.input(0);
  a.v = arrays.input(1);
  ASSERT_TRUE(cuda::LaunchAppendKv(a, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectSameComponents(device, expected);
}

}  // namespace
}  // namespace kvmesh
