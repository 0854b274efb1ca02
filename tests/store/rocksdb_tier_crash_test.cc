// Crash tests of the RocksDB tier (issue 11, finding 3: what "acknowledged" means, per mode).
//
// SIGKILL: a child process (store_crash_writer) puts blocks into a tier small enough that every
// put evicts (so eviction deletes are in flight at every kill), printing each acknowledgement, the
// durability promise as it advances, and every eviction it decided. Once acknowledgements have
// started it is killed with SIGKILL — after a random number of them plus a random delay (seeded;
// the seed and every kill point are logged) — many cycles per durability mode (none, flush, wal,
// wal with sync). After every kill the tier is reopened and every block ever acknowledged is
// checked: intact (bytes equal to what was written, regenerated from its index) or absent — never
// corrupt; and every block the promise covered at the kill, and not evicted since, is present. The
// reopened tier takes and serves a new block.
//
// Power loss: the same in one process over a FaultInjectionFs. After the puts, writes start
// failing (nothing more reaches the disk), the tier is dropped, and the file system loses every
// byte that was not synced; then the same checks, with the promise a power loss keeps: flush
// (flushes sync their files) and wal with sync; none and wal without sync only "intact or absent".
//
// KVMESH_CRASH_SEED overrides the seed; KVMESH_CRASH_CYCLES the cycles per mode (SIGKILL; default
// 4, the `soak` variant 250: 1,000 in all) and KVMESH_POWER_CYCLES those of the power-loss test
// (default 3; soak 50).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "store/rocksdb_tier.h"
#include "tests/store/crash_shape.h"
#include "tests/store/fault_injection_fs.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::CrashMode;
using store_test::IdFor;
using store_test::kCrashPool;

long EnvOr(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

// What one run of the writer said before it died.
struct ChildOutput {
  std::vector<std::pair<long, std::uint64_t>> acked;  // (index, acknowledgement number)
  std::uint64_t durable = 0;                          // the promise covered acks <= this
  std::vector<std::string> evicted;                   // content ids (hex)
  bool done = false;
  int wait_status = 0;
};

void ParseLine(const std::string& line, ChildOutput* out) {
  std::istringstream words(line);
  std::string word;
  words >> word;
  if (word == "ack") {
    long index = -1;
    std::uint64_t n = 0;
    words >> index >> n;
    out->acked.emplace_back(index, n);
  } else if (word == "durable") {
    std::uint64_t n = 0;
    words >> n;
    out->durable = std::max(out->durable, n);
  } else if (word == "evict") {
    std::string hex;
    words >> hex;
    out->evicted.push_back(hex);
  } else if (word == "done") {
    out->done = true;
  }
}

// Reads what is there (waiting up to `ms`), parses complete lines; false at end of file.
bool ReadSome(int fd, int ms, std::string* pending, ChildOutput* out) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return true;
  char buf[65536];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n <= 0) return false;
  pending->append(buf, static_cast<std::size_t>(n));
  for (std::size_t nl; (nl = pending->find('\n')) != std::string::npos;) {
    ParseLine(pending->substr(0, nl), out);
    pending->erase(0, nl + 1);
  }
  return true;
}

// Runs the writer from `first`; once it acknowledged `kill_after_acks` puts (or finished) — and,
// with `after_promise` >= 0, once the promise then covered a put of this run and `after_promise`
// more were acknowledged — kills it after a further `kill_after_ms` (counting acknowledgements,
// not time, keeps the kills among the puts on a loaded machine; waiting for a promise keeps the
// promised blocks inside the tier's capacity, so that their check bites). A line cut by the kill
// (no newline) is not parsed.
ChildOutput RunAndKill(const std::string& db, long first, long count, const CrashMode& mode,
                       std::size_t kill_after_acks, long after_promise, int kill_after_ms) {
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
          mode.name.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  ChildOutput out;
  std::string pending;
  bool open = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (open && out.acked.size() < kill_after_acks && !out.done &&
         std::chrono::steady_clock::now() < deadline) {
    open = ReadSome(fds[0], 5, &pending, &out);
  }
  if (after_promise >= 0) {
    // The promise must cover the latest put acknowledged by now (not only an early one, which
    // the later puts may have evicted by the time of the kill on a loaded machine).
    const std::uint64_t need = out.acked.empty() ? 1 : out.acked.back().second;
    const auto promised = [&] { return !out.acked.empty() && out.durable >= need; };
    while (open && !promised() && !out.done && std::chrono::steady_clock::now() < deadline) {
      open = ReadSome(fds[0], 5, &pending, &out);
    }
    const std::size_t target = out.acked.size() + static_cast<std::size_t>(after_promise);
    while (open && out.acked.size() < target && !out.done &&
           std::chrono::steady_clock::now() < deadline) {
      open = ReadSome(fds[0], 5, &pending, &out);
    }
  }
  const auto kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kill_after_ms);
  while (open && std::chrono::steady_clock::now() < kill_at) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        kill_at - std::chrono::steady_clock::now());
    open = ReadSome(fds[0], static_cast<int>(std::max<long>(1, left.count())), &pending, &out);
  }
  kill(pid, SIGKILL);
  KVMESH_CHECK(waitpid(pid, &out.wait_status, 0) == pid);
  while (ReadSome(fds[0], 100, &pending, &out)) {
  }
  close(fds[0]);
  return out;
}

// Every block acknowledged so far, and what the tests know about it.
struct Ledger {
  std::vector<long> acked;
  std::unordered_set<long> promised;  // durable by the mode's promise when last written
  std::unordered_set<std::string> evicted;
  std::map<std::string, long> index_of;  // content id hex -> index

  void Ack(long i, bool durable) {
    acked.push_back(i);
    index_of[IdFor(static_cast<std::uint64_t>(i)).ToHex()] = i;
    if (durable) promised.insert(i);
  }
};

// Reopens the tier and checks every acknowledged block; then a new block round-trips.
void CheckReopened(const std::string& db, const CrashMode& mode, Ledger& ledger,
                   const std::string& what, long probe, std::size_t* promised_checked) {
  RocksDbTierOptions o = store_test::CrashTierOptions(db, mode);
  o.on_evict = [&](TierPoolId, const ContentId& id) { ledger.evicted.insert(id.ToHex()); };
  auto tier = RocksDbTier::Open(o);
  ASSERT_TRUE(tier.ok()) << what << ": " << tier.status();
  EXPECT_TRUE((*tier)->stats().damage.empty()) << what << ": " << (*tier)->stats().damage;
  const KvPoolLayout layout = store_test::LayoutOf(store_test::CrashShape().geometry);
  store_test::TestPool pool(layout, 1, 1.0f), expected(layout, 1, 1.0f);
  std::size_t present = 0, must = 0;
  for (long i : ledger.acked) {
    const ContentId id = IdFor(static_cast<std::uint64_t>(i));
    pool.FillByte(0, 0xAB);
    const Status st = (*tier)->Get(kCrashPool, id, pool.view(), 0);
    ASSERT_TRUE(st.ok() || st.IsNotFound())
        << what << " block " << i << " is neither intact nor absent: " << st;
    if (st.ok()) {
      ++present;
      expected.Fill(0, static_cast<std::uint64_t>(i));
      ASSERT_EQ(pool.Snapshot(0), expected.Snapshot(0)) << what << " block " << i;
    }
    if (ledger.promised.contains(i) && !ledger.evicted.contains(id.ToHex())) {
      ++must;
      ASSERT_TRUE(st.ok()) << what << " block " << i << " was acknowledged and promised ("
                           << mode.name << ") but is gone";
    }
  }
  EXPECT_EQ((*tier)->stats().corrupt, 0) << what;
  expected.Fill(0, static_cast<std::uint64_t>(probe));
  ASSERT_TRUE((*tier)->Put(kCrashPool, IdFor(probe), expected.view(), 0, 35).ok()) << what;
  ASSERT_TRUE((*tier)->Get(kCrashPool, IdFor(probe), pool.view(), 0).ok()) << what;
  ASSERT_EQ(pool.Snapshot(0), expected.Snapshot(0)) << what;
  ASSERT_TRUE((*tier)->Erase(kCrashPool, IdFor(probe)).ok()) << what;
  std::printf("%s reopened: %zu of %zu acknowledged blocks present, %zu promised and kept\n",
              what.c_str(), present, ledger.acked.size(), must);
  if (promised_checked != nullptr) *promised_checked += must;
}

class RocksDbTierCrash : public ::testing::TestWithParam<std::string> {};

TEST_P(RocksDbTierCrash, SigkillKeepsWhatWasPromised) {
  const CrashMode mode = store_test::ParseCrashMode(GetParam());
  const unsigned seed = static_cast<unsigned>(EnvOr("KVMESH_CRASH_SEED", 20261130)) +
                        static_cast<unsigned>(mode.name.size());
  const long cycles = EnvOr("KVMESH_CRASH_CYCLES", 4);
  std::printf("crash test mode %s seed %u cycles %ld\n", mode.name.c_str(), seed, cycles);
  std::mt19937 rng(seed);
  store_test::TempDir dir;
  const std::string db = dir.path() + "/db";
  Ledger ledger;
  long next = 0;
  std::size_t evictions_at_kill = 0, promised_checked = 0;
  for (long cycle = 0; cycle < cycles; ++cycle) {
    // The first cycle fills the tier past its capacity; from then on every put evicts. Every
    // other cycle is killed a little after the promise covered a put of its own. With a sync per
    // put (walsync), fewer puts per cycle.
    const std::size_t span = mode.wal_sync ? 300 : 1200;
    const auto kill_acks = static_cast<std::size_t>(
        (cycle == 0 ? store_test::kCrashCapacityBlocks : 0) + 1 + rng() % span);
    const long after_promise = cycle % 2 == 1 ? static_cast<long>(rng() % 300) : -1;
    const int kill_ms = static_cast<int>(rng() % 20);
    const long count = 2000;
    const ChildOutput out = RunAndKill(db, next, count, mode, kill_acks, after_promise, kill_ms);
    ASSERT_TRUE(WIFSIGNALED(out.wait_status) ||
                (WIFEXITED(out.wait_status) && WEXITSTATUS(out.wait_status) == 0))
        << "cycle " << cycle << ": the writer failed on its own (status " << out.wait_status << ")";
    ASSERT_FALSE(out.acked.empty()) << "cycle " << cycle << ": killed before any acknowledgement";
    for (const auto& [i, n] : out.acked) ledger.Ack(i, out.done || n <= out.durable);
    for (const auto& hex : out.evicted) ledger.evicted.insert(hex);
    evictions_at_kill += out.evicted.empty() ? 0 : 1;
    std::printf(
        "cycle %ld kill_after_acks %zu (then %ld after a promise) +%d ms: acked %zu durable %llu "
        "evicted %zu done %d\n",
        cycle, kill_acks, after_promise, kill_ms, out.acked.size(),
        static_cast<unsigned long long>(out.durable), out.evicted.size(), out.done);
    next += count;
    CheckReopened(db, mode, ledger, "cycle " + std::to_string(cycle), 1'000'000'000 + cycle,
                  &promised_checked);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(evictions_at_kill, static_cast<std::size_t>(cycles))
      << "some kills did not land among evictions";
  // On a loaded machine the writer can outrun the kill until every promised block was evicted
  // again: then a few more cycles, each killed right after the promise covered its latest put,
  // until the promise's check has bitten (or the test fails below).
  for (long extra = 0; promised_checked == 0 && extra < 8; ++extra) {
    const auto kill_acks = static_cast<std::size_t>(100 + rng() % 400);
    const ChildOutput out = RunAndKill(db, next, 2000, mode, kill_acks, 0, 0);
    ASSERT_FALSE(out.acked.empty()) << "extra cycle " << extra;
    for (const auto& [i, n] : out.acked) ledger.Ack(i, out.done || n <= out.durable);
    for (const auto& hex : out.evicted) ledger.evicted.insert(hex);
    next += 2000;
    CheckReopened(db, mode, ledger, "extra cycle " + std::to_string(extra), 2'000'000'000 + extra,
                  &promised_checked);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(promised_checked, 0u) << "no promised block was ever checked";
}

INSTANTIATE_TEST_SUITE_P(Modes, RocksDbTierCrash,
                         ::testing::Values("none", "flush", "wal", "walsync"),
                         [](const auto& info) { return info.param; });

class RocksDbTierPowerLoss : public ::testing::TestWithParam<std::string> {};

TEST_P(RocksDbTierPowerLoss, LosingUnsyncedBytesKeepsWhatWasPromised) {
  const CrashMode mode = store_test::ParseCrashMode(GetParam());
  const bool survives_power_loss = mode.durability == DiskDurability::kFlush ||
                                   mode.durability == DiskDurability::kNone ||
                                   mode.wal_sync;  // none: what its explicit flushes covered
  const unsigned seed = static_cast<unsigned>(EnvOr("KVMESH_CRASH_SEED", 20261130)) + 7;
  const long cycles = EnvOr("KVMESH_POWER_CYCLES", 3);
  std::mt19937 rng(seed + static_cast<unsigned>(mode.name.size()));
  store_test::TempDir dir;
  const std::string db = dir.path() + "/db";
  const KvPoolLayout layout = store_test::LayoutOf(store_test::CrashShape().geometry);
  store_test::TestPool pool(layout, 1, 1.0f);
  Ledger ledger;
  long next = 0;
  int dropped_files = 0;
  for (long cycle = 0; cycle < cycles; ++cycle) {
    store_test::FaultInjectionEnv fault;
    RocksDbTierOptions o = store_test::CrashTierOptions(db, mode);
    o.env = fault.env.get();
    o.on_evict = [&](TierPoolId, const ContentId& id) { ledger.evicted.insert(id.ToHex()); };
    auto tier = RocksDbTier::Open(o);
    ASSERT_TRUE(tier.ok()) << tier.status();
    const long count =
        mode.wal_sync ? 50 + static_cast<long>(rng() % 150) : 100 + static_cast<long>(rng() % 500);
    for (long i = next; i < next + count; ++i) {
      pool.Fill(0, static_cast<std::uint64_t>(i));
      ASSERT_TRUE((*tier)->Put(kCrashPool, IdFor(i), pool.view(), 0, 35).ok());
      if (mode.durability == DiskDurability::kNone && (i + 1) % 64 == 0) {
        ASSERT_TRUE((*tier)->Flush().ok());
      }
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 30));
    }
    const std::uint64_t durable = (*tier)->durable_puts();
    const std::uint64_t first_ack =
        (*tier)->acknowledged_puts() - static_cast<std::uint64_t>(count);
    for (long i = next; i < next + count; ++i) {
      const auto n = first_ack + static_cast<std::uint64_t>(i - next) + 1;
      ledger.Ack(i, survives_power_loss && n <= durable);
    }
    // The power goes: nothing more reaches the disk, then what was not synced is gone.
    SetLogLevel("off").IgnoreError();
    fault.fs->FailWrites(true);
    tier->reset();
    dropped_files += fault.fs->DropUnsyncedData();
    SetLogLevel("info").IgnoreError();
    next += count;
    CheckReopened(db, mode, ledger, "power loss " + std::to_string(cycle), 2'000'000'000 + cycle,
                  nullptr);
    if (HasFatalFailure()) return;
  }
  std::printf("power loss mode %s cycles %ld files cut or deleted %d\n", mode.name.c_str(), cycles,
              dropped_files);
}

INSTANTIATE_TEST_SUITE_P(Modes, RocksDbTierPowerLoss,
                         ::testing::Values("none", "flush", "wal", "walsync"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvmesh
