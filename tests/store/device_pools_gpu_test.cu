// Device pools on a real GPU: the offload engine over a pool in device memory (cudaMalloc) with the
// CUDA backend (MakeCudaBackend) and pinned staging: blocks offloaded into the host tier, onboarded
// into other device blocks, read back with ReadBlock and copied on the device (CopyPoolBlocks)
// with the bytes they were written with — the round trip the CPU tests run on the emulated device
// (device_pools_test.cc).
//
// Label gpu: skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "store/offload_engine.h"
#include "store/synthetic_block.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using testing::CudaPool;

constexpr std::int64_t kBlocks = 16;

// The device pool's bytes, downloaded into `host` (same layout and block count).
void Download(const CudaPool& device, store_test::TestPool& host) {
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (device.buffers[c] == nullptr) continue;
    const std::vector<std::uint8_t> bytes = device.Component(c);
    std::memcpy(host.view().base[c], bytes.data(), bytes.size());
  }
}

TEST(DevicePoolsGpu, OffloadOnboardReadAndCopyThroughPinnedStaging) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (const store_test::Shape& shape : store_test::TierShapes()) {
    SCOPED_TRACE(shape.name);
    const KvPoolLayout layout = store_test::LayoutOf(shape.geometry);
    store_test::TestPool host(layout, kBlocks, shape.pool_scale);
    std::vector<ContentId> ids;
    for (std::int64_t b = 0; b < 6; ++b) {
      ids.push_back(store_test::IdFor(static_cast<std::uint64_t>(b) + 1));
      FillSyntheticBlock(host.view(), b, ids.back());
    }
    CudaPool device(host.view());  // blocks 0..5 written, the rest whatever cudaMalloc gave
    OffloadEngineOptions e;
    e.pools = {device.view};
    e.host_capacity_bytes = 64ll << 20;
    e.copy_threads = 2;
    DevicePoolsOptions d;
    d.device = {0};
    d.make_backend = [](int ordinal) { return MakeCudaBackend(ordinal); };
    d.staging_area_bytes = 4 * layout.BytesPerBlock();  // chunks of 4 blocks
    e.device_pools = d;
    auto made = OffloadEngine::Create(e);
    ASSERT_TRUE(made.ok()) << made.status();
    OffloadEngine& engine = **made;
    for (std::int64_t b = 0; b < 6; ++b) {
      EvictedBlock v;
      v.pool = PoolId{0};
      v.block = BlockId{static_cast<std::int32_t>(b)};
      v.content_id = ids[static_cast<std::size_t>(b)];
      v.priority = kTierDefaultPriority;
      engine.OnEvict(v);
    }
    EXPECT_EQ(engine.stats().offload.blocks, 6);
    std::vector<BlockId> dst;
    for (std::int32_t b = 0; b < 6; ++b) dst.push_back(BlockId{8 + b});
    const OnboardResult r = engine.Onboard(ids, dst);
    EXPECT_EQ(r.restored, 6) << r.stop_reason;
    // Block 1 → 15 on the device, then block 15 read back through staging.
    const BlockCopyPair pair{1, 15};
    BlockCopyArgs copy;
    copy.src = copy.dst = device.view;
    copy.pairs = &pair;
    copy.num_pairs = 1;
    ASSERT_TRUE(engine.CopyPoolBlocks(copy).ok());
    {
      auto read = engine.ReadBlock(0, 15);
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_TRUE(read->staged());
      EXPECT_TRUE(SyntheticBlockMatches(read->view(), read->block(), ids[1]));
    }
    store_test::TestPool back(layout, kBlocks, shape.pool_scale);
    Download(device, back);
    for (std::int64_t b = 0; b < 6; ++b) {
      EXPECT_TRUE(SyntheticBlockMatches(back.view(), 8 + b, ids[static_cast<std::size_t>(b)])) << b;
    }
    EXPECT_TRUE(SyntheticBlockMatches(back.view(), 15, ids[1]));
  }
}

}  // namespace
}  // namespace kvmesh
