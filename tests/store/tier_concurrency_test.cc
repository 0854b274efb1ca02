// Concurrent puts, gets, erases and evictions on the host tier from several threads, with an
// eviction sink that verifies every victim while its slot is held. Labelled tsan: the TSan pass
// runs it. (The same workload with victims spilling into RocksDB is tier_spill_concurrency_test:
// RocksDB is not built with TSan, so its internal synchronisation is invisible to TSan and its
// memtable code gives false reports; that test runs in the release and ASan passes.)
#include "tests/store/tier_concurrency_worker.h"

namespace kvmesh {
namespace {

using store_test::CheckCounters;
using store_test::kPool;
using store_test::kThreads;
using store_test::LayoutOf;
using store_test::MakeHost;
using store_test::Outcome;
using store_test::Shape;
using store_test::SmallShape;
using store_test::Worker;

TEST(TierConcurrency, HostTierPutGetEraseEvict) {
  constexpr int kSlots = 8;
  std::atomic<std::int64_t> spilled{0};
  auto host = MakeHost(kSlots, [&](const EvictedBundle& e) {
    // The victim's bytes stay put while the sink runs: verify them here.
    const Shape s = SmallShape();
    auto codec = BundleCodec::Create(LayoutOf(s.geometry), s.pool_scale);
    if (!codec.ok() || !codec->Verify(e.bundle, e.id).ok()) return Status::Corruption("victim");
    spilled.fetch_add(1);
    return Status::Ok();
  });
  Outcome out;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { Worker(t, *host, nullptr, 1500, out); });
  }
  for (auto& th : threads) th.join();
  const TierStats s = host->stats();
  EXPECT_EQ(out.wrong_bytes.load(), 0);
  EXPECT_EQ(out.unexpected.load(), 0);
  EXPECT_GT(out.gets_ok.load(), 0);
  EXPECT_GT(s.evictions, 0);
  EXPECT_EQ(s.spill_failures, 0);
  EXPECT_EQ(s.spills, spilled.load());
  EXPECT_EQ(s.hits, out.gets_ok.load());
  EXPECT_EQ(s.misses, out.gets_missed.load());
  CheckCounters(s, kSlots);
  EXPECT_EQ(s.used_bytes, s.entries * host->Codec(kPool)->bundle_bytes());
}

}  // namespace
}  // namespace kvmesh
