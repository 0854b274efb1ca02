// Runs the real kvctl binary: `kvctl replay` with a host tier and a RocksDB tier behind the pool
// (synchronous copies, so the figures are exact): the JSON "tiers" object equals the library's
// ReplayTraceWithTiers, the text summary has the tier lines, a --disk-path is kept and a temporary
// directory is not, and bad tier flags exit 2 with a message. Issue 11: the disk tier's state in
// both outputs (durable entries, bytes on disk; disabled, its error and the failed puts when the
// disk fails during the run), SIGTERM flushing the tier before kvctl exits, open errors printed
// once and in our words, and `--disk-path ""` an error.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "store/rocksdb_tier.h"
#include "store/tiered_replay.h"
#include "tests/cli/kvctl_runner.h"

namespace kvmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using cli_test::RunKvctl;
using cli_test::RunResult;

const std::vector<std::string> kReplay = {"replay",
                                          "--synthetic",
                                          "--seed",
                                          "3",
                                          "--conversations",
                                          "60",
                                          "--turns",
                                          "4",
                                          "--concurrency",
                                          "12",
                                          "--tokens-per-block",
                                          "64",
                                          "--capacity-blocks",
                                          "60",
                                          "--copy-threads",
                                          "0",
                                          "--tier-block-bytes",
                                          "512"};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The trace kReplay's --synthetic flags generate, for the library runs the tests compare with.
Result<std::vector<TraceRequest>> KReplayTrace() {
  SyntheticTraceOptions g;
  g.seed = 3;
  g.conversations = 60;
  g.turns = 4;
  g.concurrency = 12;
  return GenerateSyntheticTrace(g);
}

TEST(KvctlReplayTiersTest, JsonMatchesTheLibrary) {
  const RunResult run = RunKvctl(
      With(kReplay, {"--host-tier-blocks", "100", "--disk-tier-blocks", "1000", "--json"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");  // no log lines, no progress bar
  const Json j = Json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << run.out;
  auto trace = KReplayTrace();
  ASSERT_TRUE(trace.ok());
  ReplayConfig config;
  config.tokens_per_block = 64;
  config.capacity_blocks = 60;
  TieredReplayOptions tiers;
  tiers.block_bytes = 512;
  tiers.host_blocks = 100;
  tiers.disk_blocks = 1000;
  tiers.copy_threads = 0;
  tiers.host_eviction_policy = config.policy;  // --policy (learned by default) orders the host tier
  auto expected = ReplayTraceWithTiers(*trace, config, tiers);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const Json& t = j["tiers"];
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["host_policy"], "learned");
  EXPECT_EQ(j["reused_blocks"], expected->replay.reused_blocks);
  EXPECT_EQ(t["hits"]["pool"], expected->replay.reused_blocks);
  EXPECT_EQ(t["hits"]["host"], expected->tiers.host_hit_blocks);
  EXPECT_EQ(t["hits"]["disk"], expected->tiers.disk_hit_blocks);
  EXPECT_DOUBLE_EQ(t["hit_rate_with_tiers"].get<double>(), expected->replay.hit_rate_with_tiers());
  EXPECT_GT(t["hits"]["host"].get<std::int64_t>(), 0);
  EXPECT_GT(t["hits"]["disk"].get<std::int64_t>(), 0);
  EXPECT_EQ(t["mismatched_blocks"], 0);
  EXPECT_EQ(t["offload"]["blocks"], expected->tiers.offload.offload.blocks);
  EXPECT_EQ(t["spill"]["blocks"], expected->tiers.offload.spill.blocks);
  EXPECT_EQ(t["block_bytes"], 512);
  EXPECT_EQ(t["geometry"]["head_dim"], 4);
  EXPECT_EQ(t["disk_kept"], false);
  EXPECT_FALSE(fs::exists(t["disk_path"].get<std::string>()));  // the temporary one is gone
}

// --policy orders the host tier's victims as well as the pool's: each policy's figures are those of
// the library with that policy in both, and the JSON names it.
TEST(KvctlReplayTiersTest, PolicyOrdersTheHostTierToo) {
  auto trace = KReplayTrace();
  ASSERT_TRUE(trace.ok());
  for (const std::string policy : {"lru", "priority-lru"}) {
    SCOPED_TRACE(policy);
    const RunResult run =
        RunKvctl(With(kReplay, {"--host-tier-blocks", "40", "--policy", policy, "--json"}));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const Json j = Json::parse(run.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << run.out;
    const Json& t = j["tiers"];
    EXPECT_EQ(t["host_policy"], policy);
    ReplayConfig config;
    config.tokens_per_block = 64;
    config.capacity_blocks = 60;
    ASSERT_TRUE(SetReplayPolicy(policy, &config).ok());
    TieredReplayOptions tiers;
    tiers.block_bytes = 512;
    tiers.host_blocks = 40;
    tiers.copy_threads = 0;
    tiers.host_eviction_policy = config.policy;
    auto expected = ReplayTraceWithTiers(*trace, config, tiers);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_EQ(t["hits"]["host"], expected->tiers.host_hit_blocks);
    EXPECT_EQ(t["hits"]["pool"], expected->replay.reused_blocks);
    EXPECT_EQ(t["offload"]["blocks"], expected->tiers.offload.offload.blocks);
  }
}

TEST(KvctlReplayTiersTest, TextSummaryAndAKeptDiskPath) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kvctl_replay_tiers_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const RunResult run = RunKvctl(With(kReplay, {"--host-tier-blocks", "30", "--disk-tier-blocks",
                                                "1000", "--disk-path", dir.string()}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("hit rate    "));
  EXPECT_THAT(run.out, HasSubstr("with tiers  hit rate "));
  EXPECT_THAT(run.out, HasSubstr("hits        pool "));
  EXPECT_THAT(run.out, HasSubstr("tiers       host 30 blocks (learned), disk 1000 blocks"));
  EXPECT_THAT(run.out, HasSubstr(", kept)"));
  EXPECT_THAT(run.out, HasSubstr(" 0 mismatched, 0 corrupt reads"));
  EXPECT_TRUE(fs::exists(dir / "CURRENT"));  // a RocksDB database, kept
  fs::remove_all(dir);
}

TEST(KvctlReplayTiersTest, BadTierFlagsExitTwo) {
  const std::vector<std::string> base = {"replay", "--synthetic", "--conversations", "10"};
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--host-tier-blocks", "100"}, "tiers need a pool capacity"},
      {{"--capacity-blocks", "10", "--disk-path", "/tmp/x"}, "apply with --host-tier-blocks"},
      {{"--capacity-blocks", "10", "--host-tier-blocks", "10", "--disk-path", "/tmp/x"},
       "need --disk-tier-blocks"},
      {{"--sweep=10,20", "--host-tier-blocks", "10"}, "--sweep does not take tiers"},
      {{"--capacity-blocks", "10", "--host-tier-blocks", "10", "--tier-block-bytes", "1000"},
       "is not a positive multiple"},
      {{"--capacity-blocks", "10", "--host-tier-blocks", "0"}, "--host-tier-blocks is 0: no tier"},
      {{"--capacity-blocks", "10", "--host-tier-blocks", "0", "--disk-tier-blocks", "0"},
       "are both 0"},
      {{"--capacity-blocks", "10", "--host-tier-blocks", "10", "--offload-min-priority", "200"},
       "--offload-min-priority 200"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunKvctl(With(base, c.flags));
    EXPECT_EQ(r.exit_code, 2) << c.message << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace kvmesh

namespace kvmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using cli_test::RunKvctl;
using cli_test::RunResult;

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

const std::vector<std::string> kDisk = {"replay",
                                        "--synthetic",
                                        "--seed",
                                        "3",
                                        "--conversations",
                                        "60",
                                        "--turns",
                                        "4",
                                        "--concurrency",
                                        "12",
                                        "--tokens-per-block",
                                        "64",
                                        "--capacity-blocks",
                                        "60",
                                        "--tier-block-bytes",
                                        "512",
                                        "--host-tier-blocks",
                                        "30",
                                        "--disk-tier-blocks",
                                        "1000"};

TEST(KvctlReplayTiersDiskTest, BothOutputsShowTheDiskTierState) {
  cli_test::ScratchDir dir("kvctl_disk_state");
  const RunResult text = RunKvctl(With(kDisk, {"--disk-path", dir.Path("db")}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(std::regex_search(
      text.out, std::regex("disk        [0-9]+ blocks durable.*on disk of .*; 0 puts failed")))
      << text.out;
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("DISABLED")));
  const RunResult json = RunKvctl(With(kDisk, {"--disk-path", dir.Path("db"), "--json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json j = Json::parse(json.out);
  const Json& d = j["tiers"]["disk"];
  ASSERT_TRUE(d.is_object()) << json.out;
  EXPECT_EQ(d["disabled"], false);
  EXPECT_TRUE(d["error"].is_null());
  EXPECT_EQ(d["failed_puts"], 0);
  EXPECT_EQ(d["durable_entries"], j["tiers"]["disk_entries"]);
  EXPECT_GT(d["durable_entries"].get<std::int64_t>(), 0);  // a clean end flushes
  EXPECT_EQ(d["unflushed_entries"], 0);
  EXPECT_GT(d["bytes_on_disk"].get<std::int64_t>(), 0);
  EXPECT_TRUE(d["damage"].is_null());
}

// Finding 5: the disk failing during the run (here: a file size limit, so that RocksDB's writes of
// its larger files fail). kvctl goes on without the disk tier and both outputs say so.
TEST(KvctlReplayTiersDiskTest, DiskFailingDuringTheRunIsShownInBothOutputs) {
  cli_test::ScratchDir dir("kvctl_disk_fails");
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  const rlimit small{128 << 10, old.rlim_max};  // inherited by kvctl; its outputs stay smaller
  signal(SIGXFSZ, SIG_IGN);                     // a write past it fails (EFBIG) instead of killing
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  // Blocks large enough that the spilled bundles cross the tier's flush_after_bytes (64 MiB) well
  // before the end: that flush fails while puts go on.
  const std::vector<std::string> longer = {"replay",
                                           "--synthetic",
                                           "--conversations",
                                           "800",
                                           "--capacity-blocks",
                                           "300",
                                           "--tier-block-bytes",
                                           "4KiB",
                                           "--host-tier-blocks",
                                           "300",
                                           "--disk-tier-blocks",
                                           "3000"};
  const RunResult text = RunKvctl(With(longer, {"--disk-path", dir.Path("text")}));
  const RunResult json = RunKvctl(With(longer, {"--disk-path", dir.Path("json"), "--json"}));
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, SIG_DFL);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("            DISABLED after: "));
  EXPECT_TRUE(std::regex_search(text.out, std::regex("; [1-9][0-9]* puts failed"))) << text.out;
  EXPECT_TRUE(std::regex_search(text.out, std::regex("spill .*; [1-9][0-9]* failed"))) << text.out;
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json j = Json::parse(json.out);
  const Json& d = j["tiers"]["disk"];
  EXPECT_EQ(d["disabled"], true) << json.out;
  ASSERT_TRUE(d["error"].is_string());
  EXPECT_THAT(d["error"].get<std::string>(), HasSubstr("File too large"));
  EXPECT_GT(d["failed_puts"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["tiers"]["disk_entries"], d["durable_entries"]);
  EXPECT_LT(d["durable_entries"].get<std::int64_t>(),
            j["tiers"]["spill"]["blocks"].get<std::int64_t>())
      << "entries that never reached the disk are counted";
}

// Finding 8: each open error once, in our words; an empty --disk-path is an error.
TEST(KvctlReplayTiersDiskTest, OpenErrorsArePrintedOnceInOurWords) {
  cli_test::ScratchDir dir("kvctl_open_errors");
  fs::create_directories(dir.Path("home"));
  std::ofstream(dir.Path("home") + "/notes.txt") << "mine";
  const RunResult foreign = RunKvctl(With(kDisk, {"--disk-path", dir.Path("home")}));
  EXPECT_EQ(foreign.exit_code, 1) << foreign.err;
  EXPECT_EQ(Count(foreign.err, "is not a kvmesh tier"), 1u) << foreign.err;
  EXPECT_EQ(Count(foreign.err, "\n"), 1u) << "more than the one error line:\n" << foreign.err;

  RocksDbTierOptions o;  // another process (this test) has the folder open
  o.path = dir.Path("busy");
  o.capacity_bytes = 1 << 20;
  o.pools = {{TierPoolId{0}, *MakeKvPoolLayout(*ReplayBlockGeometry(64, 512)), 1.0f}};
  auto holder = RocksDbTier::Open(o);
  ASSERT_TRUE(holder.ok()) << holder.status();
  const RunResult busy = RunKvctl(With(kDisk, {"--disk-path", dir.Path("busy")}));
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  EXPECT_EQ(Count(busy.err, "is in use: another tier"), 1u) << busy.err;
  EXPECT_EQ(Count(busy.err, "\n"), 1u) << busy.err;

  const RunResult empty = RunKvctl(With(kDisk, {"--disk-path", ""}));
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_THAT(empty.err, HasSubstr("kvctl: --disk-path: empty: give a folder"));
  EXPECT_THAT(empty.err, HasSubstr("run 'kvctl replay --help' for its flags"));
  EXPECT_EQ(empty.out, "");
}

// kvctl next to this test binary: <build>/tests/cli/<test> -> <build>/cli/kvctl.
std::string KvctlPath() {
  return (fs::read_symlink("/proc/self/exe").parent_path().parent_path().parent_path() / "cli" /
          "kvctl")
      .string();
}

// Finding 3: SIGTERM behaved like SIGKILL. Now kvctl flushes the disk tier, says so, and exits
// with 128 + 15; every block it reports durable is in the folder afterwards.
TEST(KvctlReplayTiersDiskTest, SigtermFlushesTheDiskTierBeforeExiting) {
  cli_test::ScratchDir dir("kvctl_sigterm");
  const std::string db = dir.Path("db");
  const std::string err_path = dir.Path("err");
  std::vector<std::string> args = {KvctlPath(),
                                   "replay",
                                   "--synthetic",
                                   "--conversations",
                                   "20000",
                                   "--capacity-blocks",
                                   "1000",
                                   "--host-tier-blocks",
                                   "2000",
                                   "--disk-tier-blocks",
                                   "100000",
                                   "--disk-path",
                                   db};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0) << argv[0];
  posix_spawn_file_actions_destroy(&actions);
  // Running with its disk tier open and puts going on (blob files written), then SIGTERM.
  bool started = false;
  for (int i = 0; i < 400 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(db, ec)) {
      started = started || e.path().extension() == ".blob";
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(started) << "kvctl never wrote to its disk tier";
  ASSERT_TRUE(WIFEXITED(status)) << "killed by the signal, no flush (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  const std::string err = cli_test::ReadFile(err_path);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      err, m, std::regex("kvctl: SIGTERM: flushed the disk tier .*: ([0-9]+) blocks durable")))
      << err;
  EXPECT_THAT(err, HasSubstr("kvctl: SIGTERM: exiting"));
  const long durable = std::stol(m[1].str());
  EXPECT_GT(durable, 0);
  RocksDbTierOptions o;
  o.path = db;
  o.capacity_bytes = 100000ll * 4240;
  o.pools = {{TierPoolId{0}, *MakeKvPoolLayout(*ReplayBlockGeometry(512, 4096)), 1.0f}};
  auto tier = RocksDbTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_GE((*tier)->stats().entries, durable);
  EXPECT_TRUE((*tier)->stats().damage.empty());
}

}  // namespace
}  // namespace kvmesh
