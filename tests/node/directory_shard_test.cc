// Rendezvous hashing (balance, minimal movement on join and leave), shard updates, holdings.
#include "node/directory_shard.h"

#include <gtest/gtest.h>

#include <map>

namespace kvmesh {
namespace {

ContentId Id(std::uint64_t n) {
  Sha256 h;
  h.UpdateValue(n);
  return h.FinishContentId();
}

std::vector<std::string> Nodes(int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back("node-" + std::to_string(i));
  return ids;
}

TEST(RendezvousTest, EveryNodeIsHomeToAboutItsShare) {
  constexpr int kIds = 40000;
  for (const int n : {2, 3, 4, 8}) {
    const HomeRing ring(Nodes(n));
    std::map<std::string, int> count;
    for (int i = 0; i < kIds; ++i) ++count[ring.HomeOf(Id(i))];
    ASSERT_EQ(count.size(), static_cast<std::size_t>(n));
    for (const auto& [node, c] : count) {
      // Binomial: the standard deviation at n = 8 is about 66 ids; 10 % of the share is > 7 sd.
      EXPECT_NEAR(c, kIds / n, kIds / n / 10) << node << " of " << n;
    }
  }
}

TEST(RendezvousTest, AJoinMovesOnlyTheIdsTheNewNodeWins) {
  constexpr int kIds = 20000;
  const HomeRing before(Nodes(4));
  std::vector<std::string> five = Nodes(4);
  five.push_back("node-new");
  const HomeRing after(five);
  int moved = 0;
  for (int i = 0; i < kIds; ++i) {
    const std::string& a = before.HomeOf(Id(i));
    const std::string& b = after.HomeOf(Id(i));
    if (a != b) {
      ++moved;
      EXPECT_EQ(b, "node-new");  // never from one old node to another
    }
  }
  EXPECT_NEAR(moved, kIds / 5, kIds / 50);
}

TEST(RendezvousTest, ALeaveMovesOnlyTheLeaversIds) {
  constexpr int kIds = 20000;
  const HomeRing before(Nodes(4));
  std::vector<std::string> three = Nodes(4);
  three.erase(three.begin() + 2);
  const HomeRing after(three);
  int moved = 0;
  for (int i = 0; i < kIds; ++i) {
    const std::string& a = before.HomeOf(Id(i));
    if (a != after.HomeOf(Id(i))) {
      ++moved;
      EXPECT_EQ(a, "node-2");
    }
  }
  EXPECT_NEAR(moved, kIds / 4, kIds / 40);
}

TEST(RendezvousTest, TheHomeDoesNotDependOnTheOrderOfTheList) {
  const HomeRing a({"c", "a", "b"});
  const HomeRing b({"b", "c", "a", "a"});
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(a.HomeOf(Id(i)), b.HomeOf(Id(i)));
}

TEST(DirectoryShardTest, UpdatesRemovalsAndLeavers) {
  DirectoryShard shard;
  shard.Apply("a", {{Id(1), false, HolderTier::kHost}, {Id(2), false, HolderTier::kPool}});
  shard.Apply("b", {{Id(1), false, HolderTier::kPool}});
  std::vector<BlockHolder> h = shard.Holders(Id(1));
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], (BlockHolder{"b", HolderTier::kPool}));  // fastest tier first
  EXPECT_EQ(h[1], (BlockHolder{"a", HolderTier::kHost}));
  // A tier change replaces the entry; a removal drops it.
  shard.Apply("a", {{Id(1), false, HolderTier::kDisk}, {Id(2), true, HolderTier::kPool}});
  EXPECT_EQ(shard.Holders(Id(1))[1].tier, HolderTier::kDisk);
  EXPECT_TRUE(shard.Holders(Id(2)).empty());
  EXPECT_EQ(shard.size(), 1u);
  shard.DropNode("b");
  ASSERT_EQ(shard.Holders(Id(1)).size(), 1u);
  shard.DropNode("a");
  EXPECT_EQ(shard.size(), 0u);
}

TEST(DirectoryShardTest, DropNotHomedAtKeepsOnlyThisNodesShare) {
  DirectoryShard shard;
  std::vector<HoldingUpdate> all;
  for (int i = 0; i < 1000; ++i) all.push_back({Id(i), false, HolderTier::kPool});
  shard.Apply("x", all);
  const HomeRing ring({"a", "b", "c"});
  const std::size_t dropped = shard.DropNotHomedAt(ring, "b");
  EXPECT_EQ(shard.size() + dropped, 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(!shard.Holders(Id(i)).empty(), ring.HomeOf(Id(i)) == "b");
  }
}

KvEvent Event(KvEventType type, const ContentId& id, KvTier tier = KvTier::kNone,
              KvTier previous = KvTier::kNone) {
  KvEvent e;
  e.type = type;
  e.content_id = id;
  e.tier = tier;
  e.previous_tier = previous;
  return e;
}

TEST(HoldingsTest, ReportsOnlyChangesOfTheBestTier) {
  Holdings h;
  // Two pools store the same node: one update (pool).
  std::vector<HoldingUpdate> u = h.Apply({Event(KvEventType::kStored, Id(1), KvTier::kPrimary),
                                          Event(KvEventType::kStored, Id(1), KvTier::kPrimary)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].tier, HolderTier::kPool);
  // Offloaded to host: still in the pools, no change.
  EXPECT_TRUE(h.Apply({Event(KvEventType::kTierChanged, Id(1), KvTier::kHost)}).empty());
  // Leaves both pools: best is now host.
  u = h.Apply({Event(KvEventType::kRemoved, Id(1)), Event(KvEventType::kRemoved, Id(1))});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].tier, HolderTier::kHost);
  // Spilled host → disk.
  u = h.Apply({Event(KvEventType::kTierChanged, Id(1), KvTier::kDisk, KvTier::kHost)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].tier, HolderTier::kDisk);
  EXPECT_EQ(h.All().size(), 1u);
  // Dropped from disk: removed.
  u = h.Apply({Event(KvEventType::kTierChanged, Id(1), KvTier::kNone, KvTier::kDisk)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_TRUE(u[0].removed);
  EXPECT_TRUE(h.All().empty());
  // Stored and removed within one batch: nothing to tell anyone.
  EXPECT_TRUE(
      h.Apply({Event(KvEventType::kStored, Id(2)), Event(KvEventType::kRemoved, Id(2))}).empty());
}

KvEvent InPool(KvEventType type, const ContentId& id, int pool) {
  KvEvent e = Event(type, id, type == KvEventType::kStored ? KvTier::kPrimary : KvTier::kNone);
  e.pool = PoolId{pool};
  return e;
}

TEST(HoldingsTest, AnEventAppliedTwiceChangesNothing) {
  Holdings h;
  const std::vector<KvEvent> stored = {InPool(KvEventType::kStored, Id(1), 0),
                                       InPool(KvEventType::kStored, Id(1), 1)};
  EXPECT_EQ(h.Apply(stored).size(), 1u);
  EXPECT_TRUE(h.Apply(stored).empty());  // seen again (after a resync): still held, no update
  // One removal per pool empties it, however often the stores were seen.
  EXPECT_TRUE(h.Apply({InPool(KvEventType::kRemoved, Id(1), 0)}).empty());  // pool 1 still has it
  const std::vector<HoldingUpdate> u = h.Apply({InPool(KvEventType::kRemoved, Id(1), 1)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_TRUE(u[0].removed);
  EXPECT_TRUE(h.Apply({InPool(KvEventType::kRemoved, Id(1), 1)}).empty());
  EXPECT_TRUE(h.All().empty());
}

TEST(HoldingsTest, ReplaceReportsWhatTheSnapshotChanged) {
  Holdings h;
  h.Apply({InPool(KvEventType::kStored, Id(1), 0), InPool(KvEventType::kStored, Id(2), 0),
           InPool(KvEventType::kStored, Id(3), 0)});
  // Id 1 is gone, id 2 only has a host copy now, id 3 is unchanged, id 4 was never announced.
  const std::vector<HoldingUpdate> u =
      h.Replace({Event(KvEventType::kTierChanged, Id(2), KvTier::kHost),
                 InPool(KvEventType::kStored, Id(3), 0),
                 Event(KvEventType::kTierChanged, Id(4), KvTier::kDisk)});
  std::map<ContentId, HoldingUpdate> by_id;
  for (const HoldingUpdate& x : u) by_id[x.id] = x;
  ASSERT_EQ(by_id.size(), 3u);
  EXPECT_TRUE(by_id[Id(1)].removed);
  EXPECT_FALSE(by_id[Id(2)].removed);
  EXPECT_EQ(by_id[Id(2)].tier, HolderTier::kHost);
  EXPECT_EQ(by_id[Id(4)].tier, HolderTier::kDisk);
  EXPECT_FALSE(by_id.contains(Id(3)));
  EXPECT_EQ(h.All().size(), 3u);
  // The events after the snapshot apply on top; one that the snapshot already had is a no-op.
  EXPECT_TRUE(h.Apply({InPool(KvEventType::kStored, Id(3), 0)}).empty());
  EXPECT_TRUE(h.Replace({}).size() == 3u);
  EXPECT_TRUE(h.All().empty());
}

}  // namespace
}  // namespace kvmesh
