// The child of the crash test (rocksdb_tier_crash_test.cc): opens a RocksDB tier and puts blocks
// whose bytes are a function of their index, printing "ack <i>" after each put returned OK and
// "flushed <i>" after a Flush() that followed put i returned OK (stdout flushed each time). The
// test kills it with SIGKILL at random moments.
//
//   store_crash_writer <db path> <first index> <count> <wal 0|1>
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
    std::fprintf(stderr, "usage: %s <db path> <first index> <count> <wal 0|1>\n", argv[0]);
    return 2;
  }
  SetLogLevel("warn").IgnoreError();
  const std::string path = argv[1];
  const long first = std::strtol(argv[2], nullptr, 10);
  const long count = std::strtol(argv[3], nullptr, 10);
  const bool wal = std::strtol(argv[4], nullptr, 10) != 0;
  auto tier = RocksDbTier::Open(store_test::CrashTierOptions(path, wal));
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  const KvPoolLayout layout = store_test::LayoutOf(store_test::CrashShape().geometry);
  store_test::TestPool pool(layout, 1, 1.0f);
  for (long i = first; i < first + count; ++i) {
    pool.Fill(0, static_cast<std::uint64_t>(i));
    const Status st = (*tier)->Put(store_test::kCrashPool, store_test::IdFor(i), pool.view(), 0,
                                   kTierDefaultPriority);
    if (!st.ok()) {
      std::fprintf(stderr, "put %ld: %s\n", i, st.ToString().c_str());
      return 1;
    }
    std::printf("ack %ld\n", i);
    std::fflush(stdout);
    if ((i + 1) % 64 == 0) {
      if (const Status f = (*tier)->Flush(); !f.ok()) {
        std::fprintf(stderr, "flush: %s\n", f.ToString().c_str());
        return 1;
      }
      std::printf("flushed %ld\n", i);
      std::fflush(stdout);
    }
  }
  tier->reset();  // clean close
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}
