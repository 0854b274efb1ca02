// The child of the crash test (rocksdb_tier_crash_test.cc): opens a RocksDB tier and puts blocks
// whose bytes are a function of their index. It prints, each line flushed at once:
//   "evict <content id hex>"  when the tier chooses a block as an eviction victim (before the
//                             delete is written)
//   "ack <i> <n>"             after put i returned OK; n is its acknowledgement number
//   "durable <n>"             when the tier's promise covers every put numbered <= n (the mode's
//                             flushes, or at once with the WAL)
// In mode "none" it calls Flush() every 64 puts (nothing else would make a put durable). The test
// kills it with SIGKILL at random moments.
//
//   store_crash_writer <db path> <first index> <count> <mode: none|flush|wal|walsync>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "store/rocksdb_tier.h"
#include "tests/store/crash_shape.h"
#include "tests/store/store_test_util.h"

int main(int argc, char** argv) {
  using namespace kvmesh;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <db path> <first index> <count> <mode>\n", argv[0]);
    return 2;
  }
  SetLogLevel("error").IgnoreError();
  const std::string path = argv[1];
  const long first = std::strtol(argv[2], nullptr, 10);
  const long count = std::strtol(argv[3], nullptr, 10);
  const store_test::CrashMode mode = store_test::ParseCrashMode(argv[4]);
  RocksDbTierOptions o = store_test::CrashTierOptions(path, mode);
  o.on_evict = [](TierPoolId, const ContentId& id) {
    std::printf("evict %s\n", id.ToHex().c_str());
    std::fflush(stdout);
  };
  auto tier = RocksDbTier::Open(o);
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  const KvPoolLayout layout = store_test::LayoutOf(store_test::CrashShape().geometry);
  store_test::TestPool pool(layout, 1, 1.0f);
  std::uint64_t durable = 0;
  const auto report_durable = [&] {
    if (const std::uint64_t d = (*tier)->durable_puts(); d != durable) {
      durable = d;
      std::printf("durable %llu\n", static_cast<unsigned long long>(d));
      std::fflush(stdout);
    }
  };
  for (long i = first; i < first + count; ++i) {
    pool.Fill(0, static_cast<std::uint64_t>(i));
    const Status st = (*tier)->Put(store_test::kCrashPool, store_test::IdFor(i), pool.view(), 0,
                                   kTierDefaultPriority);
    if (!st.ok()) {
      std::fprintf(stderr, "put %ld: %s\n", i, st.ToString().c_str());
      return 1;
    }
    std::printf("ack %ld %llu\n", i, static_cast<unsigned long long>((*tier)->acknowledged_puts()));
    std::fflush(stdout);
    if (mode.durability == DiskDurability::kNone && (i + 1) % 64 == 0) {
      if (const Status f = (*tier)->Flush(); !f.ok()) {
        std::fprintf(stderr, "flush: %s\n", f.ToString().c_str());
        return 1;
      }
    }
    report_durable();
  }
  tier->reset();  // clean close
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}
