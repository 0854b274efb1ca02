// Concurrent puts, gets, erases and evictions on the host tier spilling into a RocksDB tier that
// evicts too, from several threads on a small set of ids. Not labelled tsan: RocksDB is not built
// with TSan, and its uninstrumented synchronisation makes TSan report its memtable accesses as
// races (false positives); the host-tier half runs under TSan in tier_concurrency_test.
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

TEST(TierConcurrency, HostSpillingIntoRocksDb) {
  store_test::TempDir dir;
  const Shape shape = SmallShape();
  RocksDbTierOptions ro;
  ro.path = dir.path() + "/db";
  ro.pools = {{kPool, LayoutOf(shape.geometry), shape.pool_scale}};
  ro.write_buffer_bytes = 1 << 20;
  auto codec = BundleCodec::Create(LayoutOf(shape.geometry), shape.pool_scale);
  ASSERT_TRUE(codec.ok());
  ro.capacity_bytes = 24 * codec->bundle_bytes();  // the disk evicts too
  auto disk = RocksDbTier::Open(ro);
  ASSERT_TRUE(disk.ok()) << disk.status();
  constexpr int kSlots = 6;
  auto host = MakeHost(kSlots, [&](const EvictedBundle& e) {
    return (*disk)->PutBundle(e.pool, e.id, e.bundle, e.priority);
  });
  Outcome out;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { Worker(t, *host, disk->get(), 600, out); });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(out.wrong_bytes.load(), 0);
  EXPECT_EQ(out.unexpected.load(), 0);
  EXPECT_GT(out.gets_ok.load(), 0);
  const TierStats h = host->stats();
  const TierStats d = (*disk)->stats();
  EXPECT_GT(h.spills, 0);
  EXPECT_EQ(h.spill_failures, 0);
  EXPECT_GT(d.evictions, 0);
  EXPECT_FALSE(d.disabled);
  CheckCounters(h, kSlots);
  EXPECT_EQ(d.corrupt, 0);
  EXPECT_LE(d.used_bytes, ro.capacity_bytes);
  EXPECT_EQ(d.used_bytes, d.entries * codec->bundle_bytes());
}

}  // namespace
}  // namespace kvmesh
