// The flush into the disk tier (node/flush.h) when the tier refuses puts as full: its files at the
// on-disk write limit while the blocks it evicted wait for a garbage collection. The flush waits
// for the tier (the blocks it writes last are the most valuable), and only a tier still full after
// the wait ends a shutdown flush (not a failure) or fails the rest of a requested one. And which
// host-tier blocks a budget cut keeps.
//
// A tier of 16 MiB on disk (puts refused above 80%: 12.8 MiB) with a logical budget fixed at
// 64 MiB, so that the flush selects every candidate and the on-disk limit is what stops it.
#include "node/flush.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"
#include "tests/store/tiered_test_util.h"

namespace kvmesh {
namespace {

using store_test::Doc;
using store_test::Geometry256K;
using store_test::IdFor;
using store_test::LayoutOf;
using store_test::Rig;
using store_test::RigOptions;
using store_test::TempDir;
using store_test::TestPool;
using store_test::WholeBlocks;

constexpr TierPoolId kPool{0};

RigOptions FullTierRig(const std::string& path, std::int64_t pool_blocks) {
  RigOptions o;
  o.layout = LayoutOf(Geometry256K());
  o.pool_blocks = pool_blocks;
  o.disk_path = path;
  o.disk_blocks = 64;  // 64 bundles of a little over 256 KiB: 16 MiB on disk
  o.disk_fixed_budget_bytes = 64ll << 20;
  return o;
}

// 16 KiB blocks, and a disk tier below 16 MiB: a budget of 8 bundles.
RigOptions EightBlockTierRig(const std::string& path, std::int64_t pool_blocks,
                             std::int64_t host_blocks) {
  RigOptions o;
  o.layout = LayoutOf(store_test::TierShapes()[0].geometry);
  o.pool_blocks = pool_blocks;
  o.host_blocks = host_blocks;
  o.disk_path = path;
  o.disk_blocks = 8;
  return o;
}

// Runs `n` single-block prompts, one after another, and waits for their offloads; their ids.
std::vector<ContentId> RunPrompts(Rig& rig, int n) {
  std::vector<ContentId> ids;
  for (int d = 0; d < n; ++d) {
    rig.Run(d + 1, Doc(rig.tokens_per_block(), d), WholeBlocks());
    ids.push_back(rig.Ids(Doc(rig.tokens_per_block(), d), WholeBlocks())[0]);
  }
  rig.engine().Drain();
  return ids;
}

// Caches `n` single-block prompts in the pool (nothing leaves it: the pool holds them all).
void CacheBlocks(Rig& rig, int n) {
  RunPrompts(rig, n);
  ASSERT_EQ(rig.engine().stats().offload.blocks, 0);
}

// Reads the prompts `which` from the host tier (a restore's read): its most recently used now.
void ReadFromHostTier(Rig& rig, const std::vector<ContentId>& ids, std::vector<int> which) {
  TestPool scratch(rig.view().layout, 1, 1.0f);
  for (const int d : which) {
    ASSERT_TRUE(rig.engine().host()->Get(kPool, ids[d], scratch.view(), 0).ok()) << d;
  }
}

// The prompts whose block the disk tier holds.
std::vector<int> OnDisk(Rig& rig, const std::vector<ContentId>& ids) {
  std::vector<int> on_disk;
  for (std::size_t d = 0; d < ids.size(); ++d) {
    if (rig.engine().disk()->Contains(kPool, ids[d])) on_disk.push_back(static_cast<int>(d));
  }
  return on_disk;
}

// 64 blocks (16 MiB) into a tier whose puts stop at 12.8 MiB on disk, and nothing to reclaim:
// the tier stays full. The shutdown flush waits its full_wait, then ends: the blocks it wrote, the
// rest not fitting, nothing failed.
TEST(FlushTest, ATierThatStaysFullEndsTheShutdownFlushAfterItsWait) {
  TempDir dir;
  Rig rig(FullTierRig(dir.path(), 64));
  CacheBlocks(rig, 64);
  const FlushCounts f = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kEndsTheFlush,
                                                      .full_wait = std::chrono::milliseconds(300)});
  std::printf("written %lld, not fitting %lld, waited %.2f s\n", static_cast<long long>(f.written),
              static_cast<long long>(f.not_fitting), f.full_wait_seconds);
  EXPECT_EQ(f.candidates, 64);
  EXPECT_GT(f.written, 0);
  EXPECT_LT(f.written, 52);  // at most 12.8 MiB of bundles
  EXPECT_EQ(f.written + f.not_fitting, 64);
  EXPECT_EQ(f.failures, 0);
  EXPECT_GE(f.full_wait_seconds, 0.29);
  EXPECT_LT(f.full_wait_seconds, 5.0);
  EXPECT_GT(rig.engine().disk()->stats().over_capacity, 0);
  EXPECT_EQ(rig.engine().disk()->stats().entries, f.written);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
}

// The same tier for kvctl flush, which asked for the blocks: after the wait, every put the tier
// refuses is a failure, and the flush goes on to the end.
TEST(FlushTest, ATierThatStaysFullFailsTheRestOfARequestedFlush) {
  TempDir dir;
  Rig rig(FullTierRig(dir.path(), 64));
  CacheBlocks(rig, 64);
  const FlushCounts f = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kIsAFailure,
                                                      .full_wait = std::chrono::milliseconds(200)});
  EXPECT_GT(f.written, 0);
  EXPECT_EQ(f.written + f.failures, 64);
  EXPECT_GT(f.failures, 0);
  EXPECT_EQ(f.not_fitting, 0);
  EXPECT_EQ(rig.engine().disk()->stats().entries, f.written);
}

// The tier holds 40 dead-to-be blocks (10 MiB) when the flush of 16 blocks (4 MiB) starts: it
// reaches the write limit part way. Once the tier has refused a put, this test erases the 40 and
// collects the garbage (what the tier's upkeep and RocksDB's compactions do on their own, on their
// own time). The flush, waiting, then writes every block. (Before it waited, it ended at the first
// refusal: 9 written, the 7 most valuable not, in a run here with a wait of 0; the refusal comes
// first here always, since nothing is erased before it.)
TEST(FlushTest, AFlushWaitsForAFullTierToReclaimRoomAndWritesEveryBlock) {
  TempDir dir;
  Rig rig(FullTierRig(dir.path(), 16));
  RocksDbTier& disk = *rig.engine().disk();
  TestPool src(rig.view().layout, 1, 1.0f);
  constexpr int kJunk = 40;
  for (int i = 0; i < kJunk; ++i) {
    src.Fill(0, static_cast<std::uint64_t>(i));
    ASSERT_TRUE(disk.Put(kPool, IdFor(static_cast<std::uint64_t>(i)), src.view(), 0, 0).ok());
  }
  CacheBlocks(rig, 16);
  std::atomic<bool> done{false};
  std::thread reclaim([&] {
    while (!done.load() && disk.stats().over_capacity == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (done.load()) return;
    for (int i = 0; i < kJunk; ++i)
      disk.Erase(kPool, IdFor(static_cast<std::uint64_t>(i))).IgnoreError();
    ASSERT_TRUE(disk.CollectGarbage().ok());
  });
  const FlushCounts f = FlushToDiskTier(
      rig.cache(), {.full = FullDiskTier::kEndsTheFlush, .full_wait = std::chrono::seconds(60)});
  done.store(true);
  reclaim.join();
  std::printf("written %lld, not fitting %lld, waited %.2f s, refusals %lld\n",
              static_cast<long long>(f.written), static_cast<long long>(f.not_fitting),
              f.full_wait_seconds, static_cast<long long>(disk.stats().over_capacity));
  EXPECT_GT(disk.stats().over_capacity, 0);  // the tier did refuse a put
  EXPECT_GT(f.full_wait_seconds, 0.0);
  EXPECT_EQ(f.written, 16);
  EXPECT_EQ(f.not_fitting, 0);
  EXPECT_EQ(f.failures, 0);
  // Every block the flush wrote reads back with its bytes.
  store_test::TestPool check(rig.view().layout, 1, 1.0f);
  for (int d = 0; d < 16; ++d) {
    const ContentId id = rig.Ids(Doc(rig.tokens_per_block(), d), WholeBlocks())[0];
    ASSERT_TRUE(disk.Get(kPool, id, check.view(), 0).ok()) << d;
    EXPECT_TRUE(SyntheticBlockMatches(check.view(), 0, id)) << d;
  }
}

// Host-tier and pool blocks are written least valuable first, in one order: the host tier's by its
// own recency, not by slot. 64 single-block prompts through a pool of 4 leave 60 in the host tier,
// evicted in the order they ran; three of the oldest are then read from it (its most recently
// used now). Into the tier that stays full (about 51 puts), the flush writes the host tier's
// least recently used first, so the three read and the 4 pool blocks are among those it never
// gets to. (Written by slot, as before, the three oldest went first.)
TEST(FlushTest, HostTierBlocksAreWrittenLeastRecentlyUsedFirst) {
  TempDir dir;
  RigOptions o = FullTierRig(dir.path(), 4);
  o.host_blocks = 64;
  Rig rig(o);
  const std::vector<ContentId> ids = RunPrompts(rig, 64);
  ASSERT_EQ(rig.engine().host()->stats().entries, 60);
  ReadFromHostTier(rig, ids, {2, 0, 1});
  const FlushCounts f = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kEndsTheFlush,
                                                      .full_wait = std::chrono::milliseconds(100)});
  EXPECT_EQ(f.candidates, 64);
  ASSERT_GT(f.written, 3);
  ASSERT_LT(f.written, 52);
  RocksDbTier& disk = *rig.engine().disk();
  EXPECT_EQ(static_cast<std::int64_t>(OnDisk(rig, ids).size()), f.written);
  for (const int d : {0, 1, 2, 60, 61, 62, 63}) {
    EXPECT_FALSE(disk.Contains(kPool, ids[d])) << d;
  }
  EXPECT_TRUE(disk.Contains(kPool, ids[3]));  // the least recently used of the host tier
}

// A budget cut among host-tier blocks keeps the ones used most recently (the host tier's own
// recency), not the first slots: 16 single-block prompts through a pool of 4 blocks leave 12 in
// the host tier, evicted in the order they ran; two of the oldest are then read from the host tier
// (a restore's read), which makes them its most recently used. A disk tier with room for 8 blocks
// takes the 4 pool blocks and, of the host tier's, those two and the two evicted last.
TEST(FlushTest, ABudgetCutInTheHostTierKeepsItsMostRecentlyUsedBlocks) {
  TempDir dir;
  Rig rig(EightBlockTierRig(dir.path(), 4, 32));
  const std::vector<ContentId> ids = RunPrompts(rig, 16);
  ASSERT_EQ(rig.engine().host()->stats().entries, 12);
  ReadFromHostTier(rig, ids, {3, 1});
  const FlushCounts f = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kEndsTheFlush});
  EXPECT_EQ(f.candidates, 16);
  EXPECT_EQ(f.written, 8);
  EXPECT_EQ(f.not_fitting, 8);
  EXPECT_EQ(OnDisk(rig, ids), (std::vector<int>{1, 3, 10, 11, 12, 13, 14, 15}));
}

// A flush keeps the blocks it found on disk above those it does not keep. 4 pool blocks flushed
// first; then new prompts, the 4 re-used after each, push blocks through the host tier into the
// disk tier (newer than the 4, and in neither the pool nor the host tier any more) until it is at
// its budget of 8. The second flush keeps the 4 (held), writes the pool's other 4 and leaves the
// host tier's 2 out: the tier must evict the spilled blocks, not the 4. Before the flush marked
// the 4 as used, the tier evicted them (written long before the spills), and every later flush
// wrote some of them again.
TEST(FlushTest, AFlushKeepsTheBlocksItFoundOnDiskAboveTheOnesItLeavesOut) {
  TempDir dir;
  Rig rig(EightBlockTierRig(dir.path(), 8, 2));
  const std::int32_t t = rig.tokens_per_block();
  std::uint64_t request = 1;
  const auto run = [&](int doc) { rig.Run(request++, Doc(t, doc), WholeBlocks()); };
  for (int d = 0; d < 4; ++d) run(d);
  rig.engine().Drain();
  const FlushCounts first = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kEndsTheFlush});
  ASSERT_EQ(first.written, 4);
  for (int d = 4; d < 14; ++d) {
    run(d);
    for (int c = 0; c < 4; ++c) run(c);  // the 4 stay the pool's most recently used
  }
  rig.engine().Drain();
  std::vector<ContentId> kept;
  for (int d = 0; d < 4; ++d) kept.push_back(rig.Ids(Doc(t, d), WholeBlocks())[0]);
  RocksDbTier& disk = *rig.engine().disk();
  for (const ContentId& id : kept) ASSERT_TRUE(disk.Contains(kPool, id));
  ASSERT_EQ(disk.stats().entries, 8) << "the spills filled the tier";
  const FlushCounts second = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kEndsTheFlush});
  EXPECT_EQ(second.candidates, 10);
  EXPECT_EQ(second.already, 4);
  EXPECT_EQ(second.written, 4);
  EXPECT_EQ(second.not_fitting, 2);
  for (const ContentId& id : kept) EXPECT_TRUE(disk.Contains(kPool, id));
  const FlushCounts third = FlushToDiskTier(rig.cache(), {.full = FullDiskTier::kEndsTheFlush});
  EXPECT_EQ(third.written, 0);
  EXPECT_EQ(third.already, 8);
}

}  // namespace
}  // namespace kvmesh
