// The CUDA block-copy kernel's device code (kernels/cuda/block_copy.cuh), run on the CPU through
// the host shims of cuda_emulation.h, against cpu::BlockCopy byte for byte over the whole
// destination: the cases of block_copy_gpu_test.cu (every dtype and order pair, whole and partial
// blocks, MLA with an indexer, narrow units, unaligned bases, several launches of pairs), and the
// unit widths the planner picks. Label cpu: runs on every machine.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/cuda_emulation.h"
// The device code, compiled as C++ against the shims above.
#include "kernels/cuda/block_copy.cuh"
#include "tests/kernels/append_kv_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvmesh {
namespace {

using testing::EmulateGrid;
using testing::ExpectSamePool;
using testing::HostPool;
using testing::RandomPairs;

// The launcher of block_copy.cu with the kernel emulated.
Status EmulateBlockCopy(const BlockCopyArgs& args) {
  KVMESH_RETURN_IF_ERROR(CanImplementBlockCopy(args));
  const int n = args.num_tokens < 0 ? args.src.layout.tokens_per_block() : args.num_tokens;
  if (n == 0 || args.num_pairs == 0) return Status::Ok();
  cuda::CopyParams p{};
  std::uint32_t ctas = 0;
  KVMESH_RETURN_IF_ERROR(cuda::PlanBlockCopy(args, n, p, ctas));
  for (std::int64_t first = 0; first < args.num_pairs; first += cuda::kBlockCopyPairsPerLaunch) {
    const std::int64_t count = std::min(cuda::kBlockCopyPairsPerLaunch, args.num_pairs - first);
    cuda::SetPairs(args, first, count, p);
    KVMESH_RETURN_IF_ERROR(EmulateGrid(&cuda::BlockCopyKernel, p, ctas,
                                       static_cast<unsigned int>(count), cuda::kThreads, false));
  }
  return Status::Ok();
}

struct CopyCase {
  KvPoolGeometry g;
  KvLayout src_order = KvLayout::kHND;
  KvLayout dst_order = KvLayout::kHND;
  int num_tokens = -1;
  std::int64_t src_blocks = 9;
  std::int64_t dst_blocks = 7;
  std::int64_t pairs = 5;
};

void RunCopy(const CopyCase& c) {
  const KvPoolLayout layout = MakeKvPoolLayout(c.g).value();
  const HostPool src(WithOrder(layout, c.src_order), c.src_blocks, 0.5f, 1);
  HostPool expected(WithOrder(layout, c.dst_order), c.dst_blocks, 0.5f, 2);
  HostPool emulated(expected);
  const std::vector<BlockCopyPair> pairs = RandomPairs(c.pairs, c.src_blocks, c.dst_blocks, 3);
  BlockCopyArgs a;
  a.src = src.view;
  a.dst = expected.view;
  a.pairs = pairs.data();
  a.num_pairs = static_cast<std::int64_t>(pairs.size());
  a.num_tokens = c.num_tokens;
  ASSERT_TRUE(cpu::BlockCopy(a, nullptr).ok());
  a.dst = emulated.view;
  ASSERT_TRUE(EmulateBlockCopy(a).ok());
  ExpectSamePool(emulated, expected);
}

KvPoolGeometry Gqa(KvDtype dtype, int head_dim) {
  KvPoolGeometry g;
  g.dtype = dtype;
  g.num_layers = 2;
  g.kv_factor = 2;
  g.num_kv_heads = 3;
  g.tokens_per_block = 16;
  g.head_dim = head_dim;
  return g;
}

TEST(BlockCopyEmulation, EveryDtypeOrderPairAndTokenCount) {
  for (int di = 0; di < kNumKvDtypes; ++di) {
    for (KvLayout so : {KvLayout::kHND, KvLayout::kNHD}) {
      for (KvLayout dor : {KvLayout::kHND, KvLayout::kNHD}) {
        for (int n : {-1, 1, 5, 16}) {
          const auto d = static_cast<KvDtype>(di);
          SCOPED_TRACE(std::string(KvDtypeName(d)) + " " + std::string(KvLayoutName(so)) + "->" +
                       std::string(KvLayoutName(dor)) + " tokens " + std::to_string(n));
          CopyCase c;
          c.g = Gqa(d, 32);
          c.src_order = so;
          c.dst_order = dor;
          c.num_tokens = n;
          RunCopy(c);
        }
      }
    }
  }
}

TEST(BlockCopyEmulation, MlaWithIndexer) {
  for (bool fp4 : {false, true}) {
    for (KvLayout so : {KvLayout::kHND, KvLayout::kNHD}) {
      for (int n : {-1, 3}) {
        CopyCase c;
        c.g.dtype = KvDtype::kFP8;
        c.g.num_layers = 3;
        c.g.kv_factor = 1;
        c.g.num_kv_heads = 1;
        c.g.tokens_per_block = 32;
        c.g.head_dim = 576;
        c.g.index_layers = 2;
        c.g.index_head_dim = 128;
        c.g.index_fp4 = fp4;
        c.src_order = so;
        c.dst_order = KvLayout::kNHD;
        c.num_tokens = n;
        RunCopy(c);
      }
    }
  }
}

TEST(BlockCopyEmulation, NarrowUnits) {
  for (KvDtype d : {KvDtype::kBF16, KvDtype::kFP8, KvDtype::kINT8}) {
    for (int head_dim : {3, 5}) {
      for (KvLayout dor : {KvLayout::kHND, KvLayout::kNHD}) {
        for (int n : {-1, 7}) {
          CopyCase c;
          c.g = Gqa(d, head_dim);
          c.g.tokens_per_block = 8;
          c.dst_order = dor;
          c.num_tokens = n;
          RunCopy(c);
        }
      }
    }
  }
}

TEST(BlockCopyEmulation, MoreThanOneLaunchOfPairs) {
  CopyCase c;
  c.g = Gqa(KvDtype::kNVFP4, 16);
  c.g.num_layers = 1;
  c.src_blocks = 300;
  c.dst_blocks = 2 * cuda::kBlockCopyPairsPerLaunch + 50;
  c.pairs = c.dst_blocks - 3;
  RunCopy(c);
}

TEST(BlockCopyEmulation, UnitWidthFollowsAlignment) {
  const KvPoolLayout layout = MakeKvPoolLayout(Gqa(KvDtype::kBF16, 64)).value();
  HostPool src(layout, 4, 1.0f, 5);
  HostPool dst(layout, 4, 1.0f, 6);
  const BlockCopyPair pairs[] = {{0, 2}, {3, 1}};
  BlockCopyArgs a;
  a.src = src.view;
  a.dst = dst.view;
  a.pairs = pairs;
  a.num_pairs = 2;
  auto width = [&](int n) {
    cuda::CopyParams p{};
    std::uint32_t ctas = 0;
    EXPECT_TRUE(cuda::PlanBlockCopy(a, n, p, ctas).ok());
    return p.comp[0].width;
  };
  EXPECT_EQ(width(16), 16);  // whole blocks from 16-byte aligned bases
  // Bases 4 bytes off: units of 4 bytes, and the copy still lands right.
  std::vector<std::uint8_t> raw_src(src.storage[0].size() + 16),
      raw_dst(dst.storage[0].size() + 16);
  auto* s = raw_src.data() + (16 - reinterpret_cast<std::uintptr_t>(raw_src.data()) % 16) % 16 + 4;
  auto* d = raw_dst.data() + (16 - reinterpret_cast<std::uintptr_t>(raw_dst.data()) % 16) % 16 + 4;
  std::memcpy(s, src.storage[0].data(), src.storage[0].size());
  std::memcpy(d, dst.storage[0].data(), dst.storage[0].size());
  a.src.base[0] = s;
  a.dst.base[0] = d;
  EXPECT_EQ(width(16), 4);
  ASSERT_TRUE(EmulateBlockCopy(a).ok());
  a.dst = dst.view;
  a.src = src.view;
  ASSERT_TRUE(cpu::BlockCopy(a, nullptr).ok());
  EXPECT_EQ(std::memcmp(d, dst.storage[0].data(), dst.storage[0].size()), 0);
}

}  // namespace
}  // namespace kvmesh
