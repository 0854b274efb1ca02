// Eviction policies: priority then LRU order, LRU ignoring priorities, erase / re-insert with an
// old stamp, priority changes; against a sorted reference under random operations.
#include "pool/eviction_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <tuple>

namespace kvmesh {
namespace {

std::vector<EvictionEntry> Drain(EvictionPolicy& p) {
  std::vector<EvictionEntry> out;
  while (auto v = p.Victim()) {
    out.push_back(*v);
    p.Erase(*v);
  }
  return out;
}

TEST(EvictionPolicyTest, PriorityLruEvictsLowestPriorityThenOldest) {
  PriorityLruPolicy p;
  p.Insert(1, 35, 10);
  p.Insert(2, 10, 50);
  p.Insert(3, 35, 5);
  p.Insert(4, 90, 1);
  p.Insert(5, 10, 20);
  EXPECT_EQ(p.size(), 5u);
  EXPECT_EQ(Drain(p), (std::vector<EvictionEntry>{5, 2, 3, 1, 4}));
}

TEST(EvictionPolicyTest, LruIgnoresPriority) {
  LruPolicy p;
  p.Insert(1, 35, 10);
  p.Insert(2, 0, 50);
  p.Insert(3, 100, 5);
  p.SetPriority(1, 0);
  EXPECT_EQ(Drain(p), (std::vector<EvictionEntry>{3, 1, 2}));
}

TEST(EvictionPolicyTest, SetPriorityKeepsStampAndReorders) {
  PriorityLruPolicy p;
  p.Insert(1, 35, 1);
  p.Insert(2, 35, 2);
  p.Insert(3, 35, 3);
  p.SetPriority(1, 80);
  EXPECT_EQ(*p.Victim(), 2u);
  p.SetPriority(3, 0);
  EXPECT_EQ(Drain(p), (std::vector<EvictionEntry>{3, 2, 1}));
}

TEST(EvictionPolicyTest, ReinsertWithOldStampGoesToItsPlace) {
  PriorityLruPolicy p;
  p.Insert(7, 35, 100);
  p.Insert(8, 35, 200);
  p.Erase(7);
  EXPECT_FALSE(p.Contains(7));
  p.Insert(9, 35, 50);  // an older stamp inserted later
  EXPECT_EQ(Drain(p), (std::vector<EvictionEntry>{9, 8}));
}

TEST(EvictionPolicyTest, ParseAndNames) {
  EXPECT_EQ(*ParseEvictionPolicy("LRU"), EvictionPolicyKind::kLru);
  EXPECT_EQ(*ParseEvictionPolicy("priority-lru"), EvictionPolicyKind::kPriorityLru);
  EXPECT_TRUE(ParseEvictionPolicy("fifo").status().IsInvalidArgument());
  EXPECT_EQ(EvictionPolicyName(EvictionPolicyKind::kLru), "lru");
  EXPECT_EQ(MakeEvictionPolicy(EvictionPolicyKind::kLru)->kind(), EvictionPolicyKind::kLru);
}

// Random inserts, erases and priority changes against std::map ordered by the documented key.
TEST(EvictionPolicyTest, MatchesSortedReference) {
  for (EvictionPolicyKind kind : {EvictionPolicyKind::kPriorityLru, EvictionPolicyKind::kLru}) {
    auto policy = MakeEvictionPolicy(kind);
    std::map<EvictionEntry, std::pair<int, std::uint64_t>> ref;  // entry -> (priority, stamp)
    std::mt19937 rng(7);
    std::uint64_t stamp = 0;
    std::set<std::uint64_t> used;
    auto expected_victim = [&]() {
      EvictionEntry best = 0;
      std::tuple<int, std::uint64_t> best_key{1 << 30, 0};
      for (const auto& [e, v] : ref) {
        const std::tuple<int, std::uint64_t> key{kind == EvictionPolicyKind::kLru ? 0 : v.first,
                                                 v.second};
        if (key < best_key) {
          best_key = key;
          best = e;
        }
      }
      return best;
    };
    for (int step = 0; step < 6000; ++step) {
      const EvictionEntry e = rng() % 200;
      const int op = rng() % 4;
      if (op == 0 || op == 1) {
        if (!ref.contains(e)) {
          const int prio = rng() % 101;
          // Mostly fresh stamps, sometimes an older one (a parent becoming a leaf); unique.
          std::uint64_t s = ++stamp * 2;
          if (rng() % 2 && stamp > 1) s = (rng() % stamp) * 2 + 1 + 2 * 1000000;
          while (used.contains(s)) s += 2 * 1000000;
          used.insert(s);
          policy->Insert(e, prio, s);
          ref[e] = {prio, s};
        }
      } else if (op == 2) {
        if (ref.contains(e)) {
          policy->Erase(e);
          ref.erase(e);
        }
      } else if (ref.contains(e)) {
        const int prio = rng() % 101;
        policy->SetPriority(e, prio);
        ref[e].first = prio;
      }
      ASSERT_EQ(policy->size(), ref.size());
      if (!ref.empty()) {
        ASSERT_EQ(*policy->Victim(), expected_victim()) << "step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace kvmesh
