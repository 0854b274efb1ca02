// The offline optimum of a replay (optimal_replay.h): small traces worked out by hand, an
// exhaustive search over every eviction schedule on tiny random traces (which the optimum must
// match exactly), and the bounds it must respect against the online policies.
#include "pool/optimal_replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "pool/trace.h"
#include "pool/trace_replay.h"

namespace kvmesh {
namespace {

TraceRequest Req(std::vector<std::uint64_t> ids) {
  TraceRequest r;
  r.input_length = static_cast<std::int64_t>(ids.size()) * kMooncakeBlockTokens;
  r.hash_ids = std::move(ids);
  return r;
}

ReplayConfig Config(std::optional<std::int64_t> capacity) {
  ReplayConfig c;
  c.tokens_per_block = 16;
  c.capacity_blocks = capacity;
  c.optimal = true;
  return c;
}

ReplayResult Optimal(const std::vector<TraceRequest>& trace, std::optional<std::int64_t> cap) {
  auto r = ReplayOptimal(trace, Config(cap));
  KVMESH_CHECK(r.ok()) << r.status();
  return *r;
}

ReplayResult Online(const std::vector<TraceRequest>& trace, std::optional<std::int64_t> cap,
                    EvictionPolicyKind policy) {
  ReplayConfig c = Config(cap);
  c.optimal = false;
  c.policy = policy;
  auto r = ReplayTrace(trace, c);
  KVMESH_CHECK(r.ok()) << r.status();
  return *r;
}

// Capacity 2, one block per request: a b c a b a.
//   LRU: c evicts a, a evicts b, b evicts c: one hit (the last a).
//   Optimum: c evicts b (next use 4, farther than a's 3): a hits; b evicts c (never used again):
//   the last a hits too. Two hits; no schedule does better — a and b cannot both survive c (the
//   pool holds two blocks and c needs one), so at most one of requests 3 and 4 hits, plus the last.
TEST(OptimalReplayTest, BeladyOnSingleBlocks) {
  const std::vector<TraceRequest> trace = {Req({1}), Req({2}), Req({3}),
                                           Req({1}), Req({2}), Req({1})};
  const ReplayResult opt = Optimal(trace, 2);
  EXPECT_TRUE(opt.optimal);
  EXPECT_EQ(opt.policy_name(), "optimal");
  EXPECT_EQ(opt.reused_blocks, 2);
  EXPECT_EQ(opt.input_blocks, 6);
  EXPECT_EQ(opt.evicted_blocks, 2);  // b at request 2, c at request 4
  EXPECT_EQ(opt.cached_blocks, 2);
  EXPECT_EQ(Online(trace, 2, EvictionPolicyKind::kLru).reused_blocks, 1);
}

// Capacity 3, prefixes: [1 2 3] [1 4] [1 2 3] [1 4].
//   Request 1 reuses 1 and needs a block for 4: the only leaf is 3 (2 has a child), so 3 goes.
//   Request 2 reuses 1 2 and needs 3: 4 (next use 3) is the only leaf outside the request.
//   Request 3 reuses 1 and needs 4: the leaf 3 is never used again. Hits 1 + 2 + 1 = 4 of 10.
//   Better is impossible: request 2 cannot reuse all three (requests 1 and 2 would need 1 2 3 4
//   in 3 blocks), and a block below an evicted parent is never reused.
TEST(OptimalReplayTest, WholePrefixesStayCached) {
  const std::vector<TraceRequest> trace = {Req({1, 2, 3}), Req({1, 4}), Req({1, 2, 3}),
                                           Req({1, 4})};
  const ReplayResult opt = Optimal(trace, 3);
  EXPECT_EQ(opt.reused_blocks, 4);
  EXPECT_EQ(opt.input_blocks, 10);
  EXPECT_EQ(opt.evicted_blocks, 3);
}

// Capacity 2: [1] [5] [1 2 3] [6] [5] [1]. Request 2 has more blocks than the pool: rejected,
// it touches nothing and is no use of block 1. At request 3 the pool holds 1 (next use: request
// 5) and 5 (next use: 4): 1 goes. Then 5 hits; at request 5 block 1 comes back, evicting 6
// (never used again). One hit, one rejected request.
TEST(OptimalReplayTest, RejectedRequestsAreNoUse) {
  const std::vector<TraceRequest> trace = {Req({1}), Req({5}), Req({1, 2, 3}),
                                           Req({6}), Req({5}), Req({1})};
  const ReplayResult opt = Optimal(trace, 2);
  EXPECT_EQ(opt.rejected_requests, 1);
  EXPECT_EQ(opt.reused_blocks, 1);
  EXPECT_EQ(opt.input_blocks, 8);
  EXPECT_EQ(opt.requests, 6);
}

TEST(OptimalReplayTest, UnlimitedReusesEverythingSeenBefore) {
  const std::vector<TraceRequest> trace = {Req({1, 2}), Req({1, 2, 3}), Req({}), Req({1, 4}),
                                           Req({1, 2, 3})};
  const ReplayResult opt = Optimal(trace, std::nullopt);
  EXPECT_EQ(opt.reused_blocks, 2 + 1 + 3);
  EXPECT_EQ(opt.evicted_blocks, 0);
  EXPECT_EQ(opt.cached_blocks, 4);
  EXPECT_EQ(opt.reused_blocks, Online(trace, std::nullopt, EvictionPolicyKind::kLru).reused_blocks);
  ASSERT_EQ(opt.stats.pools.size(), 1u);
  EXPECT_EQ(opt.stats.pools[0].cached_blocks, 4);
}

// ---- exhaustive search

// The most blocks any schedule reuses: before each request the pool holds a set S (any set, not
// only whole prefixes); the request reuses the longest prefix of its blocks in S; it needs all its
// blocks P at once, so it evicts some of S - P first; afterwards any block may be dropped. The sets
// reachable after it are exactly the subsets S' of S u P with |S' u P| <= capacity.
class Exhaustive {
 public:
  Exhaustive(const std::vector<TraceRequest>& trace, int capacity) : capacity_(capacity) {
    std::map<std::pair<int, std::uint64_t>, int> nodes;
    for (const TraceRequest& r : trace) {
      std::vector<int> path;
      int parent = -1;
      for (std::uint64_t id : r.hash_ids) {
        auto [it, added] = nodes.try_emplace({parent, id}, static_cast<int>(nodes.size()));
        path.push_back(it->second);
        parent = it->second;
      }
      paths_.push_back(path);
    }
    KVMESH_CHECK(nodes.size() <= 16) << "too many blocks for the search";
  }
  int Best() { return Search(0, 0); }

 private:
  int Search(std::size_t t, std::uint32_t cached) {
    if (t == paths_.size()) return 0;
    const auto key = std::make_pair(t, cached);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const std::vector<int>& path = paths_[t];
    int best = 0;
    if (static_cast<int>(path.size()) > capacity_) {
      best = Search(t + 1, cached);  // rejected: touches nothing
    } else {
      int hits = 0;
      while (hits < static_cast<int>(path.size()) && (cached >> path[hits] & 1) != 0) ++hits;
      std::uint32_t request = 0;
      for (int n : path) request |= 1u << n;
      const std::uint32_t all = cached | request;
      // Every subset of `all` (enumerated by the standard sub-mask walk, the empty set included).
      for (std::uint32_t next = all;; next = (next - 1) & all) {
        if (std::popcount(next | request) <= capacity_) {
          best = std::max(best, hits + Search(t + 1, next));
        }
        if (next == 0) break;
      }
    }
    memo_[key] = best;
    return best;
  }

  int capacity_;
  std::vector<std::vector<int>> paths_;
  std::map<std::pair<std::size_t, std::uint32_t>, int> memo_;
};

TEST(OptimalReplayTest, MatchesAnExhaustiveSearchOnTinyTraces) {
  std::mt19937 rng(2024);
  int nontrivial = 0;
  for (int round = 0; round < 300; ++round) {
    // Paths over a binary alphabet of depth <= 3: at most 14 distinct blocks.
    std::vector<TraceRequest> trace;
    const int requests = 3 + static_cast<int>(rng() % 6);
    for (int i = 0; i < requests; ++i) {
      std::vector<std::uint64_t> ids(1 + rng() % 3);
      for (std::uint64_t& id : ids) id = rng() % 2;
      trace.push_back(Req(ids));
    }
    const int capacity = 1 + static_cast<int>(rng() % 4);
    const ReplayResult opt = Optimal(trace, capacity);
    Exhaustive search(trace, capacity);
    ASSERT_EQ(opt.reused_blocks, search.Best()) << "round " << round << " capacity " << capacity;
    for (EvictionPolicyKind p : AllEvictionPolicies()) {
      const std::int64_t online = Online(trace, capacity, p).reused_blocks;
      ASSERT_LE(online, opt.reused_blocks) << EvictionPolicyName(p) << " round " << round;
      nontrivial += online < opt.reused_blocks ? 1 : 0;
    }
  }
  EXPECT_GT(nontrivial, 20);  // the traces are hard enough that online policies lose somewhere
}

TEST(OptimalReplayTest, BoundsEveryPolicyOnSyntheticTraces) {
  SyntheticTraceOptions g;
  g.conversations = 120;
  g.turns = 4;
  g.system_prompts = 5;
  g.system_prompt_blocks = 2;
  g.concurrency = 30;
  g.one_off_share = 0.3;
  auto trace = GenerateSyntheticTrace(g);
  ASSERT_TRUE(trace.ok());
  const std::int64_t unlimited = Optimal(*trace, std::nullopt).reused_blocks;
  std::int64_t last = 0;
  for (std::int64_t capacity : {20, 60, 150, 400}) {
    const ReplayResult opt = Optimal(*trace, capacity);
    EXPECT_GE(opt.reused_blocks, last) << capacity;  // more room never hurts the optimum
    EXPECT_LE(opt.reused_blocks, unlimited);
    last = opt.reused_blocks;
    for (EvictionPolicyKind p : AllEvictionPolicies()) {
      EXPECT_LE(Online(*trace, capacity, p).reused_blocks, opt.reused_blocks)
          << EvictionPolicyName(p) << " at " << capacity;
    }
  }
}

TEST(OptimalReplayTest, OnlyWithTheWholeTraceAndWithoutTiers) {
  ReplayConfig c = Config(10);
  EXPECT_TRUE(TraceReplay::Create(c).status().IsInvalidArgument());
  EXPECT_TRUE(ReplayTrace(std::vector<TraceRequest>{Req({1})}, c).ok());  // dispatched
  struct NoTiers : ReplayTierHooks {
    std::int64_t OnPoolMiss(const ReplayMiss&) override { return 0; }
  } hooks;
  c.tier_hooks = &hooks;
  EXPECT_TRUE(c.Validate().IsInvalidArgument());
}

TEST(OptimalReplayTest, PolicyNames) {
  ReplayConfig c;
  EXPECT_EQ(c.policy, kDefaultEvictionPolicy);
  ASSERT_TRUE(SetReplayPolicy("OPTIMAL", &c).ok());
  EXPECT_TRUE(c.optimal);
  ASSERT_TRUE(SetReplayPolicy("priority-lru", &c).ok());
  EXPECT_FALSE(c.optimal);
  EXPECT_EQ(c.policy, EvictionPolicyKind::kPriorityLru);
  const Status bad = SetReplayPolicy("belady", &c);
  EXPECT_TRUE(bad.IsInvalidArgument());
  EXPECT_NE(bad.message().find("lru, priority-lru, learned, optimal"), std::string::npos);
}

}  // namespace
}  // namespace kvmesh
