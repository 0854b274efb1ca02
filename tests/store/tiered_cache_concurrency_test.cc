// Concurrent admissions, offloads, onboards and prefetches through a TieredCache with pinned
// blocks, host tier only (RocksDB is not TSan-instrumented; see tier_concurrency_test.cc).
// Labelled tsan: the TSan pass runs it.
//
// Worker threads admit prompts (a shared first block, then one or two blocks of their own, from a
// small set so that they meet), sometimes prefetch first, check that every reused block — from
// the pool, restored from the host tier, or prefetched — holds exactly the content its id gives,
// write their fresh blocks, sometimes pin their blocks as a transfer would and check them again,
// store and remove. Copies run on two workers with deferred eviction, so victims are being copied
// out while other threads allocate, restore and read. An observer checks the manager's invariants
// meanwhile.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "tests/store/store_test_util.h"
#include "tests/store/tiered_test_util.h"

namespace kvmesh {
namespace {

using store_test::LayoutOf;
using store_test::Rig;
using store_test::RigOptions;

constexpr int kThreads = 4;
constexpr int kIterations = 300;
constexpr int kDocs = 24;

struct Outcome {
  std::atomic<std::int64_t> wrong_bytes{0};
  std::atomic<std::int64_t> admitted{0};
  std::atomic<std::int64_t> exhausted{0};
  std::atomic<std::int64_t> unexpected{0};
};

std::vector<Token> Prompt(int doc, std::int32_t t) {
  std::vector<Token> p;
  for (int i = 0; i < t; ++i) p.push_back(7 + i);  // the shared first block
  const int own = 1 + doc % 2;
  for (int i = 0; i < own * t; ++i) p.push_back(1000 * (doc + 1) + i);
  return p;
}

void Worker(int thread, Rig& rig, Outcome& out) {
  std::mt19937 rng(11 + thread);
  const SequenceOptions o = store_test::WholeBlocks();
  const std::int32_t t = rig.tokens_per_block();
  for (int it = 0; it < kIterations; ++it) {
    const auto prompt = Prompt(static_cast<int>(rng() % kDocs), t);
    const auto ids = rig.Ids(prompt, o);
    if (rng() % 4 == 0) {
      auto n = rig.cache().Prefetch(prompt, o);
      if (!n.ok()) out.unexpected.fetch_add(1);
    }
    const RequestId req{static_cast<std::uint64_t>(thread) * 1'000'000 + it};
    auto r = rig.cache().AddSequence(req, prompt, o);
    if (!r.ok()) {
      (r.status().code() == StatusCode::kResourceExhausted ? out.exhausted : out.unexpected)
          .fetch_add(1);
      continue;
    }
    out.admitted.fetch_add(1);
    const auto& table = r->tables[0].block_ids;
    for (std::int64_t i = 0; i < r->reused_blocks; ++i) {
      if (!SyntheticBlockMatches(rig.view(), table[i], ids[i])) out.wrong_bytes.fetch_add(1);
    }
    for (std::size_t i = static_cast<std::size_t>(r->reused_blocks); i < ids.size(); ++i) {
      FillSyntheticBlock(rig.view(), table[i], ids[i]);
    }
    if (!rig.manager().StoreFullBlocks(req).ok()) out.unexpected.fetch_add(1);
    if (rng() % 3 == 0) {  // a transfer pins the blocks past the sequence's end
      auto pins = rig.manager().PinSequenceBlocks(req);
      if (!rig.manager().RemoveSequence(req).ok()) out.unexpected.fetch_add(1);
      std::this_thread::yield();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (!SyntheticBlockMatches(rig.view(), table[i], ids[i])) out.wrong_bytes.fetch_add(1);
      }
      continue;  // pins released here
    }
    if (!rig.manager().RemoveSequence(req).ok()) out.unexpected.fetch_add(1);
  }
}

TEST(TieredCacheConcurrency, AdmitOffloadOnboardPrefetchWithPins) {
  RigOptions o;
  o.layout = LayoutOf(store_test::TierShapes()[1].geometry);  // fp8 NHD, 8 tokens
  o.pool_blocks = 24;
  o.host_blocks = 40;
  o.copy_threads = 2;
  o.max_moving_out = 4;
  Rig rig(o);
  Outcome out;
  std::atomic<bool> done{false};
  std::atomic<std::int64_t> bad_invariants{0};
  std::thread observer([&] {
    while (!done.load()) {
      if (!rig.manager().CheckInvariants().ok()) bad_invariants.fetch_add(1);
      (void)rig.cache().stats();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { Worker(t, rig, out); });
  for (auto& th : threads) th.join();
  rig.cache().WaitForPrefetches();
  rig.engine().Drain();
  done.store(true);
  observer.join();
  EXPECT_EQ(out.wrong_bytes.load(), 0);
  EXPECT_EQ(out.unexpected.load(), 0);
  EXPECT_EQ(bad_invariants.load(), 0);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_GT(out.admitted.load(), kThreads * kIterations / 2);
  EXPECT_GT(s.offload.offload.blocks, 0);
  EXPECT_GT(s.host_hit_blocks, 0);
  EXPECT_EQ(s.offload.onboard_corrupt, 0);
  EXPECT_EQ(s.admissions, out.admitted.load());
  EXPECT_EQ(s.input_blocks, s.hit_blocks() + s.missed_blocks);
  const BlockManagerStats m = rig.manager().GetStats();
  EXPECT_EQ(m.pools[0].pinned_blocks, 0);
  EXPECT_EQ(m.pools[0].moving_out_blocks, 0);
}

}  // namespace
}  // namespace kvmesh
