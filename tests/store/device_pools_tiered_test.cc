// TieredCache over a pool in emulated device memory (tests/store/device_rig.h; PROT_NONE pool
// addresses, so a host access to them is a SIGSEGV): victims offloaded on the deferred path (copy
// threads) and the synchronous one (0), on into RocksDB, admitted back with the device blocks'
// bytes; a corrupt host copy is a miss and writes no device block; copy-on-partial-reuse runs on
// the device through env.block_copy; a failed staging copy on the deferred path completes its
// ticket and puts nothing; a prompt of more blocks than a staging area holds, offloaded, restored
// and prefetched in chunks.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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

constexpr TierPoolId kPool{0};
constexpr int kT = 16;  // tokens per block of Small()

RigOptions Small(std::int64_t pool_blocks, std::int64_t host_blocks, int copy_threads) {
  RigOptions o;
  o.layout = LayoutOf(store_test::TierShapes()[0].geometry);  // bf16 HND, 16 tokens, 16 KiB
  o.pool_blocks = pool_blocks;
  o.host_blocks = host_blocks;
  o.copy_threads = copy_threads;
  return o;
}

// Every byte of every block of the pool (through the alias).
std::vector<std::uint8_t> PoolBytes(const KvPoolView& alias) {
  const auto* p = static_cast<const std::uint8_t*>(alias.base[0]);
  return {p, p + alias.num_blocks * alias.layout.data().BytesPerBlock()};
}

class DevicePoolsTieredTest : public ::testing::TestWithParam<int> {};

TEST_P(DevicePoolsTieredTest, VictimsGoToHostAndRocksDbAndComeBackWithTheirBytes) {
  TempDir dir;
  RigOptions o = Small(2, 2, GetParam());
  o.disk_path = dir.path();
  o.disk_blocks = 16;
  DeviceRig rig(o);
  // Drained after each prompt: with two copy threads the offloads of two victims may finish in
  // either order, and the host tier's recency (which of 4 and 5 a later put spills) with them.
  for (int d = 0; d < 8; ++d) {
    rig.Run(d + 1, Doc(kT, d), WholeBlocks());
    rig.engine().Drain();
  }
  // Pool: 6, 7. Host: 4, 5 (4 least recent). Disk: 0..3.
  OffloadStats s = rig.engine().stats();
  EXPECT_EQ(s.offload.blocks, 6);
  EXPECT_EQ(s.offload_failed, 0);
  EXPECT_EQ(s.spill.blocks, 4);
  EXPECT_EQ(rig.device().stats().to_host_pairs, 6);
  // The disk's copy of doc 0 holds what its device block held.
  const ContentId id0 = rig.Ids(Doc(kT, 0), WholeBlocks())[0];
  store_test::TestPool check(rig.alias().layout, 1, 1.0f);
  ASSERT_TRUE(rig.engine().disk()->Get(kPool, id0, check.view(), 0).ok());
  EXPECT_TRUE(SyntheticBlockMatches(check.view(), 0, id0));
  // Doc 5 from the host tier, doc 0 from disk, into device blocks.
  for (const int d : {5, 0}) {
    const auto prompt = Doc(kT, d);
    auto r = rig.cache().AddSequence(RequestId{100u + d}, prompt, WholeBlocks());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reused_blocks, 1) << d;
    EXPECT_TRUE(rig.ReusedBytesMatch(prompt, WholeBlocks(), *r)) << d;
    ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{100u + d}).ok());
  }
  const TieredCacheStats t = rig.cache().stats();
  EXPECT_EQ(t.disk_hit_blocks, 1);
  EXPECT_EQ(t.host_hit_blocks, 1);
  const EmulatedDeviceStats d = rig.device().stats();
  EXPECT_EQ(d.to_device_pairs, 2);
  EXPECT_EQ(d.overlapping_calls, 0);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

TEST_P(DevicePoolsTieredTest, CorruptHostCopyIsAMissAndWritesNoDeviceBlock) {
  DeviceRig rig(Small(2, 8, GetParam()));
  const auto a = Doc(kT, 1);
  rig.Run(1, a, WholeBlocks());
  rig.Run(2, Doc(kT, 2), WholeBlocks());
  rig.Run(3, Doc(kT, 3), WholeBlocks());
  rig.engine().Drain();
  const ContentId id = rig.Ids(a, WholeBlocks())[0];
  std::span<std::byte> slot = rig.engine().host()->SlotBytesForTesting(kPool, id);
  ASSERT_FALSE(slot.empty());
  slot[slot.size() / 2] ^= std::byte{0x10};
  const std::vector<std::uint8_t> before = PoolBytes(rig.alias());
  const std::int64_t to_device = rig.device().stats().to_device_pairs;
  auto r = rig.cache().AddSequence(RequestId{4}, a, WholeBlocks());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reused_blocks, 0);
  EXPECT_EQ(rig.device().stats().to_device_pairs, to_device);
  EXPECT_EQ(PoolBytes(rig.alias()), before);  // the reserved destination was not written
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.offload.onboard_corrupt, 1);
  EXPECT_EQ(s.host_hit_blocks, 0);
  EXPECT_FALSE(rig.engine().host()->Contains(kPool, id));
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{4}).ok());
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

TEST_P(DevicePoolsTieredTest, CopyOnPartialReuseRunsOnTheDevice) {
  DeviceRig rig(Small(8, 8, GetParam()));
  // Request 1 holds two blocks of doc 7 (in use: a partial match of its second block is copied).
  const auto full = Doc(2 * kT, 7);
  auto r1 = rig.cache().AddSequence(RequestId{1}, full, WholeBlocks());
  ASSERT_TRUE(r1.ok());
  const auto ids = rig.Ids(full, WholeBlocks());
  for (std::size_t i = 0; i < 2; ++i) {
    FillSyntheticBlock(rig.alias(), r1->tables[0].block_ids[i], ids[i]);
  }
  ASSERT_TRUE(rig.manager().StoreFullBlocks(RequestId{1}).ok());
  // Request 2: the first block and 6 tokens of the second, then its own.
  std::vector<Token> prompt(full.begin(), full.begin() + kT + 6);
  prompt.push_back(999);
  prompt.push_back(998);
  auto r2 = rig.cache().AddSequence(RequestId{2}, prompt, {});
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->partial, PartialReuse::kCopied);
  EXPECT_EQ(r2->partial_tokens, 6);
  EXPECT_EQ(r2->reused_tokens, kT + 6);
  EXPECT_EQ(rig.device().stats().device_to_device_pairs, 1);
  // Tokens [0, 6) of every layer, kv and head are the source block's.
  const std::int64_t src = r1->tables[0].block_ids[1];
  const std::int64_t dst = r2->tables[0].block_ids[1];
  ASSERT_NE(src, dst);
  const PagedTensorLayout& t = rig.alias().layout.data();
  const auto* base = static_cast<const std::uint8_t*>(rig.alias().base[0]);
  for (int l = 0; l < t.num_layers; ++l) {
    for (int kv = 0; kv < t.kv_factor; ++kv) {
      for (int h = 0; h < t.num_heads; ++h) {
        for (int tok = 0; tok < 6; ++tok) {
          EXPECT_EQ(std::memcmp(base + t.ByteOffset(dst, l, kv, h, tok, 0),
                                base + t.ByteOffset(src, l, kv, h, tok, 0),
                                static_cast<std::size_t>(t.RowBytes())),
                    0)
              << l << " " << kv << " " << h << " " << tok;
        }
      }
    }
  }
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{1}).ok());
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{2}).ok());
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

TEST_P(DevicePoolsTieredTest, PromptLongerThanAStagingAreaIsStagedInChunks) {
  DeviceRig rig(Small(10, 32, GetParam()), /*staging_blocks=*/3);
  EXPECT_EQ(rig.engine().staging()->capacity(), 3);
  const auto p = Doc(10 * kT, 7);
  const auto q = Doc(10 * kT, 8);
  rig.Run(1, p, WholeBlocks());
  rig.Run(2, q, WholeBlocks());  // evicts p's 10 blocks (in batches of up to 32)
  rig.engine().Drain();
  EXPECT_EQ(rig.engine().stats().offload.blocks, 10);
  // Prefetch: restored in chunks (on the workers), published by the publisher thread; q's blocks
  // go to the host tier to make room.
  ASSERT_EQ(*rig.cache().Prefetch(p, WholeBlocks()), 10);
  rig.cache().WaitForPrefetches();
  auto r = rig.cache().AddSequence(RequestId{3}, p, WholeBlocks());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reused_blocks, 10);
  EXPECT_TRUE(rig.ReusedBytesMatch(p, WholeBlocks(), *r));
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{3}).ok());
  // And q by admission.
  auto rq = rig.cache().AddSequence(RequestId{4}, q, WholeBlocks());
  ASSERT_TRUE(rq.ok()) << rq.status();
  EXPECT_EQ(rq->reused_blocks, 10);
  EXPECT_TRUE(rig.ReusedBytesMatch(q, WholeBlocks(), *rq));
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{4}).ok());
  rig.engine().Drain();
  EXPECT_EQ(rig.cache().stats().host_hit_blocks, 20);
  const EmulatedDeviceStats d = rig.device().stats();
  EXPECT_EQ(d.to_host_pairs, 20);  // p, q; p evicted again is clean (the host tier holds it)
  EXPECT_EQ(rig.engine().stats().skipped_clean, 10);
  EXPECT_EQ(d.to_device_pairs, 20);
  EXPECT_GE(d.launches, 2 * 4 + 1);  // two restores of 10 in chunks of 3, and the offloads
  EXPECT_EQ(d.overlapping_calls, 0);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

INSTANTIATE_TEST_SUITE_P(CopyThreads, DevicePoolsTieredTest, ::testing::Values(0, 2));

TEST(DevicePoolsTieredTest, FailedDeferredOffloadCopyCompletesTheTicketAndPutsNothing) {
  // Copies on the workers (deferred), each allocation waiting for its victim: an exact order.
  DeviceRig rig(Small(2, 8, /*copy_threads=*/2));
  const auto a = Doc(kT, 1);
  rig.Run(1, a, WholeBlocks());
  rig.Run(2, Doc(kT, 2), WholeBlocks());
  rig.device().FailNextCopies(1, EmulatedDevice::FailAt::kSynchronize);
  rig.Run(3, Doc(kT, 3), WholeBlocks());  // evicts a: its staging copy fails
  rig.Run(4, Doc(kT, 4), WholeBlocks());  // evicts doc 2: copied
  rig.engine().Drain();
  const OffloadStats s = rig.engine().stats();
  EXPECT_EQ(s.offload_failed, 1);
  EXPECT_EQ(s.offload.blocks, 1);
  EXPECT_FALSE(rig.engine().host()->Contains(kPool, rig.Ids(a, WholeBlocks())[0]));
  EXPECT_TRUE(rig.engine().host()->Contains(kPool, rig.Ids(Doc(kT, 2), WholeBlocks())[0]));
  EXPECT_EQ(rig.manager().GetStats().pools[0].moving_out_blocks, 0);
  // a is recomputed; the pool works on.
  const AddSequenceResult r = rig.Run(5, a, WholeBlocks());
  EXPECT_EQ(r.reused_blocks, 0);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

TEST(DevicePoolsTieredTest, AGivenBlockCopyIsKept) {
  // A caller's own env.block_copy is not replaced by the engine's.
  EmulatedDevice device;
  const KvPoolLayout layout = LayoutOf(store_test::TierShapes()[0].geometry);
  const auto pool = device.AllocatePool(layout, 4, 1.0f).value();
  int calls = 0;
  TieredCacheOptions t;
  t.manager.tokens_per_block = layout.tokens_per_block();
  t.manager.pools.push_back(BlockPoolConfig{"pool", 4, 0});
  t.manager.key_namespace.model_id = "tiered-test";
  t.env.pool_memory = {pool.device};
  t.env.block_copy = [&](const BlockCopyArgs&) {
    ++calls;
    return Status::CudaError("the caller's copy");
  };
  t.offload.host_capacity_bytes = 1 << 20;
  t.offload.host_memory = HostMemoryKind::kAligned;
  t.offload.copy_threads = 0;
  t.offload.device_pools = store_test::EmulatedDevicePools(device, {0}, 0);
  auto cache = TieredCache::Create(std::move(t));
  ASSERT_TRUE(cache.ok()) << cache.status();
  const auto full = Doc(2 * kT, 7);
  ASSERT_TRUE((*cache)->AddSequence(RequestId{1}, full, WholeBlocks()).ok());
  ASSERT_TRUE((*cache)->manager().StoreFullBlocks(RequestId{1}).ok());
  std::vector<Token> prompt(full.begin(), full.begin() + kT + 6);
  prompt.push_back(999);
  auto r2 = (*cache)->AddSequence(RequestId{2}, prompt, {});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r2->partial, PartialReuse::kNone);  // the copy failed: recomputed
  EXPECT_EQ(device.stats().device_to_device_pairs, 0);
  ASSERT_TRUE((*cache)->manager().RemoveSequence(RequestId{1}).ok());
  ASSERT_TRUE((*cache)->manager().RemoveSequence(RequestId{2}).ok());
}

}  // namespace
}  // namespace kvmesh
