// Crash test of the RocksDB tier: a child process (store_crash_writer) puts blocks and prints each
// acknowledged index; it is killed with SIGKILL at a random moment (seeded; the seed and every
// kill time are logged), many cycles, with the WAL off (the default) and on. After every kill the
// tier is reopened and every block ever acknowledged is checked: intact (bytes equal to what was
// written, regenerated from its index) or absent — never corrupt. Stronger where the contract
// promises more: with the WAL on every acknowledged block is present; with it off every block
// acknowledged before the last completed Flush() is. And the reopened tier still takes and serves
// a new block.
//
// KVMESH_CRASH_SEED overrides the seed; KVMESH_CRASH_CYCLES the number of cycles per mode.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "store/rocksdb_tier.h"
#include "tests/store/crash_shape.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::IdFor;
using store_test::kCrashPool;

struct ChildOutput {
  std::vector<long> acked;
  long last_flushed = -1;  // every index <= this was acknowledged and then flushed
  bool done = false;
  int wait_status = 0;
};

// Runs the writer from `first`, kills it after `kill_after_ms`, and parses what it printed.
ChildOutput RunAndKill(const std::string& db, long first, long count, bool wal, int kill_after_ms) {
  int fds[2];
  KVMESH_CHECK(pipe(fds) == 0);
  const std::string first_s = std::to_string(first), count_s = std::to_string(count);
  const pid_t pid = fork();
  KVMESH_CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl(KVMESH_CRASH_WRITER, KVMESH_CRASH_WRITER, db.c_str(), first_s.c_str(), count_s.c_str(),
          wal ? "1" : "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(kill_after_ms));
  kill(pid, SIGKILL);
  ChildOutput out;
  KVMESH_CHECK(waitpid(pid, &out.wait_status, 0) == pid);
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
  close(fds[0]);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (lines.eof()) break;  // a line cut by the kill (no newline) is not an acknowledgement
    std::istringstream words(line);
    std::string word;
    long index = -1;
    words >> word >> index;
    if (word == "ack") out.acked.push_back(index);
    if (word == "flushed") out.last_flushed = index;
    if (word == "done") out.done = true;
  }
  return out;
}

long EnvOr(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

void CrashCycles(bool wal) {
  const unsigned seed = static_cast<unsigned>(EnvOr("KVMESH_CRASH_SEED", 20261130)) + wal;
  const long cycles = EnvOr("KVMESH_CRASH_CYCLES", 15);
  std::printf("crash test wal %d seed %u cycles %ld\n", wal, seed, cycles);
  std::mt19937 rng(seed);
  store_test::TempDir dir;
  const std::string db = dir.path() + "/db";
  const KvPoolLayout layout = store_test::LayoutOf(store_test::CrashShape().geometry);
  store_test::TestPool pool(layout, 1, 1.0f), expected(layout, 1, 1.0f);
  std::vector<long> acked_all;
  long next = 0;
  std::vector<long> durable;  // acknowledged and durable by the contract
  for (long cycle = 0; cycle < cycles; ++cycle) {
    // Kill times from "during open" to "well into the puts and flushes".
    const int kill_ms = static_cast<int>(rng() % 350);
    const long count = 1500;
    const ChildOutput out = RunAndKill(db, next, count, wal, kill_ms);
    ASSERT_TRUE(WIFSIGNALED(out.wait_status) ||
                (WIFEXITED(out.wait_status) && WEXITSTATUS(out.wait_status) == 0))
        << "cycle " << cycle << ": the writer failed on its own (status " << out.wait_status << ")";
    std::printf("cycle %ld kill_after_ms %d acked %zu last_flushed %ld done %d\n", cycle, kill_ms,
                out.acked.size(), out.last_flushed, out.done);
    for (long i : out.acked) {
      acked_all.push_back(i);
      if (wal || out.done || i <= out.last_flushed) durable.push_back(i);
    }
    next += count;

    auto tier = RocksDbTier::Open(store_test::CrashTierOptions(db, wal));
    ASSERT_TRUE(tier.ok()) << "cycle " << cycle << ": " << tier.status();
    std::size_t present = 0;
    for (long i : acked_all) {
      expected.Fill(0, static_cast<std::uint64_t>(i));
      pool.FillByte(0, 0xAB);
      const Status st = (*tier)->Get(kCrashPool, IdFor(i), pool.view(), 0);
      ASSERT_TRUE(st.ok() || st.IsNotFound())
          << "cycle " << cycle << " block " << i << " is neither intact nor absent: " << st;
      if (st.ok()) {
        ++present;
        ASSERT_EQ(pool.Snapshot(0), expected.Snapshot(0)) << "cycle " << cycle << " block " << i;
      }
    }
    for (long i : durable) {
      ASSERT_TRUE((*tier)->Contains(kCrashPool, IdFor(i)))
          << "cycle " << cycle << " block " << i << " was acknowledged "
          << (wal ? "with the WAL on" : "and flushed") << " but is gone";
    }
    EXPECT_EQ((*tier)->stats().corrupt, 0) << "cycle " << cycle;
    // The reopened tier works.
    const long probe = 1'000'000'000 + cycle;
    expected.Fill(0, static_cast<std::uint64_t>(probe));
    ASSERT_TRUE((*tier)->Put(kCrashPool, IdFor(probe), expected.view(), 0, 35).ok());
    ASSERT_TRUE((*tier)->Get(kCrashPool, IdFor(probe), pool.view(), 0).ok());
    ASSERT_EQ(pool.Snapshot(0), expected.Snapshot(0));
    ASSERT_TRUE((*tier)->Erase(kCrashPool, IdFor(probe)).ok());
    std::printf("cycle %ld reopened: %zu of %zu acknowledged blocks present, %zu must be\n", cycle,
                present, acked_all.size(), durable.size());
  }
}

TEST(RocksDbTierCrash, SigkillWithWalOff) { CrashCycles(false); }
TEST(RocksDbTierCrash, SigkillWithWalOn) { CrashCycles(true); }

}  // namespace
}  // namespace kvmesh
