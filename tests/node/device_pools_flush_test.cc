// The node's readers of pool blocks on device pools: the shutdown flush (node/flush.h) writes every
// cached pool block into the disk tier through the engine's staging (OffloadEngine::ReadBlock), on
// a pool in emulated device memory whose addresses are PROT_NONE (store/emulated_device.h):
// a host read of the pool would be a SIGSEGV, a stale or missing copy a wrong byte on disk.
#include <gtest/gtest.h>

#include <vector>

#include "node/flush.h"
#include "tests/store/device_rig.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::DeviceRig;
using store_test::Doc;
using store_test::LayoutOf;
using store_test::RigOptions;
using store_test::TempDir;
using store_test::WholeBlocks;

TEST(DevicePoolsFlushTest, FlushWritesEveryCachedDeviceBlockToDiskWithItsBytes) {
  TempDir dir;
  RigOptions o;
  o.layout = LayoutOf(store_test::TierShapes()[0].geometry);  // bf16 HND, 16 tokens
  const std::int32_t t = o.layout.tokens_per_block();
  o.pool_blocks = 8;
  o.host_blocks = 0;
  o.disk_path = dir.path();
  o.disk_blocks = 64;
  o.copy_threads = 2;
  DeviceRig rig(o);
  // Six single-block prompts: all stay cached in the pool (nothing evicted, nothing on disk yet).
  std::vector<ContentId> ids;
  for (int d = 0; d < 6; ++d) {
    rig.Run(d + 1, Doc(t, d), WholeBlocks());
    ids.push_back(rig.Ids(Doc(t, d), WholeBlocks())[0]);
  }
  rig.engine().Drain();
  ASSERT_EQ(rig.engine().stats().offload.blocks, 0);
  const std::int64_t staged_before = rig.device().stats().to_host_pairs;
  const FlushCounts flushed =
      FlushToDiskTier(rig.cache(), {.min_priority = 0, .full = FullDiskTier::kIsAFailure});
  EXPECT_EQ(flushed.written, 6);
  EXPECT_EQ(flushed.failures, 0);
  EXPECT_EQ(flushed.not_fitting, 0);
  // Each block went through the staging copy, once.
  EXPECT_EQ(rig.device().stats().to_host_pairs - staged_before, 6);
  // The disk holds what the device blocks held.
  store_test::TestPool check(rig.alias().layout, 1, 1.0f);
  for (const ContentId& id : ids) {
    ASSERT_TRUE(rig.engine().disk()->Get(TierPoolId{0}, id, check.view(), 0).ok());
    EXPECT_TRUE(SyntheticBlockMatches(check.view(), 0, id));
  }
  // A second flush finds everything on disk already.
  const FlushCounts again = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kIsAFailure});
  EXPECT_EQ(again.written, 0);
  EXPECT_EQ(again.already, 6);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

}  // namespace
}  // namespace kvmesh
