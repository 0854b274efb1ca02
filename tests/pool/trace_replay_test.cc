// Trace replay: small traces whose hit rates and evictions are worked out by hand, unlimited vs
// limited capacity, LRU vs priority-LRU vs learned, rejected requests, the tier hooks and progress.
// The Mooncake figures are in trace_replay_mooncake_test.cc.
#include "pool/trace_replay.h"

#include <gtest/gtest.h>

#include <set>

namespace kvmesh {
namespace {

constexpr std::int32_t kT = 4;  // tokens per block in the small cases (the hit rates do not care)

// A request of whole 512-token blocks (no partial tail).
TraceRequest Full(std::vector<std::uint64_t> ids) {
  TraceRequest r;
  r.input_length = std::ssize(ids) * kMooncakeBlockTokens;
  r.hash_ids = std::move(ids);
  return r;
}

// A request whose last block is partial (100 tokens of 512).
TraceRequest Tail(std::vector<std::uint64_t> ids) {
  TraceRequest r = Full(std::move(ids));
  r.input_length -= kMooncakeBlockTokens - 100;
  return r;
}

ReplayConfig Config(std::optional<std::int64_t> capacity,
                    EvictionPolicyKind policy = EvictionPolicyKind::kLru) {
  ReplayConfig c;
  c.tokens_per_block = kT;
  c.capacity_blocks = capacity;
  c.policy = policy;
  return c;
}

ReplayResult Replay(const std::vector<TraceRequest>& trace, const ReplayConfig& config) {
  auto r = ReplayTrace(trace, config);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ReplayResult{};
}

// Whether the manager would reuse all of `ids` now.
bool Cached(const TraceReplay& replay, const std::vector<std::uint64_t>& ids) {
  std::vector<Token> tokens(ids.size() * kT);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    BlockTokens(ids[i], std::span<Token>(tokens.data() + i * kT, kT));
  }
  SequenceOptions o;
  o.reuse_last_token = true;
  auto l = replay.manager().LookupPrefix(tokens, o);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() && l->cached_blocks == std::ssize(ids);
}

TEST(TraceReplayTest, SharedSystemPromptUnlimited) {
  // Three requests over the 2-block system prompt [0, 1]:
  //   [0 1 10 11]     nothing cached                          0 of 4 reused
  //   [0 1 20]        [0 1] cached                            2 of 3
  //   [0 1 10 11 12]  [0 1 10 11] cached (request 1's blocks)  4 of 5
  // hit rate = (0 + 2 + 4) / (4 + 3 + 5) = 6 / 12 = 0.5; unique blocks 0 1 10 11 20 12 = 6.
  const std::vector<TraceRequest> trace = {Full({0, 1, 10, 11}), Full({0, 1, 20}),
                                           Full({0, 1, 10, 11, 12})};
  const ReplayResult r = Replay(trace, Config(std::nullopt));
  EXPECT_EQ(r.requests, 3);
  EXPECT_EQ(r.input_blocks, 12);
  EXPECT_EQ(r.reused_blocks, 6);
  EXPECT_DOUBLE_EQ(r.hit_rate(), 0.5);
  EXPECT_EQ(r.evicted_blocks, 0);
  EXPECT_EQ(r.cached_blocks, 6);
  EXPECT_EQ(r.rejected_requests, 0);
  EXPECT_FALSE(r.capacity_blocks.has_value());
  // The manager's own counters agree.
  EXPECT_EQ(r.stats.pools[0].input_blocks, 12u);
  EXPECT_EQ(r.stats.pools[0].reused_blocks, 6u);
  EXPECT_EQ(r.stats.pools[0].num_blocks, kUnlimitedBlocks);
}

TEST(TraceReplayTest, EveryBlockOfARequestMayMatch) {
  // [5 6] then [5 6] again: 2 of 2 reused (the last block too), then [5]: 1 of 1.
  const ReplayResult r = Replay({Full({5, 6}), Full({5, 6}), Full({5})}, Config(std::nullopt));
  EXPECT_EQ(r.input_blocks, 5);
  EXPECT_EQ(r.reused_blocks, 3);
}

TEST(TraceReplayTest, LruEvictsTheLeastRecentlyUsedLeaf) {
  // Capacity 4 blocks, LRU. Use stamps rise root to leaf at each RemoveSequence.
  //   [1 2]    0 of 2   cached 1 2
  //   [3 4]    0 of 2   cached 1 2 3 4 (full)
  //   [1 2 5]  2 of 3   needs 1 block: 1 and 2 are pinned; of the unpinned, 3 is older than 4
  //                     but has a child, so the oldest leaf, 4, goes. cached 1 2 3 5
  //   [3]      1 of 1   (3 is now a leaf and stays)
  //   [3 4]    1 of 2   needs 1 block: 3 pinned; unpinned leaves: 5 (2 has child 5) -> 5 goes.
  //                     cached 1 2 3 4
  // reused 0+0+2+1+1 = 4 of 2+2+3+1+2 = 10; 2 evictions.
  const std::vector<TraceRequest> trace = {Full({1, 2}), Full({3, 4}), Full({1, 2, 5}), Full({3}),
                                           Full({3, 4})};
  auto replay = TraceReplay::Create(Config(4));
  ASSERT_TRUE(replay.ok()) << replay.status();
  TraceReplay& rp = **replay;
  ASSERT_TRUE(rp.Replay(trace[0]).ok());
  ASSERT_TRUE(rp.Replay(trace[1]).ok());
  ASSERT_TRUE(rp.Replay(trace[2]).ok());
  EXPECT_TRUE(Cached(rp, {1, 2, 5}));
  EXPECT_TRUE(Cached(rp, {3}));
  EXPECT_FALSE(Cached(rp, {3, 4}));
  ASSERT_TRUE(rp.Replay(trace[3]).ok());
  ASSERT_TRUE(rp.Replay(trace[4]).ok());
  EXPECT_TRUE(Cached(rp, {3, 4}));
  EXPECT_TRUE(Cached(rp, {1, 2}));
  EXPECT_FALSE(Cached(rp, {1, 2, 5}));
  const ReplayResult r = rp.Summary();
  EXPECT_EQ(r.input_blocks, 10);
  EXPECT_EQ(r.reused_blocks, 4);
  EXPECT_DOUBLE_EQ(r.hit_rate(), 0.4);
  EXPECT_EQ(r.evicted_blocks, 2);
  EXPECT_EQ(r.cached_blocks, 4);
  // The same through ReplayTrace.
  const ReplayResult again = Replay(trace, Config(4));
  EXPECT_EQ(again.reused_blocks, 4);
  EXPECT_EQ(again.evicted_blocks, 2);
}

TEST(TraceReplayTest, PriorityLruEvictsThePartialTailFirst) {
  // Capacity 3; block 9 is the partial last block of request 2.
  //   [2]      0 of 1   cached 2
  //   [1 9]    0 of 2   cached 2 1 9; stamps 2 < 1 < 9
  //   [5]      0 of 1   needs 1 block; unpinned leaves 2 and 9.
  //                       lru:          2 is older -> 2 goes
  //                       priority-lru: 9 has the tail priority (10 < 35) -> 9 goes
  //   [2]      lru: 0 of 1 (evicted); priority-lru: 1 of 1
  // lru: 0 of 5; priority-lru: 1 of 5.
  const std::vector<TraceRequest> trace = {Full({2}), Tail({1, 9}), Full({5}), Full({2})};
  const ReplayResult lru = Replay(trace, Config(3, EvictionPolicyKind::kLru));
  EXPECT_EQ(lru.input_blocks, 5);
  EXPECT_EQ(lru.reused_blocks, 0);
  ReplayConfig pc = Config(3, EvictionPolicyKind::kPriorityLru);
  pc.priorities.system_prompt_blocks = 0;  // the tail rule alone
  const ReplayResult plru = Replay(trace, pc);
  EXPECT_EQ(plru.input_blocks, 5);
  EXPECT_EQ(plru.reused_blocks, 1);
  EXPECT_DOUBLE_EQ(plru.hit_rate(), 0.2);
  // At the end: [2] and [5] at 35, and the last admission evicted one of 1 and 5... the
  // histogram holds 3 blocks, none at the tail priority (9 is gone).
  EXPECT_EQ(plru.stats.pools[0].cached_by_priority[10], 0);
  EXPECT_EQ(plru.cached_blocks, 3);
}

TEST(TraceReplayTest, PriorityLruKeepsTheSystemPromptBlocks) {
  // Capacity 3, priority-lru with the first block of each request at 60 and no tail rule:
  //   [7 8]  0 of 2   7 at 60, 8 at 35; cached 7 8
  //   [6]    0 of 1   6 at 60; cached 7 8 6
  //   [4]    0 of 1   needs 1; unpinned leaves 8 (35) and 6 (60) -> 8 goes (under lru too:
  //                   8 is older). 4 at 60.
  //   [3]    0 of 1   needs 1; leaves 7 (60, oldest), 6 (60), 4 (60) -> 7 goes; under lru the
  //                   same (7 is the oldest).
  // The histogram shows the priorities: 3 blocks at 60.
  ReplayConfig pc = Config(3, EvictionPolicyKind::kPriorityLru);
  pc.priorities.tail_priority = kDefaultPriority;
  const ReplayResult r = Replay({Full({7, 8}), Full({6}), Full({4}), Full({3})}, pc);
  EXPECT_EQ(r.evicted_blocks, 2);
  EXPECT_EQ(r.stats.pools[0].cached_by_priority[60], 3);
  EXPECT_EQ(r.stats.pools[0].cached_by_priority[35], 0);
  // Under lru every block has the default priority.
  const ReplayResult l = Replay({Full({7, 8}), Full({6}), Full({4}), Full({3})}, Config(3));
  EXPECT_EQ(l.stats.pools[0].cached_by_priority[35], 3);
}

TEST(TraceReplayTest, RequestLargerThanTheCapacityIsRejectedAndCounted) {
  // Capacity 2: [1 2 3] can never be admitted: 3 input blocks, none reused, 1 rejected.
  //   [1 2]   0 of 2;  [1 2 3]  rejected (0 of 3);  [1 2]  2 of 2.
  const ReplayResult r = Replay({Full({1, 2}), Full({1, 2, 3}), Full({1, 2})}, Config(2));
  EXPECT_EQ(r.requests, 3);
  EXPECT_EQ(r.rejected_requests, 1);
  EXPECT_EQ(r.input_blocks, 7);
  EXPECT_EQ(r.reused_blocks, 2);
}

TEST(TraceReplayTest, RequestWithoutIdsCountsOnlyAsARequest) {
  const ReplayResult r = Replay({Full({}), Full({1})}, Config(std::nullopt));
  EXPECT_EQ(r.requests, 2);
  EXPECT_EQ(r.input_blocks, 1);
}

// Reference for an unlimited capacity: a request reuses the longest prefix of its ids that an
// earlier request had as a prefix.
std::int64_t ReferenceUnlimitedReused(const std::vector<TraceRequest>& trace) {
  std::set<std::vector<std::uint64_t>> prefixes;
  std::int64_t reused = 0;
  for (const TraceRequest& r : trace) {
    std::vector<std::uint64_t> p;
    bool matching = true;
    for (std::uint64_t id : r.hash_ids) {
      p.push_back(id);
      if (matching && prefixes.count(p)) {
        ++reused;
      } else {
        matching = false;
      }
      prefixes.insert(p);
    }
  }
  return reused;
}

TEST(TraceReplayTest, SyntheticUnlimitedMatchesTheReferenceAndBoundsTheLimited) {
  SyntheticTraceOptions o;
  o.conversations = 120;
  o.turns = 4;
  o.concurrency = 24;
  auto trace = GenerateSyntheticTrace(o);
  ASSERT_TRUE(trace.ok());
  const ReplayResult unlimited = Replay(*trace, Config(std::nullopt));
  EXPECT_EQ(unlimited.reused_blocks, ReferenceUnlimitedReused(*trace));
  EXPECT_EQ(unlimited.evicted_blocks, 0);
  // Unique blocks = input - reused.
  EXPECT_EQ(unlimited.cached_blocks, unlimited.input_blocks - unlimited.reused_blocks);

  const std::int64_t capacity = unlimited.cached_blocks / 4;
  for (EvictionPolicyKind policy : {EvictionPolicyKind::kLru, EvictionPolicyKind::kPriorityLru}) {
    const ReplayResult limited = Replay(*trace, Config(capacity, policy));
    EXPECT_EQ(limited.input_blocks, unlimited.input_blocks);
    EXPECT_LT(limited.reused_blocks, unlimited.reused_blocks);
    EXPECT_GT(limited.reused_blocks, 0);
    EXPECT_EQ(limited.cached_blocks, capacity);
    // Every block allocated and not cached at the end was evicted.
    EXPECT_EQ(limited.evicted_blocks,
              limited.input_blocks - limited.reused_blocks - limited.cached_blocks);
  }
  // A capacity that holds everything behaves as unlimited.
  const ReplayResult big = Replay(*trace, Config(unlimited.cached_blocks));
  EXPECT_EQ(big.reused_blocks, unlimited.reused_blocks);
  EXPECT_EQ(big.evicted_blocks, 0);
}

// The replay's priority-lru ranges are decided by position (the first block is "the system
// prompt"), which hurts where first blocks are many and short-lived; the learned policy gets no
// ranges and infers from what the manager observes: never-reused partial tails go first, a prompt
// that is reused stays. It must not lose to LRU on either shape (the example, scaled
// down: 400 conversations each with its own one-block prompt), and gains where tails are dead.
TEST(TraceReplayTest, LearnedInfersFromObservationNotPosition) {
  SyntheticTraceOptions many;
  many.system_prompts = 400;
  many.system_prompt_blocks = 1;
  many.turns = 3;
  many.conversations = 400;
  many.concurrency = 64;
  auto trace = GenerateSyntheticTrace(many);
  ASSERT_TRUE(trace.ok());
  for (std::int64_t capacity : {200, 400}) {
    SCOPED_TRACE(capacity);
    const double lru = Replay(*trace, Config(capacity, EvictionPolicyKind::kLru)).hit_rate();
    const double position =
        Replay(*trace, Config(capacity, EvictionPolicyKind::kPriorityLru)).hit_rate();
    const ReplayResult learned = Replay(*trace, Config(capacity, EvictionPolicyKind::kLearned));
    EXPECT_LT(position, lru);
    EXPECT_GT(learned.hit_rate(), lru);
    // No retention ranges: every cached block is at the default priority.
    EXPECT_EQ(learned.stats.pools[0].cached_by_priority[kDefaultPriority], capacity);
  }
  SyntheticTraceOptions whole;  // no partial tails: nothing to learn about tails
  whole.conversations = 120;
  whole.partial_tail = false;
  trace = GenerateSyntheticTrace(whole);
  ASSERT_TRUE(trace.ok());
  for (std::int64_t capacity : {150, 600}) {
    const double lru = Replay(*trace, Config(capacity, EvictionPolicyKind::kLru)).hit_rate();
    const double learned =
        Replay(*trace, Config(capacity, EvictionPolicyKind::kLearned)).hit_rate();
    EXPECT_GE(learned, lru - 0.005) << capacity;
  }
}

TEST(TraceReplayTest, HitRateDoesNotDependOnTokensPerBlock) {
  SyntheticTraceOptions o;
  o.conversations = 60;
  auto trace = GenerateSyntheticTrace(o);
  ASSERT_TRUE(trace.ok());
  ReplayConfig small = Config(300);
  ReplayConfig large = Config(300);
  large.tokens_per_block = 64;
  EXPECT_EQ(Replay(*trace, small).reused_blocks, Replay(*trace, large).reused_blocks);
}

TEST(TraceReplayTest, ProgressIsReportedAtTheIntervalAndAtTheEnd) {
  SyntheticTraceOptions o;
  o.conversations = 25;
  o.turns = 2;
  auto trace = GenerateSyntheticTrace(o);
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->size(), 50u);
  ReplayConfig c = Config(std::nullopt);
  c.progress_interval = 16;
  std::vector<ReplayProgress> seen;
  c.progress = [&](const ReplayProgress& p) { seen.push_back(p); };
  const ReplayResult r = Replay(*trace, c);
  ASSERT_EQ(seen.size(), 4u);  // 16, 32, 48, 50
  EXPECT_EQ(seen[0].requests_done, 16);
  EXPECT_EQ(seen[3].requests_done, 50);
  EXPECT_EQ(seen[3].requests_total, 50);
  EXPECT_EQ(seen[3].input_blocks, r.input_blocks);
  EXPECT_EQ(seen[3].reused_blocks, r.reused_blocks);
}

TEST(TraceReplayTest, ValidatesTheConfig) {
  auto code = [](ReplayConfig c) { return TraceReplay::Create(std::move(c)).status().code(); };
  ReplayConfig c = Config(std::nullopt);
  c.tokens_per_block = 3;
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);
  c = Config(0);
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);
  c = Config(std::nullopt);
  c.priorities.tail_priority = 101;
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);
  c = Config(std::nullopt);
  c.priorities.system_prompt_blocks = -1;
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);
  c = Config(std::nullopt);
  c.progress_interval = 0;
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);
  EXPECT_TRUE(TraceReplay::Create(Config(1)).ok());
}

// A lower tier that keeps whatever the pool evicts, by content id.
class RecordingTier : public ReplayTierHooks, public EvictionListener {
 public:
  std::int64_t OnPoolMiss(const ReplayMiss& miss) override {
    misses.push_back(miss.pool_hit_blocks);
    missed_ids.emplace_back(miss.missed.begin(), miss.missed.end());
    std::int64_t n = 0;
    while (n < std::ssize(miss.missed) && held.count(miss.missed[n])) ++n;
    return n;
  }
  EvictionListener* eviction_listener() override { return this; }
  void OnEvict(const EvictedBlock& block) override { held.insert(block.content_id); }

  std::set<ContentId> held;
  std::vector<std::int64_t> misses;
  std::vector<std::vector<ContentId>> missed_ids;
};

TEST(TraceReplayTest, TierHooksSeeMissesAndEvictionsUnderTheManagersContentIds) {
  // Capacity 2.
  //   [1 2]  miss of both (ids a b); cached 1 2
  //   [3 4]  miss of both; evicts 2 then 1 (the tier receives a b); cached 3 4
  //   [1 2]  pool miss of both; the tier has a b: 2 restored; evicts 4, 3
  RecordingTier tier;
  ReplayConfig c = Config(2);
  c.tier_hooks = &tier;
  auto replay = TraceReplay::Create(c);
  ASSERT_TRUE(replay.ok()) << replay.status();
  for (const TraceRequest& r : {Full({1, 2}), Full({3, 4}), Full({1, 2})}) {
    ASSERT_TRUE((*replay)->Replay(r).ok());
  }
  const ReplayResult r = (*replay)->Summary();
  EXPECT_EQ(r.reused_blocks, 0);
  EXPECT_EQ(r.restored_blocks, 2);
  EXPECT_EQ(r.evicted_blocks, 4);
  EXPECT_EQ(tier.held.size(), 4u);
  ASSERT_EQ(tier.misses, (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(tier.missed_ids[0], tier.missed_ids[2]);  // the same blocks, the same ids
  // The ids are the manager's: the blocks of [1 2] are cached under them now.
  for (const ContentId& id : tier.missed_ids[2]) {
    EXPECT_TRUE((*replay)->manager().FindBlock(id).ok()) << id.ToHex();
  }
  // Without hooks nothing is restored.
  EXPECT_EQ(Replay({Full({1, 2}), Full({3, 4}), Full({1, 2})}, Config(2)).restored_blocks, 0);
}

}  // namespace
}  // namespace kvmesh
