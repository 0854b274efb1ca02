// OffloadEngine over pools in emulated device memory (store/emulated_device.h: the engine's
// pool addresses are PROT_NONE, so any host access to them kills the test with SIGSEGV). Offload
// and onboard staged through host memory with bytes equal to the device blocks', a run of blocks
// longer than a staging area (chunks), ReadBlock, the device-to-device copy, one backend per
// device, a corrupt tier copy never copied to the device, and failing device copies (at the launch
// and at the wait) in both directions. The option's validation, and host pools left as they were
// (no staging, no copy).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/strings.h"
#include "store/emulated_device.h"
#include "store/layer_range_codec.h"
#include "store/offload_engine.h"
#include "store/synthetic_block.h"
#include "tests/store/device_rig.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::IdFor;
using store_test::LayoutOf;
using store_test::TempDir;
using FailAt = EmulatedDevice::FailAt;

constexpr TierPoolId kPool{0};

KvPoolLayout SmallLayout() {
  return LayoutOf(store_test::TierShapes()[0].geometry);  // bf16 HND, 16 tokens, 16 KiB
}

// An engine over one pool of emulated device memory (or host memory, with `host_pools`).
struct EngineRig {
  struct Options {
    std::int64_t pool_blocks = 16;
    std::int64_t host_blocks = 16;  // 0: no host tier
    std::string disk_path;          // empty: no disk tier
    int copy_threads = 0;
    std::int64_t staging_blocks = 0;  // 0: the default area
  };
  explicit EngineRig(const Options& o) {
    const KvPoolLayout layout = SmallLayout();
    pool = device.AllocatePool(layout, o.pool_blocks, 1.0f).value();
    OffloadEngineOptions e;
    e.pools = {pool.device};
    e.host_capacity_bytes =
        o.host_blocks * ((store_test::BundleBytes(layout, 1.0f) + 63) / 64 * 64);
    e.host_memory = HostMemoryKind::kAligned;
    e.host_prefault = false;
    if (!o.disk_path.empty()) {
      RocksDbTierOptions d;
      d.path = o.disk_path;
      d.capacity_bytes = 1 << 30;
      e.disk = d;
    }
    e.copy_threads = o.copy_threads;
    e.device_pools =
        store_test::EmulatedDevicePools(device, {0}, o.staging_blocks * layout.BytesPerBlock());
    auto made = OffloadEngine::Create(std::move(e));
    KVMESH_CHECK(made.ok()) << made.status().ToString();
    engine = std::move(made).value();
  }
  // Writes block `block` with the content of `id` (through the alias) and evicts it.
  void Evict(std::int64_t block, const ContentId& id) {
    FillSyntheticBlock(pool.alias, block, id);
    EvictedBlock b;
    b.pool = PoolId{0};
    b.block = BlockId{static_cast<std::int32_t>(block)};
    b.content_id = id;
    b.priority = kTierDefaultPriority;
    b.num_tokens = pool.alias.layout.tokens_per_block();
    engine->OnEvict(b);
  }
  // The alias bytes of every component of a block.
  std::vector<std::uint8_t> Bytes(std::int64_t block) const {
    std::vector<std::uint8_t> out;
    for (int c = 0; c < kNumKvComponents; ++c) {
      const auto kind = static_cast<KvComponent>(c);
      if (!pool.alias.layout.component(kind).present()) continue;
      const std::uint8_t* p = pool.alias.BlockBytes(kind, block);
      out.insert(out.end(), p, p + pool.alias.layout.component(kind).BytesPerBlock());
    }
    return out;
  }

  EmulatedDevice device;  // outlives the engine
  EmulatedDevice::Pool pool;
  std::unique_ptr<OffloadEngine> engine;
};

std::vector<BlockId> Blocks(std::int32_t first, std::int32_t n) {
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) out.push_back(BlockId{first + i});
  return out;
}

std::vector<ContentId> Ids(std::uint64_t first, std::uint64_t n) {
  std::vector<ContentId> out;
  out.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) out.push_back(IdFor(first + i));
  return out;
}

TEST(DevicePoolsTest, CreateValidatesTheDevicePoolsOptions) {
  EmulatedDevice device;
  const KvPoolLayout layout = SmallLayout();
  const EmulatedDevice::Pool pool = device.AllocatePool(layout, 4, 1.0f).value();
  OffloadEngineOptions e;
  e.pools = {pool.device};
  e.host_capacity_bytes = 1 << 20;
  e.host_memory = HostMemoryKind::kAligned;
  e.device_pools = store_test::EmulatedDevicePools(device, {0, 1}, 0);
  auto made = OffloadEngine::Create(e);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("device_pools.device"), std::string::npos)
      << made.status();
  e.device_pools = store_test::EmulatedDevicePools(device, {0}, 0);
  e.device_pools->make_backend = nullptr;
  made = OffloadEngine::Create(e);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("device_pools.make_backend"), std::string::npos)
      << made.status();
  // A backend that cannot be made (no such device) fails the engine.
  e.device_pools = store_test::EmulatedDevicePools(device, {0}, 0);
  e.device_pools->make_backend = [](int d) -> Result<std::unique_ptr<KernelBackend>> {
    return Status::CudaError(StrCat("no device ", d));
  };
  made = OffloadEngine::Create(e);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kCudaError);
}

TEST(DevicePoolsTest, HostPoolsAreReadInPlaceWithoutStaging) {
  store_test::TestPool host(SmallLayout(), 4, 1.0f);
  OffloadEngineOptions e;
  e.pools = {host.view()};
  e.host_capacity_bytes = 1 << 20;
  e.host_memory = HostMemoryKind::kAligned;
  auto engine = OffloadEngine::Create(e);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_FALSE((*engine)->device_pools());
  EXPECT_EQ((*engine)->staging(), nullptr);
  auto block = (*engine)->ReadBlock(0, 3);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_FALSE(block->staged());
  EXPECT_EQ(&block->view(), &(*engine)->pools()[0]);  // the pool itself: no copy
  EXPECT_EQ(block->block(), 3);
  EXPECT_EQ((*engine)->ReadBlock(0, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->ReadBlock(1, 0).status().code(), StatusCode::kInvalidArgument);
  // The partial-reuse copy on host pools is cpu::BlockCopy.
  host.Fill(1, 7);
  const BlockCopyPair pair{1, 2};
  BlockCopyArgs args;
  args.src = args.dst = host.view();
  args.pairs = &pair;
  args.num_pairs = 1;
  ASSERT_TRUE((*engine)->CopyPoolBlocks(args).ok());
  EXPECT_EQ(host.Snapshot(2), host.Expected(7));
}

class DevicePoolsThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(DevicePoolsThreadsTest, OffloadAndOnboardAreStagedWithTheDeviceBlocksBytes) {
  TempDir dir;
  EngineRig::Options o;
  o.host_blocks = 2;  // the rest spills to RocksDB
  o.disk_path = dir.path();
  o.copy_threads = GetParam();
  EngineRig rig(o);
  const std::vector<ContentId> ids = Ids(100, 6);
  for (std::size_t i = 0; i < ids.size(); ++i) rig.Evict(static_cast<std::int64_t>(i), ids[i]);
  rig.engine->Drain();
  OffloadStats s = rig.engine->stats();
  EXPECT_EQ(s.offload.blocks, 6);
  EXPECT_EQ(s.offload_failed, 0);
  EXPECT_EQ(s.host.entries, 2);
  EXPECT_EQ(s.spill.blocks, 4);
  // Each tier's copy holds the device block's bytes.
  store_test::TestPool check(SmallLayout(), 1, 1.0f);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    BlockTier* tier = i < 4 ? static_cast<BlockTier*>(rig.engine->disk()) : rig.engine->host();
    ASSERT_TRUE(tier->Get(kPool, ids[i], check.view(), 0).ok()) << i;
    EXPECT_TRUE(SyntheticBlockMatches(check.view(), 0, ids[i])) << i;
  }
  // Back into other device blocks (8..13), from both tiers.
  const OnboardResult r = rig.engine->Onboard(ids, Blocks(8, 6));
  EXPECT_EQ(r.restored, 6) << r.stop_reason;
  EXPECT_EQ(r.from_disk, 4);
  EXPECT_EQ(r.from_host, 2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(SyntheticBlockMatches(rig.pool.alias, 8 + static_cast<std::int64_t>(i), ids[i]))
        << i;
  }
  const EmulatedDeviceStats d = rig.device.stats();
  EXPECT_EQ(d.backends_made, 1);
  EXPECT_EQ(d.to_host_pairs, 6);
  EXPECT_EQ(d.to_device_pairs, 6);
  EXPECT_EQ(d.launches, d.synchronizes);
  EXPECT_EQ(d.overlapping_calls, 0);
  s = rig.engine->stats();
  EXPECT_EQ(s.onboard_host.blocks, 2);
  EXPECT_EQ(s.onboard_disk.blocks, 4);
}

INSTANTIATE_TEST_SUITE_P(CopyThreads, DevicePoolsThreadsTest, ::testing::Values(0, 2));

// CountHeld says where a restore would read each block: the host tier, else RocksDB; it stops
// at the first block no tier holds.
TEST(DevicePoolsTest, CountHeldSaysWhichTierEachBlockComesFrom) {
  TempDir dir;
  EngineRig::Options o;
  o.host_blocks = 2;  // the rest spills to RocksDB
  o.disk_path = dir.path();
  EngineRig rig(o);
  const std::vector<ContentId> ids = Ids(100, 6);
  for (std::size_t i = 0; i < ids.size(); ++i) rig.Evict(static_cast<std::int64_t>(i), ids[i]);
  rig.engine->Drain();
  std::vector<KvTier> tiers;
  EXPECT_EQ(rig.engine->CountHeld(ids, &tiers), 6);
  EXPECT_EQ(tiers, (std::vector<KvTier>{KvTier::kDisk, KvTier::kDisk, KvTier::kDisk, KvTier::kDisk,
                                        KvTier::kHost, KvTier::kHost}));
  std::vector<ContentId> with_a_gap = {ids[4], Ids(900, 1)[0], ids[5]};
  tiers.clear();
  EXPECT_EQ(rig.engine->CountHeld(with_a_gap, &tiers), 1);
  EXPECT_EQ(tiers, std::vector<KvTier>{KvTier::kHost});
  EXPECT_EQ(rig.engine->CountHeld(ids), 6);  // without tiers
}

TEST(DevicePoolsTest, OnboardLongerThanAStagingAreaGoesInChunks) {
  EngineRig::Options o;
  o.pool_blocks = 24;
  o.staging_blocks = 3;
  EngineRig rig(o);
  EXPECT_EQ(rig.engine->staging()->capacity(), 3);
  const std::vector<ContentId> ids = Ids(200, 10);
  for (std::size_t i = 0; i < ids.size(); ++i) rig.Evict(static_cast<std::int64_t>(i), ids[i]);
  const std::int64_t launches = rig.device.stats().launches;
  const OnboardResult r = rig.engine->Onboard(ids, Blocks(12, 10));
  EXPECT_EQ(r.restored, 10) << r.stop_reason;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(SyntheticBlockMatches(rig.pool.alias, 12 + static_cast<std::int64_t>(i), ids[i]))
        << i;
  }
  EXPECT_EQ(rig.device.stats().launches - launches, 4);  // 3 + 3 + 3 + 1
  EXPECT_EQ(rig.device.stats().to_device_pairs, 10);
}

TEST(DevicePoolsTest, ReadBlockStagesOneBlockAndHoldsItsAreaUntilReleased) {
  EngineRig rig(EngineRig::Options{});
  const ContentId a = IdFor(1), b = IdFor(2);
  FillSyntheticBlock(rig.pool.alias, 5, a);
  FillSyntheticBlock(rig.pool.alias, 6, b);
  DeviceStaging& staging = *rig.engine->staging();
  EXPECT_EQ(staging.num_areas(), 2);  // copy_threads 0 + 2
  {
    auto x = rig.engine->ReadBlock(0, 5);
    auto y = rig.engine->ReadBlock(0, 6);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_TRUE(x->staged());
    EXPECT_NE(x->view().base[0], rig.pool.device.base[0]);
    EXPECT_TRUE(SyntheticBlockMatches(x->view(), x->block(), a));
    EXPECT_TRUE(SyntheticBlockMatches(y->view(), y->block(), b));
    EXPECT_EQ(staging.free_areas(), 0);
  }
  EXPECT_EQ(staging.free_areas(), 2);
  EXPECT_EQ(rig.engine->ReadBlock(0, 16).status().code(), StatusCode::kInvalidArgument);
  for (const FailAt at : {FailAt::kLaunch, FailAt::kSynchronize}) {
    rig.device.FailNextCopies(1, at);
    EXPECT_EQ(rig.engine->ReadBlock(0, 5).status().code(), StatusCode::kCudaError);
    EXPECT_EQ(staging.free_areas(), 2);
  }
  EXPECT_EQ(rig.device.stats().to_device_pairs, 0);
}

TEST(DevicePoolsTest, CopyPoolBlocksRunsOnThePoolsDevice) {
  EngineRig rig(EngineRig::Options{});
  const ContentId a = IdFor(3);
  FillSyntheticBlock(rig.pool.alias, 1, a);
  const BlockCopyPair pair{1, 2};
  BlockCopyArgs args;
  args.src = args.dst = rig.pool.device;
  args.pairs = &pair;
  args.num_pairs = 1;
  ASSERT_TRUE(rig.engine->CopyPoolBlocks(args).ok());
  EXPECT_TRUE(SyntheticBlockMatches(rig.pool.alias, 2, a));
  EXPECT_EQ(rig.device.stats().device_to_device_pairs, 1);
  // Views of no pool of the engine.
  store_test::TestPool other(SmallLayout(), 4, 1.0f);
  args.src = args.dst = other.view();
  EXPECT_EQ(rig.engine->CopyPoolBlocks(args).code(), StatusCode::kInvalidArgument);
}

// WriteBlock with a part (a layer range, as a streamed handoff writes it): fill writes that part of
// a staging block and only it reaches the device block; the block's other layers keep their bytes.
// A cut outside its block is refused and writes nothing.
TEST(DevicePoolsTest, WriteBlockWithAPartWritesOnlyThoseLayers) {
  EngineRig rig(EngineRig::Options{});
  const KvPoolLayout layout = SmallLayout();
  auto codec = LayerRangeCodec::Create(layout, 1.0f);
  ASSERT_TRUE(codec.ok()) << codec.status();
  ASSERT_GE(codec->num_layers(), 2);
  const LayerSpan range{1, codec->num_layers()};
  const ContentId a = IdFor(4);
  FillSyntheticBlock(rig.pool.alias, 3, a);
  // The expected block: the same content in host memory, the part overwritten there.
  store_test::TestPool expect(layout, 4, 1.0f);
  FillSyntheticBlock(expect.view(), 3, a);
  const auto fill = [&](const KvPoolView& v, std::int64_t b) {
    const KvPoolView part = codec->BlockView(v, b, range);
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& t = part.layout.components[c];
      if (t.present()) std::memset(part.base[c], 0xA5, static_cast<std::size_t>(t.BytesPerBlock()));
    }
    return Status::Ok();
  };
  const auto part_of = [&](const KvPoolView& v, std::int64_t b) {
    return codec->BlockView(v, b, range);
  };
  ASSERT_TRUE(fill(expect.view(), 3).ok());
  const std::int64_t to_device = rig.device.stats().to_device_pairs;
  ASSERT_TRUE(rig.engine->WriteBlock(0, 3, fill, part_of).ok());
  EXPECT_EQ(rig.device.stats().to_device_pairs, to_device + 1);
  const std::vector<std::byte> want = expect.Snapshot(3);
  const std::vector<std::uint8_t> got = rig.Bytes(3);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
  EXPECT_FALSE(SyntheticBlockMatches(rig.pool.alias, 3, a));  // the part did change
  // A cut of the next block: refused, the device block untouched.
  const std::vector<std::uint8_t> before = rig.Bytes(4);
  const auto outside = [&](const KvPoolView& v, std::int64_t b) {
    return codec->BlockView(v, b + 1, range);
  };
  EXPECT_EQ(rig.engine->WriteBlock(0, 3, fill, outside).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.Bytes(4), before);
}

TEST(DevicePoolsTest, CorruptTierCopyIsNeverCopiedToTheDevice) {
  EngineRig rig(EngineRig::Options{});
  const std::vector<ContentId> ids = Ids(300, 3);
  for (std::size_t i = 0; i < ids.size(); ++i) rig.Evict(static_cast<std::int64_t>(i), ids[i]);
  std::span<std::byte> slot = rig.engine->host()->SlotBytesForTesting(kPool, ids[1]);
  ASSERT_FALSE(slot.empty());
  slot[slot.size() / 2] ^= std::byte{0x10};
  const ContentId sentinel = IdFor(999);
  for (std::int64_t b = 8; b < 11; ++b) FillSyntheticBlock(rig.pool.alias, b, sentinel);
  const OnboardResult r = rig.engine->Onboard(ids, Blocks(8, 3));
  EXPECT_EQ(r.restored, 1);
  EXPECT_EQ(r.stop_reason.code(), StatusCode::kCorruption);
  EXPECT_TRUE(SyntheticBlockMatches(rig.pool.alias, 8, ids[0]));
  // Neither the corrupt block nor the one after it (not published) was written.
  EXPECT_TRUE(SyntheticBlockMatches(rig.pool.alias, 9, sentinel));
  EXPECT_TRUE(SyntheticBlockMatches(rig.pool.alias, 10, sentinel));
  EXPECT_EQ(rig.device.stats().to_device_pairs, 1);
  const OffloadStats s = rig.engine->stats();
  EXPECT_EQ(s.onboard_corrupt, 1);
  EXPECT_EQ(s.host.corrupt, 1);
  EXPECT_FALSE(rig.engine->host()->Contains(kPool, ids[1]));
}

TEST(DevicePoolsTest, FailedOffloadCopyPutsNothing) {
  for (const FailAt at : {FailAt::kLaunch, FailAt::kSynchronize}) {
    EngineRig rig(EngineRig::Options{});
    rig.device.FailNextCopies(1, at);
    rig.Evict(0, IdFor(1));
    rig.Evict(1, IdFor(2));
    const OffloadStats s = rig.engine->stats();
    EXPECT_EQ(s.offload_failed, 1);
    EXPECT_EQ(s.offload.blocks, 1);
    EXPECT_FALSE(rig.engine->host()->Contains(kPool, IdFor(1)));
    EXPECT_TRUE(rig.engine->host()->Contains(kPool, IdFor(2)));
    EXPECT_EQ(rig.engine->staging()->free_areas(), rig.engine->staging()->num_areas());
  }
}

TEST(DevicePoolsTest, FailedOnboardCopyFailsItsBlocksAndWritesNothing) {
  for (const FailAt at : {FailAt::kLaunch, FailAt::kSynchronize}) {
    EngineRig rig(EngineRig::Options{});
    const std::vector<ContentId> ids = Ids(400, 3);
    for (std::size_t i = 0; i < ids.size(); ++i) rig.Evict(static_cast<std::int64_t>(i), ids[i]);
    const std::vector<std::uint8_t> before = rig.Bytes(8);
    rig.device.FailNextCopies(1, at);
    OnboardResult r = rig.engine->Onboard(ids, Blocks(8, 3));
    EXPECT_EQ(r.restored, 0);
    EXPECT_EQ(r.stop_reason.code(), StatusCode::kCudaError);
    EXPECT_EQ(rig.engine->stats().onboard_failed, 3);
    EXPECT_EQ(rig.Bytes(8), before);
    // The tiers still hold the blocks: the next onboard restores them.
    r = rig.engine->Onboard(ids, Blocks(8, 3));
    EXPECT_EQ(r.restored, 3) << r.stop_reason;
    EXPECT_TRUE(SyntheticBlockMatches(rig.pool.alias, 10, ids[2]));
  }
}

TEST(DevicePoolsTest, PoolsOnTwoDevicesGetOneBackendEach) {
  EmulatedDevice device;
  const KvPoolLayout a = SmallLayout();
  const KvPoolLayout b = LayoutOf(store_test::TierShapes()[2].geometry);  // nvfp4 HND
  const EmulatedDevice::Pool pa = device.AllocatePool(a, 8, 1.0f, /*ordinal=*/0).value();
  const EmulatedDevice::Pool pb = device.AllocatePool(b, 8, 2.5f, /*ordinal=*/1).value();
  OffloadEngineOptions e;
  e.pools = {pa.device, pb.device};
  e.host_capacity_bytes = 4 << 20;
  e.host_memory = HostMemoryKind::kAligned;
  e.host_prefault = false;
  e.copy_threads = 2;
  e.device_pools = store_test::EmulatedDevicePools(device, {0, 1}, 0);
  auto made = OffloadEngine::Create(e);
  ASSERT_TRUE(made.ok()) << made.status();
  OffloadEngine& engine = **made;
  EXPECT_EQ(engine.staging()->num_backends(), 2);
  EXPECT_EQ(engine.staging()->num_areas(), 4);
  EXPECT_EQ(device.stats().backends_made, 2);
  const std::vector<ContentId> ids = Ids(500, 3);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    FillSyntheticBlock(pa.alias, static_cast<std::int64_t>(i), ids[i]);
    FillSyntheticBlock(pb.alias, static_cast<std::int64_t>(i), ids[i]);
    for (int p = 0; p < 2; ++p) {
      EvictedBlock v;
      v.pool = PoolId{p};
      v.block = BlockId{static_cast<std::int32_t>(i)};
      v.content_id = ids[i];
      v.priority = kTierDefaultPriority;
      engine.OnEvict(v);
    }
  }
  EXPECT_EQ(engine.CountHeld(ids), 3);
  std::vector<BlockId> dst;
  for (std::int32_t i = 0; i < 3; ++i) {
    dst.push_back(BlockId{4 + i});  // pool 0
    dst.push_back(BlockId{5 + i});  // pool 1
  }
  const OnboardResult r = engine.Onboard(ids, dst);
  EXPECT_EQ(r.restored, 3) << r.stop_reason;
  for (std::int64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(SyntheticBlockMatches(pa.alias, 4 + i, ids[static_cast<std::size_t>(i)]));
    EXPECT_TRUE(SyntheticBlockMatches(pb.alias, 5 + i, ids[static_cast<std::size_t>(i)]));
  }
  // (A backend given the other device's address answers kInvalidArgument: none was.)
  EXPECT_EQ(engine.stats().offload_failed, 0);
  EXPECT_EQ(device.stats().overlapping_calls, 0);
}

}  // namespace
}  // namespace kvmesh
