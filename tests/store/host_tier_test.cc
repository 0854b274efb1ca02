// HostTier: round trips for several shapes and pools, capacity and eviction order (priority, then
// least recently used), spills into a RocksDB tier through the eviction sink, corruption injected
// into a slot (detected, erased, counted, never served), erase, argument checks, memory kinds.
#include "store/host_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "store/rocksdb_tier.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::IdFor;
using store_test::LayoutOf;
using store_test::Shape;
using store_test::TempDir;
using store_test::TestPool;

constexpr TierPoolId kPool{0};

HostTierPool PoolOf(const Shape& s, TierPoolId id, double share = 0) {
  return {id, LayoutOf(s.geometry), s.pool_scale, share};
}

std::unique_ptr<HostTier> MakeTier(const Shape& s, std::int64_t slots,
                                   TierEvictionSink sink = nullptr,
                                   EvictionPolicyKind policy = EvictionPolicyKind::kPriorityLru) {
  auto codec = BundleCodec::Create(LayoutOf(s.geometry), s.pool_scale);
  KVMESH_CHECK(codec.ok());
  HostTierOptions o;
  o.capacity_bytes = slots * ((codec->bundle_bytes() + 63) / 64 * 64);
  o.pools = {PoolOf(s, kPool)};
  o.memory = HostMemoryKind::kAligned;
  o.on_evict = std::move(sink);
  o.eviction_policy = policy;
  auto tier = HostTier::Create(std::move(o));
  KVMESH_CHECK(tier.ok()) << tier.status().ToString();
  return std::move(*tier);
}

class HostTierShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(HostTierShapes, RoundTrip) {
  const Shape& s = GetParam();
  const KvPoolLayout layout = LayoutOf(s.geometry);
  auto tier = MakeTier(s, 8);
  EXPECT_EQ(tier->SlotCount(kPool), 8);
  EXPECT_FALSE(tier->pinned());
  TestPool src(layout, 8, s.pool_scale), dst(layout, 8, s.pool_scale);
  for (int b = 0; b < 8; ++b) src.Fill(b, b + 1);
  for (int b = 0; b < 8; ++b) {
    ASSERT_TRUE(tier->Put(kPool, IdFor(b), src.view(), b, kTierDefaultPriority).ok());
  }
  for (int b = 0; b < 8; ++b) {
    EXPECT_TRUE(tier->Contains(kPool, IdFor(b)));
    const std::int64_t to = 7 - b;  // scattered: another block than it came from
    ASSERT_TRUE(tier->Get(kPool, IdFor(b), dst.view(), to).ok());
    EXPECT_EQ(dst.Snapshot(to), src.Expected(b + 1)) << "block " << b;
  }
  const TierStats st = tier->stats();
  EXPECT_EQ(st.puts, 8);
  EXPECT_EQ(st.hits, 8);
  EXPECT_EQ(st.entries, 8);
  EXPECT_EQ(st.used_bytes, 8 * tier->Codec(kPool)->bundle_bytes());
  EXPECT_EQ(st.evictions, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, HostTierShapes, ::testing::ValuesIn(store_test::TierShapes()),
                         [](const auto& info) { return info.param.name; });

const Shape& Small() {
  static const Shape s = store_test::TierShapes()[0];
  return s;
}

TEST(HostTier, MissPresentAndErase) {
  auto tier = MakeTier(Small(), 4);
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 2, 1.0f), dst(layout, 2, 1.0f);
  src.Fill(0, 11);
  dst.FillByte(0, 0x33);
  EXPECT_TRUE(tier->Get(kPool, IdFor(1), dst.view(), 0).IsNotFound());
  EXPECT_EQ(tier->stats().misses, 1);
  ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());
  // A second put of the same id does not copy again: the tier keeps the first content.
  src.Fill(0, 12);
  ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());
  EXPECT_EQ(tier->stats().put_present, 1);
  EXPECT_EQ(tier->stats().puts, 1);
  ASSERT_TRUE(tier->Get(kPool, IdFor(1), dst.view(), 1).ok());
  EXPECT_EQ(dst.Snapshot(1), src.Expected(11));
  ASSERT_TRUE(tier->Erase(kPool, IdFor(1)).ok());
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  EXPECT_TRUE(tier->Erase(kPool, IdFor(1)).IsNotFound());
  EXPECT_TRUE(tier->Get(kPool, IdFor(1), dst.view(), 1).IsNotFound());
  EXPECT_EQ(tier->stats().entries, 0);
  EXPECT_EQ(tier->stats().used_bytes, 0);
}

// The flush's two ways in: the walk sees every ready block with its id, priority, use stamp and
// bundle; VisitBlock finds one by id (false for one the tier does not hold), and a visited block
// becomes the most recently used, so the next put's victim is another.
TEST(HostTier, ForEachBlockAndVisitBlock) {
  auto tier = MakeTier(Small(), 3);
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 4, 1.0f);
  for (int b = 0; b < 3; ++b) {
    src.Fill(b, b + 1);
    ASSERT_TRUE(tier->Put(kPool, IdFor(b), src.view(), b, 35).ok());
  }
  std::map<ContentId, std::uint64_t> stamps;
  const std::int64_t seen = tier->ForEachBlock(kPool, [&](const EvictedBundle& e) {
    EXPECT_EQ(e.priority, 35);
    EXPECT_EQ(e.bundle.size(), static_cast<std::size_t>(tier->Codec(kPool)->bundle_bytes()));
    stamps[e.id] = e.last_use;
  });
  EXPECT_EQ(seen, 3);
  ASSERT_EQ(stamps.size(), 3u);
  EXPECT_LT(stamps[IdFor(0)], stamps[IdFor(1)]);
  EXPECT_LT(stamps[IdFor(1)], stamps[IdFor(2)]);
  EXPECT_FALSE(tier->VisitBlock(kPool, IdFor(7), [](const EvictedBundle&) { FAIL(); }));
  EXPECT_FALSE(tier->VisitBlock(TierPoolId{5}, IdFor(0), [](const EvictedBundle&) { FAIL(); }));
  int visits = 0;
  EXPECT_TRUE(tier->VisitBlock(kPool, IdFor(0), [&](const EvictedBundle& e) {
    ++visits;
    EXPECT_EQ(e.id, IdFor(0));
    EXPECT_EQ(e.priority, 35);
  }));
  EXPECT_EQ(visits, 1);
  src.Fill(3, 9);
  ASSERT_TRUE(tier->Put(kPool, IdFor(3), src.view(), 3, 35).ok());
  EXPECT_TRUE(tier->Contains(kPool, IdFor(0)));  // visited: now more recent than 1
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  ASSERT_TRUE(tier->Erase(kPool, IdFor(2)).ok());
  EXPECT_FALSE(tier->VisitBlock(kPool, IdFor(2), [](const EvictedBundle&) { FAIL(); }));
}

TEST(HostTier, EvictsLowestPriorityThenLeastRecentlyUsed) {
  std::vector<ContentId> victims;
  auto tier = MakeTier(Small(), 4, [&](const EvictedBundle& e) {
    victims.push_back(e.id);
    return Status::Ok();
  });
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 1, 1.0f), dst(layout, 1, 1.0f);
  src.Fill(0, 1);
  auto put = [&](int i, int prio) {
    ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), 0, prio).ok()) << i;
  };
  put(0, 35);
  put(1, 35);
  put(2, 10);
  put(3, 50);
  ASSERT_TRUE(tier->Get(kPool, IdFor(0), dst.view(), 0).ok());  // 0 is now more recent than 1
  put(4, 35);                                                   // evicts 2 (lowest priority)
  put(5, 35);  // evicts 1 (least recently used at 35)
  put(6, 35);  // evicts 0
  put(7, 60);  // evicts 4
  ASSERT_EQ(victims.size(), 4u);
  EXPECT_EQ(victims[0], IdFor(2));
  EXPECT_EQ(victims[1], IdFor(1));
  EXPECT_EQ(victims[2], IdFor(0));
  EXPECT_EQ(victims[3], IdFor(4));
  for (int i : {3, 5, 6, 7}) EXPECT_TRUE(tier->Contains(kPool, IdFor(i))) << i;
  for (int i : {0, 1, 2, 4}) EXPECT_FALSE(tier->Contains(kPool, IdFor(i))) << i;
  // Listing the ids (the directory's resync) names exactly the held blocks and uses none: the
  // eviction order below is the same as without it.
  std::vector<ContentId> ids = tier->ReadyIds(kPool);
  std::sort(ids.begin(), ids.end());
  std::vector<ContentId> held = {IdFor(3), IdFor(5), IdFor(6), IdFor(7)};
  std::sort(held.begin(), held.end());
  EXPECT_EQ(ids, held);
  EXPECT_TRUE(tier->ReadyIds(TierPoolId{kPool.value + 7}).empty());
  // A put of a held block raises its priority: 5 at 90 outlives 6 at 35.
  put(5, 90);
  put(8, 35);  // evicts 6
  EXPECT_EQ(victims.back(), IdFor(6));
  const TierStats st = tier->stats();
  EXPECT_EQ(st.evictions, 5);
  EXPECT_EQ(st.spills, 5);
  EXPECT_EQ(st.entries, 4);
  EXPECT_TRUE(tier->Put(kPool, IdFor(9), src.view(), 0, 101).IsInvalidArgument());
  EXPECT_TRUE(tier->Put(kPool, IdFor(9), src.view(), 0, -1).IsInvalidArgument());
}

// The learned policy in the tier: 4 hot blocks read back every round, 40 cold blocks written once
// and never read. 40 writes flush 16 slots, so LRU never finds a hot block; the learned policy
// sees that blocks read before are read again (the ghost remembers them across their evictions)
// and keeps them. Priorities stay first: a cold block at 60 outlives everything at 35.
TEST(HostTier, LearnedPolicyKeepsWhatIsReadAgain) {
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 1, 1.0f), dst(layout, 1, 1.0f);
  src.Fill(0, 1);
  std::map<EvictionPolicyKind, int> hits;
  for (EvictionPolicyKind policy :
       {EvictionPolicyKind::kPriorityLru, EvictionPolicyKind::kLearned}) {
    auto tier = MakeTier(Small(), 16, nullptr, policy);
    ASSERT_TRUE(tier->Put(kPool, IdFor(999999), src.view(), 0, 60).ok());
    std::uint64_t cold = 1000;
    for (int round = 0; round < 60; ++round) {
      for (std::uint64_t h = 0; h < 4; ++h) {
        if (tier->Get(kPool, IdFor(h), dst.view(), 0).ok()) {
          hits[policy] += round >= 10 ? 1 : 0;
        } else {
          ASSERT_TRUE(tier->Put(kPool, IdFor(h), src.view(), 0, 35).ok());
        }
      }
      for (int c = 0; c < 40; ++c) {
        ASSERT_TRUE(tier->Put(kPool, IdFor(cold++), src.view(), 0, 35).ok());
      }
    }
    EXPECT_TRUE(tier->Contains(kPool, IdFor(999999))) << EvictionPolicyName(policy);
  }
  EXPECT_EQ(hits[EvictionPolicyKind::kPriorityLru], 0);
  EXPECT_GE(hits[EvictionPolicyKind::kLearned], 160);  // of 200 in the last 50 rounds
}

TEST(HostTier, BlocksBeingWrittenAreNeverVictims) {
  // One slot. While the put of 1 spills 0 (its slot is being written), a put of 2 finds nothing
  // it may evict.
  std::unique_ptr<HostTier> tier;
  Status inner = Status::Ok();
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 1, 1.0f);
  src.Fill(0, 1);
  tier = MakeTier(Small(), 1, [&](const EvictedBundle&) {
    inner = tier->Put(kPool, IdFor(2), src.view(), 0, 35);
    return Status::Ok();
  });
  ASSERT_TRUE(tier->Put(kPool, IdFor(0), src.view(), 0, 35).ok());
  ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());
  EXPECT_TRUE(inner.IsResourceExhausted()) << inner;
  EXPECT_TRUE(tier->Contains(kPool, IdFor(1)));
  EXPECT_FALSE(tier->Contains(kPool, IdFor(2)));
}

TEST(HostTier, BlocksPinnedForARestoreAreNeverVictims) {
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  auto tier = MakeTier(Small(), 2);
  TestPool src(layout, 5, 1.0f), dst(layout, 1, 1.0f);
  for (int b = 0; b < 5; ++b) src.Fill(b, b + 1);
  ASSERT_TRUE(tier->Put(kPool, IdFor(0), src.view(), 0, 35).ok());
  ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 1, 35).ok());
  HostTier::RestorePins pins;
  const ContentId wanted[] = {IdFor(0), IdFor(7)};  // 7 is not held: skipped
  tier->PinForRestore(kPool, wanted, pins);
  EXPECT_EQ(pins.count(), 1);
  // 0 is the least recently used, but pinned: 1 goes.
  ASSERT_TRUE(tier->Put(kPool, IdFor(2), src.view(), 2, 35).ok());
  EXPECT_TRUE(tier->Contains(kPool, IdFor(0)));
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  // A get of a pinned block works.
  ASSERT_TRUE(tier->Get(kPool, IdFor(0), dst.view(), 0).ok());
  EXPECT_EQ(dst.Snapshot(0), src.Expected(1));
  // Moved, then released: 0 is now more recently used than 2, which the next put evicts.
  HostTier::RestorePins moved = std::move(pins);
  EXPECT_EQ(pins.count(), 0);  // NOLINT(bugprone-use-after-move): a moved-from handle is empty
  EXPECT_EQ(moved.count(), 1);
  moved.Release();
  EXPECT_EQ(moved.count(), 0);
  ASSERT_TRUE(tier->Put(kPool, IdFor(3), src.view(), 3, 35).ok());
  EXPECT_TRUE(tier->Contains(kPool, IdFor(0)));
  EXPECT_FALSE(tier->Contains(kPool, IdFor(2)));
  // Every slot pinned: a put finds no victim.
  const ContentId both[] = {IdFor(0), IdFor(3)};
  tier->PinForRestore(kPool, both, pins);
  EXPECT_EQ(pins.count(), 2);
  EXPECT_TRUE(tier->Put(kPool, IdFor(4), src.view(), 4, 35).IsResourceExhausted());
  // Erased while pinned: gone at once, its slot free with the last pin (the put evicts nothing).
  ASSERT_TRUE(tier->Erase(kPool, IdFor(3)).ok());
  EXPECT_FALSE(tier->Contains(kPool, IdFor(3)));
  pins.Release();
  const std::int64_t evictions = tier->stats().evictions;
  ASSERT_TRUE(tier->Put(kPool, IdFor(4), src.view(), 4, 35).ok());
  EXPECT_EQ(tier->stats().evictions, evictions);
  EXPECT_TRUE(tier->Contains(kPool, IdFor(0)));
  EXPECT_TRUE(tier->Contains(kPool, IdFor(4)));
}

TEST(HostTier, VictimsSpillIntoRocksDbTier) {
  TempDir dir;
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  RocksDbTierOptions ro;
  ro.path = dir.path() + "/db";
  ro.capacity_bytes = 1 << 30;
  ro.pools = {{kPool, layout, 1.0f}};
  auto disk = RocksDbTier::Open(ro);
  ASSERT_TRUE(disk.ok()) << disk.status();
  auto tier = MakeTier(Small(), 3, [&](const EvictedBundle& e) {
    return (*disk)->PutBundle(e.pool, e.id, e.bundle, e.priority);
  });
  TestPool src(layout, 10, 1.0f), dst(layout, 10, 1.0f);
  for (int i = 0; i < 10; ++i) {
    src.Fill(i, 1000 + i);
    ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), i, 35).ok());
  }
  EXPECT_EQ(tier->stats().spills, 7);
  for (int i = 0; i < 10; ++i) {
    const bool in_host = tier->Contains(kPool, IdFor(i));
    EXPECT_EQ(in_host, i >= 7) << i;
    BlockTier& from = in_host ? static_cast<BlockTier&>(*tier) : **disk;
    ASSERT_TRUE(from.Get(kPool, IdFor(i), dst.view(), 9 - i).ok()) << i;
    EXPECT_EQ(dst.Snapshot(9 - i), src.Expected(1000 + i)) << i;
  }
  EXPECT_EQ((*disk)->stats().entries, 7);
}

TEST(HostTier, SinkFailureDropsTheVictim) {
  auto tier = MakeTier(Small(), 1, [](const EvictedBundle&) { return Status::IoError("full"); });
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 1, 1.0f);
  src.Fill(0, 1);
  ASSERT_TRUE(tier->Put(kPool, IdFor(0), src.view(), 0, 35).ok());
  ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());
  EXPECT_EQ(tier->stats().spill_failures, 1);
  EXPECT_FALSE(tier->Contains(kPool, IdFor(0)));
}

TEST(HostTier, CorruptSlotIsDetectedErasedAndNeverServed) {
  const Shape s = store_test::TierShapes()[2];  // nvfp4 with block scales and global scale
  const KvPoolLayout layout = LayoutOf(s.geometry);
  auto tier = MakeTier(s, 8);
  TestPool src(layout, 1, s.pool_scale), dst(layout, 1, s.pool_scale);
  src.Fill(0, 5);
  const auto bundle_bytes = tier->Codec(kPool)->bundle_bytes();
  // Flip a byte in the header, the first component, the last chunk of the last component and the
  // checksum; read through Get (verify, then copy) and through GetForRestore (one pass).
  const std::int64_t where[] = {20, 300, bundle_bytes - 40, bundle_bytes - 3};
  for (int i = 0; i < 8; ++i) {
    const bool one_pass = i >= 4;
    ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), 0, 35).ok());
    auto bytes = tier->SlotBytesForTesting(kPool, IdFor(i));
    ASSERT_EQ(static_cast<std::int64_t>(bytes.size()), bundle_bytes);
    bytes[where[i % 4]] ^= std::byte{0x10};
    dst.FillByte(0, 0xEE);
    const auto before = dst.Snapshot(0);
    const Status st = one_pass ? tier->GetForRestore(kPool, IdFor(i), dst.view(), 0)
                               : tier->Get(kPool, IdFor(i), dst.view(), 0);
    EXPECT_TRUE(st.IsCorruption()) << i << ": " << st;
    // Get never writes the destination from a corrupt slot; the one-pass read does not before the
    // header and table are checked (the caller must not publish it on kCorruption).
    if (!one_pass || i % 4 == 0) {
      EXPECT_EQ(dst.Snapshot(0), before) << i << ": destination written from a corrupt slot";
    }
    EXPECT_FALSE(tier->Contains(kPool, IdFor(i)));
    EXPECT_TRUE(tier->GetForRestore(kPool, IdFor(i), dst.view(), 0).IsNotFound());
  }
  const TierStats st = tier->stats();
  EXPECT_EQ(st.corrupt, 8);
  EXPECT_EQ(st.hits, 0);
  EXPECT_EQ(st.entries, 0);
  // The slots are free again, exactly once each: 8 puts fill the tier without evicting, 8 more
  // evict the first 8, and every block held reads back as itself.
  for (int i = 0; i < 16; ++i) {
    src.Fill(0, 100 + i);
    ASSERT_TRUE(tier->Put(kPool, IdFor(100 + i), src.view(), 0, 35).ok());
    EXPECT_EQ(tier->stats().evictions, std::max(0, i - 7)) << i;
  }
  EXPECT_EQ(tier->stats().entries, 8);
  for (int i = 8; i < 16; ++i) {
    ASSERT_TRUE(tier->Get(kPool, IdFor(100 + i), dst.view(), 0).ok()) << i;
    EXPECT_EQ(dst.Snapshot(0), src.Expected(100 + i));
  }
}

TEST(HostTier, PutBundleVerifiesFirst) {
  auto tier = MakeTier(Small(), 2);
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  const BundleCodec& codec = *tier->Codec(kPool);
  TestPool src(layout, 1, 1.0f), dst(layout, 1, 1.0f);
  src.Fill(0, 8);
  std::vector<std::byte> bundle(codec.bundle_bytes());
  ASSERT_TRUE(codec.Encode(src.view(), 0, IdFor(1), bundle).ok());
  EXPECT_TRUE(tier->PutBundle(kPool, IdFor(2), bundle, 35).IsCorruption()) << "another id";
  auto bad = bundle;
  bad[100] ^= std::byte{1};
  EXPECT_TRUE(tier->PutBundle(kPool, IdFor(1), bad, 35).IsCorruption());
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  ASSERT_TRUE(tier->PutBundle(kPool, IdFor(1), bundle, 35).ok());
  ASSERT_TRUE(tier->Get(kPool, IdFor(1), dst.view(), 0).ok());
  EXPECT_EQ(dst.Snapshot(0), src.Expected(8));
}

TEST(HostTier, SeveralPoolsSplitTheCapacity) {
  const auto shapes = store_test::TierShapes();
  const Shape& a = shapes[0];
  const Shape& b = shapes[3];  // MLA + FP4 indexer, fp8 per tensor
  auto ca = BundleCodec::Create(LayoutOf(a.geometry), a.pool_scale);
  auto cb = BundleCodec::Create(LayoutOf(b.geometry), b.pool_scale);
  ASSERT_TRUE(ca.ok() && cb.ok());
  HostTierOptions o;
  o.capacity_bytes = 64 << 20;
  o.pools = {PoolOf(a, TierPoolId{0}, 0.25), PoolOf(b, TierPoolId{1})};
  o.memory = HostMemoryKind::kAligned;
  auto tier = HostTier::Create(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const auto slot = [](std::int64_t x) { return (x + 63) / 64 * 64; };
  EXPECT_EQ((*tier)->SlotCount(TierPoolId{0}), (16 << 20) / slot(ca->bundle_bytes()));
  EXPECT_EQ((*tier)->SlotCount(TierPoolId{1}), (48 << 20) / slot(cb->bundle_bytes()));
  EXPECT_EQ((*tier)->SlotCount(TierPoolId{7}), 0);
  TestPool pa(LayoutOf(a.geometry), 1, a.pool_scale), pb(LayoutOf(b.geometry), 1, b.pool_scale);
  pa.Fill(0, 1);
  pb.Fill(0, 2);
  // The same content id in two pools names two blocks.
  ASSERT_TRUE((*tier)->Put(TierPoolId{0}, IdFor(1), pa.view(), 0, 35).ok());
  EXPECT_FALSE((*tier)->Contains(TierPoolId{1}, IdFor(1)));
  ASSERT_TRUE((*tier)->Put(TierPoolId{1}, IdFor(1), pb.view(), 0, 35).ok());
  TestPool da(LayoutOf(a.geometry), 1, a.pool_scale), db(LayoutOf(b.geometry), 1, b.pool_scale);
  ASSERT_TRUE((*tier)->Get(TierPoolId{0}, IdFor(1), da.view(), 0).ok());
  ASSERT_TRUE((*tier)->Get(TierPoolId{1}, IdFor(1), db.view(), 0).ok());
  EXPECT_EQ(da.Snapshot(0), pa.Expected(1));
  EXPECT_EQ(db.Snapshot(0), pb.Expected(2));
  // A view of the other pool is refused.
  EXPECT_TRUE((*tier)->Put(TierPoolId{0}, IdFor(2), pb.view(), 0, 35).IsInvalidArgument());
  EXPECT_TRUE((*tier)->Get(TierPoolId{0}, IdFor(1), db.view(), 0).IsInvalidArgument());
  EXPECT_TRUE((*tier)->Put(TierPoolId{7}, IdFor(2), pa.view(), 0, 35).IsInvalidArgument());
}

TEST(HostTier, CreateRejectsBadOptions) {
  const Shape& s = Small();
  HostTierOptions o;
  o.memory = HostMemoryKind::kAligned;
  o.capacity_bytes = 1 << 20;
  EXPECT_TRUE(HostTier::Create(o).status().IsInvalidArgument()) << "no pools";
  o.pools = {PoolOf(s, kPool), PoolOf(s, kPool)};
  EXPECT_TRUE(HostTier::Create(o).status().IsInvalidArgument()) << "duplicate pool";
  o.pools = {PoolOf(s, kPool, 0.7), PoolOf(s, TierPoolId{1}, 0.6)};
  EXPECT_TRUE(HostTier::Create(o).status().IsInvalidArgument()) << "shares above 1";
  o.pools = {PoolOf(s, kPool)};
  o.capacity_bytes = 100;
  EXPECT_TRUE(HostTier::Create(o).status().IsInvalidArgument()) << "no room for a slot";
  o.capacity_bytes = 0;
  EXPECT_TRUE(HostTier::Create(o).status().IsInvalidArgument());
}

TEST(HostMemory, KindsAndFallback) {
  auto aligned = HostMemory::Allocate(1 << 20, HostMemoryKind::kAligned, true);
  ASSERT_TRUE(aligned.ok());
  EXPECT_FALSE(aligned->pinned());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(aligned->data()) % 4096, 0u);
  auto automatic = HostMemory::Allocate(1 << 20, HostMemoryKind::kAuto, false);
  ASSERT_TRUE(automatic.ok());
  auto pinned = HostMemory::Allocate(1 << 20, HostMemoryKind::kPinned, false);
  if (pinned.ok()) {
    // A CUDA build on a machine with a device: pinned memory, and kAuto picks it as well.
    EXPECT_TRUE(pinned->pinned());
    EXPECT_TRUE(automatic->pinned());
  } else {
    EXPECT_TRUE(pinned.status().IsNotSupported()) << pinned.status();
    EXPECT_FALSE(automatic->pinned());
  }
}

}  // namespace
}  // namespace kvmesh

namespace kvmesh {
namespace {

// Issue 11, finding 7: during a spill the block was in no tier (the host tier dropped it from its
// index before calling the sink, and the sink staged it only afterwards). Now the victim stays
// findable and readable in the host tier until the sink has returned; a put of the new block's id
// meanwhile copies nothing, and an erase of either is honoured.
TEST(HostTier, VictimStaysFindableWhileTheSinkRuns) {
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 4, 1.0f), dst(layout, 1, 1.0f);
  HostTier* self = nullptr;
  int calls = 0;
  bool found = false, read = false, second_put_present = false;
  auto tier = MakeTier(Small(), 2, [&](const EvictedBundle& e) {
    ++calls;
    found = self->Contains(e.pool, e.id);
    read = self->Get(e.pool, e.id, dst.view(), 0).ok() && dst.Snapshot(0) == src.Expected(10);
    const auto before = self->stats().put_present;
    second_put_present = self->Put(kPool, IdFor(3), src.view(), 2, 35).ok() &&
                         self->stats().put_present == before + 1;  // id 3 is being put
    EXPECT_FALSE(self->Contains(kPool, IdFor(3))) << "visible before its copy";
    return Status::Ok();
  });
  self = tier.get();
  src.Fill(0, 10);
  src.Fill(1, 11);
  src.Fill(2, 12);
  ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());
  ASSERT_TRUE(tier->Put(kPool, IdFor(2), src.view(), 1, 35).ok());
  ASSERT_TRUE(tier->Put(kPool, IdFor(3), src.view(), 2, 35).ok());  // evicts 1
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(found) << "the victim was in no tier while it spilled";
  EXPECT_TRUE(read);
  EXPECT_TRUE(second_put_present);
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  ASSERT_TRUE(tier->Get(kPool, IdFor(3), dst.view(), 0).ok());
  EXPECT_EQ(dst.Snapshot(0), src.Expected(12));
  const TierStats s = tier->stats();
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.spills, 1);
}

TEST(HostTier, EraseDuringASpillIsHonoured) {
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 3, 1.0f), dst(layout, 1, 1.0f);
  HostTier* self = nullptr;
  auto tier = MakeTier(Small(), 1, [&](const EvictedBundle& e) {
    EXPECT_TRUE(self->Erase(e.pool, e.id).ok());     // the victim
    EXPECT_TRUE(self->Erase(kPool, IdFor(2)).ok());  // the block being put
    EXPECT_TRUE(self->Erase(kPool, IdFor(2)).IsNotFound());
    return Status::Ok();
  });
  self = tier.get();
  src.Fill(0, 1);
  ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());
  ASSERT_TRUE(tier->Put(kPool, IdFor(2), src.view(), 0, 35).ok());
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  EXPECT_FALSE(tier->Contains(kPool, IdFor(2)));
  EXPECT_EQ(tier->stats().entries, 0);
  ASSERT_TRUE(tier->Put(kPool, IdFor(4), src.view(), 0, 35).ok());  // the slot is free again
  EXPECT_TRUE(tier->Contains(kPool, IdFor(4)));
}

}  // namespace
}  // namespace kvmesh
