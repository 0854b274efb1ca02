// Concurrent admissions, offloads, onboards and prefetches through a TieredCache whose pool is in
// emulated device memory (tests/store/device_rig.h): every copy is staged through a few small
// staging areas (2 blocks each, so batches and restores go in chunks) on copy workers, callers and
// the publisher at once. Worker threads admit prompts that meet (a shared first block, then their
// own), sometimes prefetch first, check that every reused block holds the content its id gives
// (through the alias), write their fresh blocks, store and remove. The emulated backend counts
// calls that overlap on one backend (the staging must serialise them). Host tier only; labelled
// tsan: the TSan pass runs it.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "tests/store/device_rig.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::DeviceRig;
using store_test::LayoutOf;
using store_test::RigOptions;

constexpr int kThreads = 4;
constexpr int kIterations = 200;
constexpr int kDocs = 24;

struct Outcome {
  std::atomic<std::int64_t> wrong_bytes{0};
  std::atomic<std::int64_t> admitted{0};
  std::atomic<std::int64_t> unexpected{0};
};

std::vector<Token> Prompt(int doc, std::int32_t t) {
  std::vector<Token> p;
  for (int i = 0; i < t; ++i) p.push_back(7 + i);  // the shared first block
  const int own = 1 + doc % 3;
  for (int i = 0; i < own * t; ++i) p.push_back(1000 * (doc + 1) + i);
  return p;
}

void Worker(int thread, DeviceRig& rig, Outcome& out) {
  std::mt19937 rng(23 + thread);
  const SequenceOptions o = store_test::WholeBlocks();
  const std::int32_t t = rig.tokens_per_block();
  for (int it = 0; it < kIterations; ++it) {
    const auto prompt = Prompt(static_cast<int>(rng() % kDocs), t);
    const auto ids = rig.Ids(prompt, o);
    if (rng() % 4 == 0 && !rig.cache().Prefetch(prompt, o).ok()) out.unexpected.fetch_add(1);
    const RequestId req{static_cast<std::uint64_t>(thread) * 1'000'000 + it};
    auto r = rig.cache().AddSequence(req, prompt, o);
    if (!r.ok()) {
      if (r.status().code() != StatusCode::kResourceExhausted) out.unexpected.fetch_add(1);
      continue;
    }
    out.admitted.fetch_add(1);
    const auto& table = r->tables[0].block_ids;
    for (std::int64_t i = 0; i < r->reused_blocks; ++i) {
      if (!SyntheticBlockMatches(rig.alias(), table[i], ids[i])) out.wrong_bytes.fetch_add(1);
    }
    for (std::size_t i = static_cast<std::size_t>(r->reused_blocks); i < ids.size(); ++i) {
      FillSyntheticBlock(rig.alias(), table[i], ids[i]);
    }
    if (!rig.manager().StoreFullBlocks(req).ok()) out.unexpected.fetch_add(1);
    if (!rig.manager().RemoveSequence(req).ok()) out.unexpected.fetch_add(1);
  }
}

TEST(DevicePoolsConcurrency, AdmitOffloadOnboardPrefetchThroughSmallStagingAreas) {
  RigOptions o;
  o.layout = LayoutOf(store_test::TierShapes()[1].geometry);  // fp8 NHD, 8 tokens
  o.pool_blocks = 16;
  o.host_blocks = 20;  // less than the prompts' blocks: host victims come back and go out again
  o.copy_threads = 2;
  o.max_moving_out = 4;
  DeviceRig rig(o, /*staging_blocks=*/2);
  Outcome out;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { Worker(t, rig, out); });
  for (auto& th : threads) th.join();
  rig.cache().WaitForPrefetches();
  rig.engine().Drain();
  EXPECT_EQ(out.wrong_bytes.load(), 0);
  EXPECT_EQ(out.unexpected.load(), 0);
  EXPECT_TRUE(rig.manager().CheckInvariants().ok());
  const TieredCacheStats s = rig.cache().stats();
  EXPECT_GT(out.admitted.load(), kThreads * kIterations / 2);
  EXPECT_GT(s.offload.offload.blocks, 0);
  EXPECT_GT(s.host_hit_blocks, 0);
  EXPECT_EQ(s.offload.offload_failed, 0);
  EXPECT_EQ(s.offload.onboard_corrupt, 0);
  EXPECT_EQ(s.input_blocks, s.hit_blocks() + s.missed_blocks);
  const EmulatedDeviceStats d = rig.device().stats();
  EXPECT_EQ(d.overlapping_calls, 0);
  EXPECT_GT(d.to_device_pairs, 0);
  EXPECT_EQ(rig.engine().staging()->free_areas(), rig.engine().staging()->num_areas());
  const BlockManagerStats m = rig.manager().GetStats();
  EXPECT_EQ(m.pools[0].pinned_blocks, 0);
  EXPECT_EQ(m.pools[0].moving_out_blocks, 0);
}

}  // namespace
}  // namespace kvmesh
