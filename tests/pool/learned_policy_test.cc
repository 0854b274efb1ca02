// The learned eviction policy: priorities first, exactly; within a priority the learned reuse
// probability against recency; the ghost history; determinism. Also the pieces under it: the
// indexed heap with composite keys and the ghost table.
#include "pool/learned_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "pool/entry_heap.h"
#include "pool/ghost_table.h"

namespace kvmesh {
namespace {

constexpr std::int64_t kCapacity = 64;

// Drives a policy like a cache would: admit, release (a use), insert as a candidate.
class Driver {
 public:
  explicit Driver(LearnedPolicy& p) : p_(p) {}
  // A new item used once and left evictable.
  void AdmitAndRelease(EvictionEntry e, std::uint64_t fingerprint, bool leaf, int depth = 3,
                       int priority = kDefaultPriority) {
    p_.OnAdmit(e, fingerprint, depth);
    Release(e, leaf, priority);
  }
  void Release(EvictionEntry e, bool leaf, int priority = kDefaultPriority) {
    p_.OnRelease(e, ++stamp_, leaf);
    p_.Insert(e, priority, stamp_);
  }
  // A hit: the cached item is used again.
  void Reuse(EvictionEntry e, bool leaf, int priority = kDefaultPriority) {
    p_.Erase(e);
    p_.OnAcquire(e);
    Release(e, leaf, priority);
  }
  void Evict(EvictionEntry e) {
    p_.Erase(e);
    p_.OnRetire(e);
  }
  std::uint64_t stamp() const { return stamp_; }
  void Advance(std::uint64_t n) { stamp_ += n; }

 private:
  LearnedPolicy& p_;
  std::uint64_t stamp_ = 0;
};

// Teaches the policy that leaves (depth 3) are never reused and interior nodes always are:
// `rounds` items of each kind, each interior one reused once before all are evicted.
void Teach(Driver& d, int rounds, EvictionEntry first) {
  for (int i = 0; i < rounds; ++i) {
    const EvictionEntry leaf = first + 2 * i;
    const EvictionEntry interior = leaf + 1;
    d.AdmitAndRelease(leaf, 1000000 + leaf, /*leaf=*/true);
    d.AdmitAndRelease(interior, 1000000 + interior, /*leaf=*/false);
    d.Reuse(interior, /*leaf=*/false);
    d.Evict(leaf);
    d.Evict(interior);
  }
}

TEST(LearnedPolicyTest, LearnsWhichClassesAreReused) {
  LearnedPolicy p({.capacity = kCapacity});
  Driver d(p);
  Teach(d, 200, 100);
  const double leaf = p.ReuseProbability(LearnedPolicy::ClassOf(0, true, 3));
  const double interior = p.ReuseProbability(LearnedPolicy::ClassOf(0, false, 3));
  EXPECT_LT(leaf, 0.02);
  EXPECT_GT(interior, 0.95);
  EXPECT_EQ(p.observed_reuses(), 200u);
  EXPECT_EQ(p.size(), 0u);
}

TEST(LearnedPolicyTest, EvictsTheUnlikelyClassBeforeAMoreRecentLikelyOne) {
  LearnedPolicy p({.capacity = kCapacity});
  Driver d(p);
  Teach(d, 200, 100);
  d.AdmitAndRelease(1, 11, /*leaf=*/false);  // older, but its class is always reused
  d.AdmitAndRelease(2, 12, /*leaf=*/true);   // newer, but its class never is
  EXPECT_EQ(*p.Victim(), 2u);
  // Recency still counts: far enough in the past, the likely class goes first. The gap it takes is
  // tau * 2 * ln(p_interior / p_leaf) stamps.
  const double gap = p.tau() * std::log(p.ReuseProbability(LearnedPolicy::ClassOf(0, false, 3)) /
                                        p.ReuseProbability(LearnedPolicy::ClassOf(0, true, 3)));
  ASSERT_GT(gap, 0);
  d.Advance(static_cast<std::uint64_t>(gap) + 10);
  d.AdmitAndRelease(3, 13, /*leaf=*/true);
  d.Evict(2);
  EXPECT_EQ(*p.Victim(), 1u);
}

TEST(LearnedPolicyTest, PrioritiesComeFirstWhateverWasLearned) {
  LearnedPolicy p({.capacity = kCapacity});
  Driver d(p);
  Teach(d, 200, 100);
  d.AdmitAndRelease(1, 11, /*leaf=*/true, 3, /*priority=*/60);   // unlikely, high priority
  d.AdmitAndRelease(2, 12, /*leaf=*/false, 3, /*priority=*/10);  // likely, low priority
  d.AdmitAndRelease(3, 13, /*leaf=*/false, 3, /*priority=*/35);
  EXPECT_EQ(*p.Victim(), 2u);
  p.SetPriority(2, 90);
  EXPECT_EQ(*p.Victim(), 3u);
  p.SetPriority(3, 100);
  EXPECT_EQ(*p.Victim(), 1u);
  // A priority change keeps the learned score: back at 35 with an equal-class newcomer, the older
  // one still goes first.
  p.SetPriority(3, 35);
  p.SetPriority(1, 100);
  d.Advance(50);
  d.AdmitAndRelease(4, 14, /*leaf=*/false, 3, 35);
  EXPECT_EQ(*p.Victim(), 3u);
}

TEST(LearnedPolicyTest, OneClassOneOffsetIsLru) {
  // Items whose class has one estimate get one score offset: within a priority, LRU order. Here
  // the class (first use, leaf, depth 0) was never reused, so its estimate sits at the floor.
  LearnedPolicy p({.capacity = kCapacity});
  Driver d(p);
  for (EvictionEntry e = 1000; e < 6000; ++e) {
    d.AdmitAndRelease(e, e, /*leaf=*/true, /*depth=*/0);
    d.Evict(e);
  }
  ASSERT_EQ(p.ReuseProbability(LearnedPolicy::ClassOf(0, true, 0)), LearnedPolicy::kMinProbability);
  const std::uint64_t base = d.stamp();
  const EvictionEntry order[] = {7, 3, 12, 0, 19};
  for (EvictionEntry e : order) {
    p.OnAdmit(e, 20000 + e, 0);
    p.OnRelease(e, base + 1 + e, true);  // released out of stamp order
    p.Insert(e, kDefaultPriority, base + 1 + e);
  }
  std::vector<EvictionEntry> drained;
  while (auto v = p.Victim()) {
    drained.push_back(*v);
    p.Erase(*v);
  }
  EXPECT_EQ(drained, (std::vector<EvictionEntry>{0, 3, 7, 12, 19}));
}

TEST(LearnedPolicyTest, GhostKeepsTheHistoryOfAReturningBlock) {
  LearnedPolicy p({.capacity = kCapacity});
  Driver d(p);
  d.AdmitAndRelease(5, 777, true);
  d.Reuse(5, true);
  d.Reuse(5, true);  // three uses so far
  d.Evict(5);
  EXPECT_EQ(p.ghost_entries(), 1u);
  const std::uint64_t before = p.observed_reuses();
  p.OnAdmit(9, 777, 3);  // the same content under another entry: a return
  EXPECT_EQ(p.observed_reuses(), before + 1);
  EXPECT_EQ(p.ghost_entries(), 0u);
  // Its next release counts in the class of 3 earlier uses.
  const int cls = LearnedPolicy::ClassOf(3, true, 3);
  const double prior = p.ReuseProbability(cls);
  p.OnRelease(9, d.stamp() + 1, true);
  EXPECT_NE(p.ReuseProbability(cls), prior);
  // Unknown content starts without history.
  p.OnAdmit(10, 778, 3);
  EXPECT_EQ(p.observed_reuses(), before + 1);
}

TEST(LearnedPolicyTest, GhostIsBoundedByTheCapacity) {
  LearnedPolicy p({.capacity = 4});
  Driver d(p);
  for (EvictionEntry e = 0; e < 1000; ++e) {
    d.AdmitAndRelease(e, 5000 + e, true);
    d.Evict(e);
  }
  EXPECT_EQ(p.ghost_entries(), 4u * LearnedPolicy::kGhostPerCapacity);
  LearnedPolicy unbounded({.capacity = 0});  // no capacity: no evictions expected, no ghost
  Driver u(unbounded);
  u.AdmitAndRelease(1, 1, true);
  u.Evict(1);
  EXPECT_EQ(unbounded.ghost_entries(), 0u);
}

TEST(LearnedPolicyTest, SameCallsSameVictims) {
  auto run = [] {
    LearnedPolicy p({.capacity = 16});
    Driver d(p);
    std::mt19937 rng(11);
    std::set<EvictionEntry> cached;
    std::vector<EvictionEntry> victims;
    for (int step = 0; step < 5000; ++step) {
      const auto e = static_cast<EvictionEntry>(rng() % 40);
      if (!cached.contains(e)) {
        if (cached.size() >= 16) {
          const EvictionEntry v = *p.Victim();
          victims.push_back(v);
          d.Evict(v);
          cached.erase(v);
        }
        d.AdmitAndRelease(e, 9000 + e, rng() % 2 == 0, static_cast<int>(rng() % 20));
        cached.insert(e);
      } else {
        d.Reuse(e, rng() % 2 == 0);
      }
    }
    return victims;
  };
  const std::vector<EvictionEntry> a = run();
  EXPECT_GT(a.size(), 1000u);
  EXPECT_EQ(a, run());
}

TEST(LearnedPolicyTest, ClassesBucketUsesLeavesAndDepth) {
  EXPECT_EQ(LearnedPolicy::ClassOf(0, false, 0), 0);
  EXPECT_NE(LearnedPolicy::ClassOf(0, true, 0), LearnedPolicy::ClassOf(0, false, 0));
  EXPECT_EQ(LearnedPolicy::ClassOf(8, true, 5), LearnedPolicy::ClassOf(100, true, 6));
  EXPECT_EQ(LearnedPolicy::ClassOf(1, false, 1), LearnedPolicy::ClassOf(1, false, 2));
  EXPECT_NE(LearnedPolicy::ClassOf(1, false, 2), LearnedPolicy::ClassOf(1, false, 3));
  EXPECT_EQ(LearnedPolicy::ClassOf(2, false, 127), LearnedPolicy::ClassOf(2, false, 100000));
  EXPECT_EQ(LearnedPolicy::ClassOf(100, true, 100000), LearnedPolicy::kClasses - 1);
}

TEST(LearnedPolicyTest, MadeByNameAndKind) {
  EXPECT_EQ(*ParseEvictionPolicy("Learned"), EvictionPolicyKind::kLearned);
  EXPECT_EQ(EvictionPolicyName(EvictionPolicyKind::kLearned), "learned");
  EXPECT_EQ(MakeEvictionPolicy(EvictionPolicyKind::kLearned, {.capacity = 8})->kind(),
            EvictionPolicyKind::kLearned);
  EXPECT_EQ(kDefaultEvictionPolicy, EvictionPolicyKind::kLearned);
  EXPECT_EQ(AllEvictionPolicies().size(), 3u);
}

// ---- the pieces

TEST(EntryHeapTest, CompositeKeysMatchASortedSet) {
  using Key = std::pair<std::uint64_t, std::uint64_t>;
  BasicEntryHeap<Key> heap;
  std::map<EvictionEntry, Key> ref;
  std::mt19937 rng(5);
  for (int step = 0; step < 20000; ++step) {
    const auto e = static_cast<EvictionEntry>(rng() % 300);
    const Key k{rng() % 7, rng()};
    if (!ref.contains(e)) {
      heap.Push(e, k);
      ref[e] = k;
    } else if (rng() % 2 == 0) {
      heap.Erase(e);
      ref.erase(e);
    } else {
      heap.SetKey(e, k);
      ref[e] = k;
    }
    ASSERT_EQ(heap.size(), ref.size());
    if (ref.empty()) continue;
    auto best = ref.begin();
    for (auto it = ref.begin(); it != ref.end(); ++it) {
      if (it->second < best->second) best = it;
    }
    ASSERT_EQ(heap.KeyOf(*heap.Top()), best->second);
  }
}

TEST(GhostTableTest, RemembersTakesAndForgetsTheOldest) {
  GhostTable g(3);
  g.Insert({.fingerprint = 1, .stamp = 10, .uses = 1, .cls = 4});
  g.Insert({.fingerprint = 2, .stamp = 20, .uses = 2, .cls = 5});
  g.Insert({.fingerprint = 3, .stamp = 30, .uses = 3, .cls = 6});
  EXPECT_EQ(g.size(), 3u);
  auto two = g.Take(2);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->stamp, 20u);
  EXPECT_EQ(two->uses, 2u);
  EXPECT_EQ(two->cls, 5);
  EXPECT_FALSE(g.Take(2).has_value());
  g.Insert({.fingerprint = 4, .stamp = 40});  // overwrites the oldest slot (1's)
  g.Insert({.fingerprint = 5, .stamp = 50});  // overwrites 2's (already taken)
  EXPECT_FALSE(g.Take(1).has_value());
  EXPECT_EQ(g.Take(3)->stamp, 30u);
  EXPECT_EQ(g.Take(4)->stamp, 40u);
  g.Insert({.fingerprint = 5, .stamp = 55});  // replaces, not duplicates
  EXPECT_EQ(g.Take(5)->stamp, 55u);
  EXPECT_FALSE(g.Take(5).has_value());
  EXPECT_EQ(g.size(), 0u);
}

TEST(GhostTableTest, ManyEntriesStayFindableUpToTheCapacity) {
  GhostTable g(1000);
  for (std::uint64_t f = 0; f < 5000; ++f) g.Insert({.fingerprint = f * 7919, .stamp = f});
  EXPECT_EQ(g.size(), 1000u);
  for (std::uint64_t f = 0; f < 4000; ++f) EXPECT_FALSE(g.Take(f * 7919).has_value()) << f;
  for (std::uint64_t f = 4000; f < 5000; ++f) EXPECT_EQ(g.Take(f * 7919)->stamp, f);
  GhostTable none(0);
  none.Insert({.fingerprint = 1});
  EXPECT_FALSE(none.Take(1).has_value());
}

}  // namespace
}  // namespace kvmesh
