// TieredCache: offload at or above the priority threshold only, inclusive tiers (a clean block is
// not copied again), onboard counted as reuse with identical bytes, a run stopping at the first
// missing block, corruption in a tier (a miss plus a counter; the sequence recomputes), prefetch,
// capacity limits of both tiers, a disk-only tier, a warm restart (a new manager and pool over
// the same RocksDB directory), two pools of different layouts, the host tier's eviction policy
// set through the offload engine, and blocks a remote fetch published counted as remote hits.
#include "store/tiered_cache.h"

#include <gtest/gtest.h>

#include "tests/store/rocksdb_test_util.h"
#include "tests/store/store_test_util.h"
#include "tests/store/tiered_test_util.h"

namespace kvmesh {
namespace {

using store_test::Doc;
using store_test::LayoutOf;
using store_test::Rig;
using store_test::RigOptions;
using store_test::TempDir;
using store_test::WholeBlocks;

constexpr TierPoolId kPool{0};

RigOptions Small(std::int64_t pool_blocks, std::int64_t host_blocks) {
  RigOptions o;
  o.layout = LayoutOf(store_test::TierShapes()[0].geometry);  // bf16 HND, 16 tokens, 16 KiB
  o.pool_blocks = pool_blocks;
  o.host_blocks = host_blocks;
  return o;
}

constexpr int kT = 16;  // tokens per block of Small()

// Stores `p` (request 1), then four one-block documents (requests 10..13) that push it out of a
// pool of 4 blocks into the host tier, and waits for the copies.
void StoreAndPushToTheHostTier(Rig& rig, const std::vector<Token>& p, const SequenceOptions& o) {
  rig.Run(1, p, o);
  for (int d = 0; d < 4; ++d) rig.Run(10 + d, Doc(kT, 20 + d), WholeBlocks());
  rig.engine().Drain();
}

TEST(TieredCacheTest, OffloadsVictimsAtOrAboveTheThresholdOnly) {
  Rig rig(Small(2, 8));
  const auto a = Doc(kT, 1), b = Doc(kT, 2);
  rig.Run(1, a, WholeBlocks());    // priority 35: offloaded when evicted
  rig.Run(2, b, WholeBlocks(10));  // priority 10: dropped
  rig.Run(3, Doc(kT, 3), WholeBlocks());
  rig.Run(4, Doc(kT, 4), WholeBlocks());
  rig.engine().Drain();
  EXPECT_TRUE(rig.engine().host()->Contains(kPool, rig.Ids(a, WholeBlocks())[0]));
  EXPECT_FALSE(rig.engine().host()->Contains(kPool, rig.Ids(b, WholeBlocks())[0]));
  OffloadStats s = rig.engine().stats();
  EXPECT_EQ(s.skipped_priority, 1);
  EXPECT_EQ(s.offload.blocks, 1);
  EXPECT_EQ(s.offload.bytes, rig.view().layout.BytesPerBlock());
  EXPECT_GT(s.offload.copy_s, 0);
  EXPECT_EQ(rig.manager().GetStats().pools[0].moved_out_blocks, 1u);
  // A comes back from the host tier, B is recomputed.
  auto ra = rig.cache().AddSequence(RequestId{5}, a, WholeBlocks());
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->reused_tokens, kT);
  EXPECT_TRUE(rig.ReusedBytesMatch(a, WholeBlocks(), *ra));
  auto rb = rig.cache().AddSequence(RequestId{6}, b, WholeBlocks());
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->reused_tokens, 0);
  const TieredCacheStats t = rig.cache().stats();
  EXPECT_EQ(t.host_hit_blocks, 1);
  EXPECT_EQ(t.missed_blocks, 5);  // 4 first runs + B
  EXPECT_EQ(t.input_blocks, 6);
  EXPECT_EQ(t.offload.onboard_host.blocks, 1);
  EXPECT_EQ(t.offload.onboard_host.bytes, rig.view().layout.BytesPerBlock());
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{5}).ok());
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{6}).ok());
}

// An admission that must wait for victims to move out copies queued victims itself
// (OffloadEngine::HelpMoveOut) rather than sleeping until the copy worker gets to them: on host
// pools and on (emulated) device pools, whose help stages the copies like a worker. Every block
// copied either way comes back from the host tier with its bytes.
class HelpingTest : public ::testing::TestWithParam<bool> {};

TEST_P(HelpingTest, WaitingAdmissionsCopyQueuedVictimsAndEveryBlockComesBack) {
  RigOptions o = Small(8, 512);
  o.max_moving_out = 4;  // an admission of 8 blocks into a full pool must wait for victims
  o.emulated_device = GetParam();
  Rig rig(o);
  constexpr int kDocs = 40;
  for (int d = 1; d <= kDocs; ++d)
    rig.Run(static_cast<std::uint64_t>(d), Doc(8 * kT, d), WholeBlocks());
  rig.engine().Drain();
  const OffloadStats s = rig.engine().stats();
  EXPECT_GT(s.offload_helped, 0) << "no waiting admission helped";
  EXPECT_LE(s.offload_helped, s.offload.blocks);
  EXPECT_EQ(s.offload_failed, 0);
  EXPECT_EQ(s.offload.blocks, (kDocs - 1) * 8);  // every evicted block copied once
  for (int d = 1; d < kDocs; ++d) {
    const auto prompt = Doc(8 * kT, d);
    auto r = rig.cache().AddSequence(RequestId{1000 + static_cast<std::uint64_t>(d)}, prompt,
                                     WholeBlocks());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->reused_blocks, 8) << d;
    EXPECT_TRUE(rig.ReusedBytesMatch(prompt, WholeBlocks(), *r)) << d;
    ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{1000 + static_cast<std::uint64_t>(d)}).ok());
  }
  EXPECT_EQ(rig.cache().stats().offload.onboard_corrupt, 0);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

INSTANTIATE_TEST_SUITE_P(HostAndDevicePools, HelpingTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Device" : "Host"; });

TEST(TieredCacheTest, InclusiveTiersDoNotCopyACleanBlockAgain) {
  Rig rig(Small(2, 8));
  const auto a = Doc(kT, 1);
  rig.Run(1, a, WholeBlocks());
  rig.Run(2, Doc(kT, 2), WholeBlocks());
  rig.Run(3, Doc(kT, 3), WholeBlocks());  // A → host (put 1)
  rig.engine().Drain();
  const AddSequenceResult again = rig.Run(4, a, WholeBlocks());  // restored; B → host (put 2)
  EXPECT_EQ(again.reused_blocks, 1);
  rig.Run(5, Doc(kT, 4), WholeBlocks());  // C → host (put 3)
  rig.Run(6, Doc(kT, 5), WholeBlocks());  // A evicted again: clean, not copied
  rig.engine().Drain();
  const OffloadStats s = rig.engine().stats();
  EXPECT_EQ(s.skipped_clean, 1);
  EXPECT_EQ(s.offload.blocks, 3);
  EXPECT_EQ(s.host.puts, 3);
  EXPECT_EQ(s.host.put_present, 0);
}

TEST(TieredCacheTest, OnboardedBlocksCountAsReusedWithIdenticalBytes) {
  Rig rig(Small(4, 16));
  const auto p = Doc(3 * kT + 1, 7);  // 3 reusable full blocks and a partial one
  StoreAndPushToTheHostTier(rig, p, {});
  EXPECT_EQ(rig.manager().LookupPrefix(p)->cached_tokens, 0);
  auto r = rig.cache().AddSequence(RequestId{2}, p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reused_tokens, 3 * kT);
  EXPECT_EQ(r->reused_blocks, 3);
  EXPECT_TRUE(rig.ReusedBytesMatch(p, {}, *r));
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.host_hit_blocks, 3);
  EXPECT_EQ(rig.manager().GetStats().pools[0].restored_blocks, 3u);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{2}).ok());
}

// Blocks a remote fetch published (MarkRemote) count as remote hits of the admission that reuses
// them, in the same count as the pool's (the node's status and metrics read it: a pool counter
// that blocks later moved out of would run backwards), and only once.
TEST(TieredCacheTest, MarkedBlocksCountAsRemoteHitsOnce) {
  Rig rig(Small(8, 0));
  const auto p = Doc(3 * kT + 1, 9);  // 3 reusable full blocks and a partial one
  rig.Run(1, p, {});
  const std::vector<ContentId> ids = rig.Ids(p, {});
  ASSERT_EQ(ids.size(), 3u);
  rig.cache().MarkRemote(std::span<const ContentId>(ids).first(2));
  AdmissionHits hits;
  auto r = rig.cache().AddSequence(RequestId{2}, p, {}, &hits);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reused_blocks, 3);
  EXPECT_EQ(hits.remote_blocks, 2);
  EXPECT_EQ(hits.pool_blocks, 1);
  TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.remote_hit_blocks, 2);
  EXPECT_EQ(s.pool_hit_blocks, 1);
  EXPECT_EQ(s.hit_blocks() + s.missed_blocks, s.input_blocks);
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{2}).ok());
  AdmissionHits again;
  ASSERT_TRUE(rig.cache().AddSequence(RequestId{3}, p, {}, &again).ok());
  EXPECT_EQ(again.remote_blocks, 0);
  EXPECT_EQ(again.pool_blocks, 3);
  s = rig.cache().stats();
  EXPECT_EQ(s.remote_hit_blocks, 2);
  EXPECT_EQ(s.pool_hit_blocks, 4);
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{3}).ok());
}

TEST(TieredCacheTest, RestoreStopsAtTheFirstBlockNoTierHolds) {
  Rig rig(Small(4, 16));
  const auto p = Doc(3 * kT, 7);
  StoreAndPushToTheHostTier(rig, p, WholeBlocks());
  const auto ids = rig.Ids(p, WholeBlocks());
  ASSERT_TRUE(rig.engine().host()->Erase(kPool, ids[1]).ok());
  const AddSequenceResult r = rig.Run(2, p, WholeBlocks());
  EXPECT_EQ(r.reused_blocks, 1);
  EXPECT_EQ(rig.cache().stats().host_hit_blocks, 1);
  EXPECT_EQ(rig.cache().stats().missed_blocks, 3 + 4 + 2);
}

TEST(TieredCacheTest, CorruptBlockInATierIsAMissAndCountedAndTheSequenceRecomputes) {
  Rig rig(Small(2, 8));
  const auto a = Doc(kT, 1);
  rig.Run(1, a, WholeBlocks());
  rig.Run(2, Doc(kT, 2), WholeBlocks());
  rig.Run(3, Doc(kT, 3), WholeBlocks());
  rig.engine().Drain();
  const ContentId id = rig.Ids(a, WholeBlocks())[0];
  std::span<std::byte> slot = rig.engine().host()->SlotBytesForTesting(kPool, id);
  ASSERT_FALSE(slot.empty());
  slot[slot.size() / 2] ^= std::byte{0x10};  // a payload byte
  const AddSequenceResult r = rig.Run(4, a, WholeBlocks());
  EXPECT_EQ(r.reused_blocks, 0);
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.offload.onboard_corrupt, 1);
  EXPECT_EQ(s.offload.host.corrupt, 1);
  EXPECT_EQ(s.host_hit_blocks, 0);
  EXPECT_FALSE(rig.engine().host()->Contains(kPool, id));
  // The recomputed block is cached again, with the right bytes.
  auto again = rig.cache().AddSequence(RequestId{5}, a, WholeBlocks());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reused_blocks, 1);
  EXPECT_TRUE(rig.ReusedBytesMatch(a, WholeBlocks(), *again));
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{5}).ok());
}

TEST(TieredCacheTest, PrefetchRestoresBeforeAdmission) {
  Rig rig(Small(4, 16));
  const auto p = Doc(2 * kT, 7);
  EXPECT_EQ(*rig.cache().Prefetch(p, WholeBlocks()), 0);  // nothing in the tiers
  StoreAndPushToTheHostTier(rig, p, WholeBlocks());
  EXPECT_EQ(*rig.cache().Prefetch(p, WholeBlocks()), 2);
  rig.cache().WaitForPrefetches();
  EXPECT_EQ(rig.manager().LookupPrefix(p, WholeBlocks())->cached_tokens, 2 * kT);
  auto r = rig.cache().AddSequence(RequestId{2}, p, WholeBlocks());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_blocks, 2);
  EXPECT_TRUE(rig.ReusedBytesMatch(p, WholeBlocks(), *r));
  TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.prefetches, 1);
  EXPECT_EQ(s.prefetched_blocks, 2);
  EXPECT_EQ(s.host_hit_blocks, 2);  // counted by the tier they were prefetched from
  EXPECT_EQ(s.pool_hit_blocks, 0);
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{2}).ok());
  // A prefetch followed at once by the admission: the admission waits for it or finds its blocks.
  const auto q = Doc(2 * kT, 8);
  rig.Run(3, q, WholeBlocks());
  for (int d = 0; d < 4; ++d) rig.Run(20 + d, Doc(kT, 40 + d), WholeBlocks());
  rig.engine().Drain();
  ASSERT_EQ(*rig.cache().Prefetch(q, WholeBlocks()), 2);
  auto rq = rig.cache().AddSequence(RequestId{4}, q, WholeBlocks());
  ASSERT_TRUE(rq.ok());
  EXPECT_EQ(rq->reused_blocks, 2);
  EXPECT_TRUE(rig.ReusedBytesMatch(q, WholeBlocks(), *rq));
  s = rig.cache().stats();
  EXPECT_EQ(s.host_hit_blocks, 4);
  EXPECT_EQ(s.restore_duplicates, 0);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{4}).ok());
}

// A prefetch that publishes while the admission right after it is planning: the plan, made before
// the publication, shows the blocks in no pool, and the prefetch is no longer in flight to be
// waited for. The admission plans again rather than restoring the blocks a second time (seen once
// in CI, under ASan; here the prefetch is made to finish in that window).
TEST(TieredCacheTest, APrefetchPublishedWhileTheAdmissionPlansIsNotRestoredAgain) {
  Rig rig(Small(4, 16));
  const auto p = Doc(2 * kT, 7);
  StoreAndPushToTheHostTier(rig, p, WholeBlocks());
  ASSERT_EQ(*rig.cache().Prefetch(p, WholeBlocks()), 2);
  int plans = 0;
  rig.cache().SetAfterPlanForTesting([&] {
    ++plans;
    rig.cache().WaitForPrefetches();
  });
  auto r = rig.cache().AddSequence(RequestId{2}, p, WholeBlocks());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reused_blocks, 2);
  EXPECT_TRUE(rig.ReusedBytesMatch(p, WholeBlocks(), *r));
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.restore_duplicates, 0);
  EXPECT_EQ(s.prefetched_blocks, 2);
  EXPECT_EQ(s.host_hit_blocks, 2);              // counted by the tier they were prefetched from
  EXPECT_EQ(s.offload.onboard_host.blocks, 2);  // read once
  EXPECT_EQ(plans, 2);
  rig.cache().SetAfterPlanForTesting({});
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{2}).ok());
}

// The same for a second prefetch of the prompt: it finds the blocks published, not a reason to
// restore them again.
TEST(TieredCacheTest, APrefetchFinishedWhileASecondOnePlansIsNotRestoredAgain) {
  Rig rig(Small(4, 16));
  const auto p = Doc(2 * kT, 7);
  StoreAndPushToTheHostTier(rig, p, WholeBlocks());
  ASSERT_EQ(*rig.cache().Prefetch(p, WholeBlocks()), 2);
  rig.cache().SetAfterPlanForTesting([&] { rig.cache().WaitForPrefetches(); });
  EXPECT_EQ(*rig.cache().Prefetch(p, WholeBlocks()), 0);
  rig.cache().SetAfterPlanForTesting({});
  rig.cache().WaitForPrefetches();
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.prefetches, 1);
  EXPECT_EQ(s.restore_duplicates, 0);
  EXPECT_EQ(s.offload.onboard_host.blocks, 2);
  EXPECT_EQ(rig.manager().LookupPrefix(p, WholeBlocks())->cached_tokens, 2 * kT);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

// An admission that restores a block from the host tier evicts pool blocks into that tier first
// (ReserveRestore); the block it is about to read must not be their victim, even as the least
// recently used one: it stays pinned from the plan to the read.
TEST(TieredCacheTest, AHostHitIsNotSpilledByTheEvictionsOfItsOwnAdmission) {
  RigOptions o = Small(2, 2);
  o.copy_threads = 0;  // synchronous: an exact order
  Rig rig(o);
  for (int d = 0; d < 4; ++d) rig.Run(d + 1, Doc(kT, d), WholeBlocks());
  // Pool: 2, 3. Host: 0, 1 (0 the least recently used). No disk: a victim of the host is gone.
  auto host_of = [&](int d) {
    return rig.engine().host()->Contains(kPool, rig.Ids(Doc(kT, d), WholeBlocks())[0]);
  };
  ASSERT_TRUE(host_of(0) && host_of(1) && !host_of(2));
  // Doc 0's block needs a pool block: doc 2 is evicted into the full host tier.
  const AddSequenceResult r = rig.Run(10, Doc(kT, 0), WholeBlocks());
  EXPECT_EQ(r.reused_blocks, 1);
  EXPECT_EQ(rig.cache().stats().host_hit_blocks, 1);
  EXPECT_TRUE(host_of(0));
  EXPECT_TRUE(host_of(2));
  EXPECT_FALSE(host_of(1));  // the victim instead
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

TEST(TieredCacheTest, CapacityLimitsOfBothTiers) {
  TempDir dir;
  RigOptions o = Small(2, 2);
  o.disk_path = dir.path();
  o.disk_blocks = 3;
  o.copy_threads = 0;  // synchronous: an exact order
  Rig rig(o);
  for (int d = 0; d < 10; ++d) rig.Run(d + 1, Doc(kT, d), WholeBlocks());
  // Pool: 8, 9. Host: 6, 7. Disk: 3, 4, 5 (0, 1, 2 evicted for capacity).
  const OffloadStats s = rig.engine().stats();
  EXPECT_EQ(s.host.entries, 2);
  EXPECT_EQ(s.host.evictions, 6);
  EXPECT_EQ(s.host.spills, 6);
  EXPECT_EQ(s.disk.entries, 3);
  EXPECT_EQ(s.disk.evictions, 3);
  EXPECT_LE(s.disk.used_bytes, s.disk.capacity_bytes);
  EXPECT_EQ(s.spill.blocks, 6);
  auto host_of = [&](int d) {
    return rig.engine().host()->Contains(kPool, rig.Ids(Doc(kT, d), WholeBlocks())[0]);
  };
  auto disk_of = [&](int d) {
    return rig.engine().disk()->Contains(kPool, rig.Ids(Doc(kT, d), WholeBlocks())[0]);
  };
  EXPECT_TRUE(host_of(6) && host_of(7) && !host_of(5));
  EXPECT_TRUE(disk_of(3) && disk_of(4) && disk_of(5) && !disk_of(2));
  EXPECT_EQ(rig.Run(20, Doc(kT, 5), WholeBlocks()).reused_blocks, 1);
  EXPECT_EQ(rig.Run(21, Doc(kT, 0), WholeBlocks()).reused_blocks, 0);
  const TieredCacheStats t = rig.cache().stats();
  EXPECT_EQ(t.disk_hit_blocks, 1);
  EXPECT_EQ(t.offload.onboard_disk.blocks, 1);
}

TEST(TieredCacheTest, DiskOnlyTierAndWarmRestart) {
  TempDir dir;
  RigOptions o = Small(2, 0);  // no host tier: offload goes to RocksDB
  o.disk_path = dir.path();
  o.disk_blocks = 64;
  const auto a = Doc(2 * kT, 1);
  {
    Rig rig(o);
    rig.Run(1, a, WholeBlocks());
    rig.Run(2, Doc(kT, 2), WholeBlocks());
    rig.Run(3, Doc(kT, 3), WholeBlocks());
    rig.engine().Drain();
    EXPECT_FALSE(rig.engine().stats().has_host);
    EXPECT_EQ(rig.engine().stats().disk.entries, 2);
  }
  // A new manager and pool over the same directory: the blocks are found on disk.
  o.host_blocks = 4;
  Rig rig(o);
  auto r = rig.cache().AddSequence(RequestId{1}, a, WholeBlocks());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_blocks, 2);
  EXPECT_TRUE(rig.ReusedBytesMatch(a, WholeBlocks(), *r));
  EXPECT_EQ(rig.cache().stats().disk_hit_blocks, 2);
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{1}).ok());
}

TEST(TieredCacheTest, CorruptLastChunkOnDiskIsAMissAndTheDestinationIsNotPublished) {
  // A restore from RocksDB reads a prefix's blocks in one MultiGet and verifies each while copying
  // it into its hidden destination: a byte flipped in the last chunk of the middle block is found
  // at the end of its copy, the block is a miss plus a corruption, never published, and the
  // sequence recomputes from there.
  TempDir dir;
  RigOptions o = Small(3, 0);  // no host tier: offload goes to RocksDB
  o.disk_path = dir.path();
  o.disk_blocks = 64;
  const auto a = Doc(3 * kT, 1);
  std::vector<ContentId> ids;
  {
    Rig rig(o);
    rig.Run(1, a, WholeBlocks());
    rig.Run(2, Doc(3 * kT, 2), WholeBlocks());  // evicts a's three blocks to disk
    rig.engine().Drain();
    ids = rig.Ids(a, WholeBlocks());
    for (const ContentId& id : ids) ASSERT_TRUE(rig.engine().disk()->Contains(kPool, id));
  }
  {
    store_test::RawDb raw(dir.path());
    const std::string cf =
        RocksDbTier::DataColumnFamilyName(kPool, FingerprintOf(o.layout, o.pool_scale));
    std::string v = raw.Get(cf, ids[1]);
    ASSERT_GT(v.size(), 17u);
    v[v.size() - 17] ^= 0x08;  // the last byte before the checksum trailer
    raw.Put(cf, ids[1], v);
  }
  Rig rig(o);
  auto r = rig.cache().AddSequence(RequestId{3}, a, WholeBlocks());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_blocks, 1);
  EXPECT_TRUE(rig.ReusedBytesMatch(a, WholeBlocks(), *r));
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_EQ(s.disk_hit_blocks, 1);
  EXPECT_EQ(s.offload.onboard_corrupt, 1);
  EXPECT_EQ(s.offload.disk.corrupt, 1);
  EXPECT_FALSE(rig.engine().disk()->Contains(kPool, ids[1]));
  EXPECT_EQ(rig.manager().GetStats().pools[0].restored_blocks, 1u);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
  for (std::size_t i = 1; i < ids.size(); ++i) {  // recompute the rest, as Rig::Run does
    FillSyntheticBlock(rig.view(), r->tables[0].block_ids[i], ids[i]);
  }
  ASSERT_TRUE(rig.manager().StoreFullBlocks(RequestId{3}).ok());
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{3}).ok());
  auto again = rig.cache().AddSequence(RequestId{4}, a, WholeBlocks());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reused_blocks, 3);
  EXPECT_TRUE(rig.ReusedBytesMatch(a, WholeBlocks(), *again));
  ASSERT_TRUE(rig.manager().RemoveSequence(RequestId{4}).ok());
}

TEST(TieredCacheTest, TwoPoolsOfDifferentLayouts) {
  const KvPoolLayout full = LayoutOf(store_test::TierShapes()[0].geometry);  // bf16, 16 tokens
  KvPoolGeometry g = store_test::TierShapes()[2].geometry;                   // nvfp4, 16 tokens
  const KvPoolLayout other = LayoutOf(g);
  const std::vector<PoolMemorySpec> specs{{full, 3, 1.0f}, {other, 3, 2.5f}};
  PoolStorage storage = std::move(PoolStorage::Allocate(specs)).value();
  TieredCacheOptions t;
  t.manager.tokens_per_block = kT;
  t.manager.pools = {{"a", 3, 0}, {"b", 3, 0}};
  t.env.pool_memory = storage.views();
  t.offload.host_capacity_bytes = 1 << 20;
  t.offload.host_memory = HostMemoryKind::kAligned;
  auto cache = std::move(TieredCache::Create(std::move(t))).value();
  BlockManager& m = cache->manager();
  auto run = [&](std::uint64_t req, const std::vector<Token>& prompt) {
    const auto ids = m.PlanRestore(prompt, WholeBlocks())->content_ids;
    auto r = cache->AddSequence(RequestId{req}, prompt, WholeBlocks());
    KVMESH_CHECK(r.ok()) << r.status().ToString();
    for (int p = 0; p < 2; ++p) {
      for (std::size_t i = static_cast<std::size_t>(r->reused_blocks); i < ids.size(); ++i) {
        FillSyntheticBlock(storage.view(p), r->tables[p].block_ids[i], ids[i]);
      }
    }
    KVMESH_CHECK(m.StoreFullBlocks(RequestId{req}).ok());
    return std::make_pair(*r, ids);
  };
  const auto a = Doc(2 * kT, 1);
  run(1, a);
  KVMESH_CHECK(m.RemoveSequence(RequestId{1}).ok());
  run(2, Doc(3 * kT, 2));  // evicts both blocks of A, in both pools
  KVMESH_CHECK(m.RemoveSequence(RequestId{2}).ok());
  cache->engine().Drain();
  EXPECT_EQ(cache->engine().stats().offload.blocks, 4);
  auto [r, ids] = run(3, a);
  EXPECT_EQ(r.reused_blocks, 2);
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(SyntheticBlockMatches(storage.view(p), r.tables[p].block_ids[i], ids[i]))
          << "pool " << p << " block " << i;
    }
  }
  KVMESH_CHECK(m.RemoveSequence(RequestId{3}).ok());
  EXPECT_TRUE(m.CheckInvariants().ok());
}

// The host tier the offload engine builds evicts in OffloadEngineOptions::host_eviction_policy's
// order. A pool of one block evicts (and offloads) every block the next request displaces: A at
// priority 80, then B and C at 35, into a host tier of two slots; C's offload needs a host victim.
// lru drops A (the least recently put); priority-lru and learned drop B (the lowest priority).
TEST(TieredCacheTest, HostTierEvictsInTheOrderOfTheEnginesHostPolicy) {
  for (const EvictionPolicyKind policy : AllEvictionPolicies()) {
    SCOPED_TRACE(EvictionPolicyName(policy));
    RigOptions o = Small(1, 2);
    o.host_policy = policy;
    Rig rig(o);
    const auto a = Doc(kT, 1), b = Doc(kT, 2), c = Doc(kT, 3);
    rig.Run(1, a, WholeBlocks(80));
    rig.Run(2, b, WholeBlocks(35));           // evicts A into the host tier
    rig.Run(3, c, WholeBlocks(35));           // evicts B
    rig.Run(4, Doc(kT, 4), WholeBlocks(35));  // evicts C: the host tier is full
    rig.engine().Drain();
    HostTier& host = *rig.engine().host();
    ASSERT_EQ(host.SlotCount(kPool), 2);
    EXPECT_EQ(host.stats().evictions, 1);
    EXPECT_TRUE(host.Contains(kPool, rig.Ids(c, WholeBlocks())[0]));
    const bool lru = policy == EvictionPolicyKind::kLru;
    EXPECT_EQ(host.Contains(kPool, rig.Ids(a, WholeBlocks())[0]), !lru) << "A, priority 80";
    EXPECT_EQ(host.Contains(kPool, rig.Ids(b, WholeBlocks())[0]), lru) << "B, priority 35";
  }
}

}  // namespace
}  // namespace kvmesh
