// The CUDA block copy (kernels/block_copy_cuda.h) against cpu::BlockCopy, byte for byte over the
// whole destination pool: every cache dtype, every pair of orders (HND/NHD on each side), whole and
// partial blocks, MLA with an indexer, sizes and bases that force narrower vector widths, more
// pairs than one launch takes, copies inside one pool, and device <-> pinned host memory (offload
// and onboard through unified addressing).
//
// Label gpu: skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/block_copy.h"
#include "kernels/block_copy_cuda.h"
#include "tests/kernels/append_kv_test_util.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvmesh {
namespace {

using testing::CudaBuffer;
using testing::CudaPool;
using testing::FirstDifferentByte;
using testing::HostPool;
using testing::RandomPairs;

struct CopyCase {
  KvPoolGeometry g;
  KvLayout src_order = KvLayout::kHND;
  KvLayout dst_order = KvLayout::kHND;
  int num_tokens = -1;
  std::int64_t src_blocks = 9;
  std::int64_t dst_blocks = 7;
  std::int64_t pairs = 5;
  CudaBuffer::Kind src_kind = CudaBuffer::Kind::kDevice;
  CudaBuffer::Kind dst_kind = CudaBuffer::Kind::kDevice;
};

void RunCopy(const CopyCase& c) {
  const KvPoolLayout layout = MakeKvPoolLayout(c.g).value();
  HostPool src(WithOrder(layout, c.src_order), c.src_blocks, 0.5f, 1);
  HostPool dst(WithOrder(layout, c.dst_order), c.dst_blocks, 0.5f, 2);
  CudaPool dsrc(src.view, c.src_kind);
  CudaPool ddst(dst.view, c.dst_kind);
  const std::vector<BlockCopyPair> pairs = RandomPairs(c.pairs, c.src_blocks, c.dst_blocks, 3);

  BlockCopyArgs a;
  a.src = src.view;
  a.dst = dst.view;
  a.pairs = pairs.data();
  a.num_pairs = static_cast<std::int64_t>(pairs.size());
  a.num_tokens = c.num_tokens;
  ASSERT_TRUE(cpu::BlockCopy(a, nullptr).ok());

  a.src = dsrc.view;
  a.dst = ddst.view;
  const Status s = cuda::LaunchBlockCopy(a, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int ci = 0; ci < kNumKvComponents; ++ci) {
    if (!layout.components[ci].present()) continue;
    const long at = FirstDifferentByte(ddst.Component(ci), dst.storage[ci]);
    EXPECT_EQ(at, -1) << "component " << KvComponentName(static_cast<KvComponent>(ci))
                      << " differs at byte " << at;
  }
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

TEST(BlockCopyGpu, EveryDtypeOrderPairAndTokenCount) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
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

TEST(BlockCopyGpu, MlaWithIndexer) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
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

// Rows of 6, 5 and 3 bytes: units of 2 and 1 bytes.
TEST(BlockCopyGpu, NarrowUnits) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
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

TEST(BlockCopyGpu, MoreThanOneLaunchOfPairs) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  CopyCase c;
  c.g = Gqa(KvDtype::kNVFP4, 64);
  c.src_blocks = 300;
  c.dst_blocks = 2 * cuda::kBlockCopyPairsPerLaunch + 50;
  c.pairs = c.dst_blocks - 3;
  RunCopy(c);
}

TEST(BlockCopyGpu, PinnedHostOffloadAndOnboard) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (KvDtype d : {KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4}) {
    for (KvLayout dor : {KvLayout::kHND, KvLayout::kNHD}) {
      CopyCase offload;
      offload.g = Gqa(d, 128);
      offload.dst_order = dor;
      offload.dst_kind = CudaBuffer::Kind::kPinnedHost;
      RunCopy(offload);
      CopyCase onboard = offload;
      onboard.dst_kind = CudaBuffer::Kind::kDevice;
      onboard.src_kind = CudaBuffer::Kind::kPinnedHost;
      onboard.num_tokens = 9;
      RunCopy(onboard);
    }
  }
}

// A copy inside one device pool (copy-on-partial-reuse), and a base that is only 4-byte aligned.
TEST(BlockCopyGpu, InsideOnePoolAndUnalignedBase) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  const KvPoolLayout layout = MakeKvPoolLayout(Gqa(KvDtype::kFP8, 64)).value();
  HostPool host(layout, 12, 1.0f, 4);
  CudaPool device(host.view);
  const BlockCopyPair pairs[] = {{3, 7}, {10, 1}};
  BlockCopyArgs a;
  a.src = a.dst = host.view;
  a.pairs = pairs;
  a.num_pairs = 2;
  a.num_tokens = 11;
  ASSERT_TRUE(cpu::BlockCopy(a, nullptr).ok());
  a.src = a.dst = device.view;
  ASSERT_TRUE(cuda::LaunchBlockCopy(a, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int ci : {0, 1}) EXPECT_EQ(FirstDifferentByte(device.Component(ci), host.storage[ci]), -1);

  // Data component moved by 4 bytes inside a larger allocation (both sides).
  HostPool src(layout, 4, 1.0f, 5);
  HostPool dst(layout, 4, 1.0f, 6);
  CudaBuffer raw_src(src.storage[0].size() + 4), raw_dst(dst.storage[0].size() + 4);
  CudaPool dsrc(src.view), ddst(dst.view);
  dsrc.view.base[0] = raw_src.as<std::uint8_t>() + 4;
  ddst.view.base[0] = raw_dst.as<std::uint8_t>() + 4;
  ASSERT_EQ(cudaMemcpy(dsrc.view.base[0], src.storage[0].data(), src.storage[0].size(),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ddst.view.base[0], dst.storage[0].data(), dst.storage[0].size(),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // uploads complete (cuda_test_util.h)
  const BlockCopyPair moved[] = {{0, 2}, {3, 1}};
  a.src = src.view;
  a.dst = dst.view;
  a.pairs = moved;
  a.num_pairs = 2;
  a.num_tokens = -1;
  ASSERT_TRUE(cpu::BlockCopy(a, nullptr).ok());
  a.src = dsrc.view;
  a.dst = ddst.view;
  ASSERT_TRUE(cuda::LaunchBlockCopy(a, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(FirstDifferentByte(testing::CopyFromBuffer(ddst.view.base[0], dst.storage[0].size()),
                               dst.storage[0]),
            -1);
}

TEST(BlockCopyGpu, InvalidArgumentsEnqueueNothing) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  const KvPoolLayout layout = MakeKvPoolLayout(Gqa(KvDtype::kBF16, 32)).value();
  HostPool host(layout, 4, 1.0f, 7);
  CudaPool device(host.view);
  const BlockCopyPair bad[] = {{0, 4}};
  BlockCopyArgs a;
  a.src = a.dst = device.view;
  a.pairs = bad;
  a.num_pairs = 1;
  EXPECT_EQ(cuda::LaunchBlockCopy(a, nullptr).code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(FirstDifferentByte(device.Component(0), host.storage[0]), -1);
}

}  // namespace
}  // namespace kvmesh
