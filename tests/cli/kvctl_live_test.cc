// kvctl's live commands against a real kvnode process: every command as a table and as --json,
// what they report after a known workload, the connection settings (flags, environment, kvctl
// config file), the node unreachable, the wrong secret, and every command while the node is under
// load. kvctl inspect's components and tier copies: kvctl_inspect_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cli/kvctl_runner.h"
#include "tests/cli/live_node.h"

namespace kvmesh::cli_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;
using node_test::KvnodeProcess;
using node_test::TestConfig;

constexpr std::int32_t kT = 16;  // tokens per block in TestConfig

// Every live command with arguments that work on the fixture's node, and its JSON schema.
struct LiveCommand {
  std::vector<std::string> args;
  std::string schema;
};
std::vector<LiveCommand> LiveCommands() {
  return {{{"status"}, "kvmesh.status/1"},
          {{"pools"}, "kvmesh.pools/1"},
          {{"blocks"}, "kvmesh.blocks/1"},
          {{"tree"}, "kvmesh.tree/1"},
          {{"stats"}, "kvmesh.stats/1"},
          {{"events", "--count", "5"}, "kvmesh.event/1"},
          {{"evict", "--below-priority", "0", "--dry-run"}, "kvmesh.evict/1"},
          {{"flush"}, "kvmesh.flush/1"},
          {{"bench", "--clients", "2", "--duration", "0.3", "--prompt-tokens", "64"},
           "kvmesh.bench/1"}};
}

class KvctlLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto n = KvnodeProcess::Start(dir_.path(), TestConfig(dir_.path(), 4096, "8MiB", "256MiB"));
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = std::move(n).value();
  }
  // A small workload: 6 prompts of 5 blocks under one system prompt of 2 blocks, each run
  // twice (the second time every full block is reused).
  void Workload() {
    auto e = LiveEngine::Attach(*node_);
    ASSERT_TRUE(e.ok()) << e.status();
    const std::vector<Token> system = TestPrompt(7, 2 * kT);
    for (std::uint32_t i = 0; i < 6; ++i) {
      std::vector<Token> p = system;
      const std::vector<Token> tail = TestPrompt(100 + i, 3 * kT + 1);
      p.insert(p.end(), tail.begin(), tail.end());
      ASSERT_TRUE((*e)->Run(2 * i + 1, p).ok());
      ASSERT_TRUE((*e)->Run(2 * i + 2, p).ok());
    }
  }
  RunResult Run(std::vector<std::string> args) { return RunKvctl(Kvctl(*node_, std::move(args))); }
  Json RunJson(std::vector<std::string> args) {
    args.push_back("--json");
    const RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return Json::object();
    return Json::parse(r.out);
  }

  node_test::ScratchDir dir_;
  std::unique_ptr<KvnodeProcess> node_;
};

TEST_F(KvctlLiveTest, PoolsShowsThePlanOccupancyByStateAndPriorityAndTheTiers) {
  Workload();
  const RunResult t = Run({"pools"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("full/2x64"));
  EXPECT_THAT(t.out, HasSubstr("Qwen/Qwen2.5-0.5B, 16 tokens per block"));
  EXPECT_THAT(t.out, HasSubstr("PRIORITY"));
  EXPECT_THAT(t.out, HasSubstr("host"));
  const Json j = RunJson({"pools"});
  EXPECT_EQ(j["schema"], "kvmesh.pools/1");
  ASSERT_EQ(j["pools"].size(), 1u);
  const Json& p = j["pools"][0];
  // 2 shared + 6 x 3 own full blocks are cached, all at the default priority.
  EXPECT_EQ(p["status"]["cached_blocks"], 20);
  EXPECT_EQ(p["status"]["pinned_blocks"], 0);
  EXPECT_EQ(p["status"]["free_blocks"].get<std::int64_t>() + 20, p["status"]["num_blocks"]);
  ASSERT_EQ(p["cached_by_priority"].size(), 1u);
  EXPECT_EQ(p["cached_by_priority"][0]["priority"], 35);
  EXPECT_EQ(p["cached_by_priority"][0]["blocks"], 20);
  EXPECT_EQ(p["components"][0]["name"], "data");
  EXPECT_EQ(p["components"][0]["num_layers"], 24);
  EXPECT_EQ(p["stored_blocks"], 20);
  EXPECT_EQ(j["tiers"][0]["status"]["name"], "host");
  EXPECT_EQ(j["tiers"][1]["status"]["name"], "disk");
  EXPECT_EQ(j["tree_nodes"], 20);
}

TEST_F(KvctlLiveTest, BlocksListsPagesAndFilters) {
  Workload();
  Json j = RunJson({"blocks", "--limit", "7"});
  EXPECT_EQ(j["schema"], "kvmesh.blocks/1");
  EXPECT_EQ(j["blocks"].size(), 7u);
  EXPECT_EQ(j["total_blocks"], 20);
  ASSERT_NE(j["next_cursor"], 0);
  const Json& b = j["blocks"][0];
  EXPECT_EQ(b["content_id"].get<std::string>().size(), 32u);
  EXPECT_EQ(b["priority"], 35);
  EXPECT_EQ(b["pins"][0], 0);
  EXPECT_GE(b["age_s"].get<double>(), 0.0);  // the node saw it stored
  EXPECT_EQ(b["host"][0], false);            // nothing was evicted yet
  // The pages together list every block once.
  std::set<std::string> ids;
  std::uint64_t cursor = 0;
  int pages = 0;
  do {
    Json page = RunJson({"blocks", "--limit", "7", "--cursor", std::to_string(cursor)});
    for (const Json& e : page["blocks"]) ids.insert(e["content_id"].get<std::string>());
    cursor = page["next_cursor"].get<std::uint64_t>();
    ++pages;
  } while (cursor != 0 && pages < 10);
  EXPECT_EQ(ids.size(), 20u);
  EXPECT_EQ(RunJson({"blocks", "--all", "--limit", "3"})["blocks"].size(), 20u);
  // Filters: no block has priority 90; pool 0 holds all.
  EXPECT_EQ(RunJson({"blocks", "--priority", "90", "--all"})["blocks"].size(), 0u);
  EXPECT_EQ(RunJson({"blocks", "--pool", "0", "--all"})["blocks"].size(), 20u);
  // The table: short ids, a footer that says how to go on.
  const RunResult t = Run({"blocks", "--limit", "5"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("CONTENT ID"));
  EXPECT_THAT(t.out, HasSubstr("5 blocks listed of 20 cached"));
  EXPECT_THAT(t.out, HasSubstr("next page: --cursor"));
  // Bad input: a pool that does not exist, an inverted range.
  EXPECT_EQ(Run({"blocks", "--pool", "3"}).exit_code, 2);
  EXPECT_EQ(Run({"blocks", "--min-priority", "50", "--max-priority", "10"}).exit_code, 2);
}

TEST_F(KvctlLiveTest, TreeSummarisesAndDumpsASubtree) {
  Workload();
  const Json j = RunJson({"tree"});
  EXPECT_EQ(j["schema"], "kvmesh.tree/1");
  EXPECT_EQ(j["nodes"], 20);
  EXPECT_EQ(j["domains"], 1);
  EXPECT_EQ(j["leaves"], 6);
  EXPECT_EQ(j["max_depth"], 4);
  // depth 0 and 1: the system prompt; 2, 3, 4: six branches.
  EXPECT_EQ(j["depth_histogram"], Json::array({1, 1, 6, 6, 6}));
  EXPECT_EQ(j["fanout_histogram"][1], 13);  // single-child inner nodes
  EXPECT_EQ(j["fanout_histogram"][6], 1);   // the system prompt's last block
  // The subtree of the system prompt's second block by a prefix of its content id.
  const Json roots = RunJson({"tree", "--dump", "--depth", "1"});
  ASSERT_GE(roots["dump"].size(), 2u);
  const std::string second = roots["dump"][1]["content_id"];
  const Json sub = RunJson({"tree", second.substr(0, 10), "--depth", "2"});
  ASSERT_EQ(sub["dump"].size(), 13u);  // itself, 6 children, 6 grandchildren
  EXPECT_EQ(sub["dump"][0]["content_id"], second);
  EXPECT_EQ(sub["dump"][0]["children"], 6);
  EXPECT_EQ(sub["truncated"], true);  // the great-grandchildren are below --depth
  const RunResult t = Run({"tree", second.substr(0, 10)});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("20 nodes in 1 domains: 6 leaves"));
  EXPECT_THAT(t.out, HasSubstr("19 nodes dumped"));
  EXPECT_EQ(Run({"tree", "zz"}).exit_code, 2);                 // not hex
  EXPECT_EQ(Run({"tree", "ffffffffffffffff1"}).exit_code, 2);  // no such node (not found)
}

TEST_F(KvctlLiveTest, StatsReportsHitsPerTierAndLatencyPercentiles) {
  Workload();
  const Json j = RunJson({"stats"});
  EXPECT_EQ(j["schema"], "kvmesh.stats/1");
  const Json& s = j["stats"];
  EXPECT_EQ(s["admissions"], 12);
  EXPECT_EQ(s["input_blocks"], 12 * 6);
  // First runs reuse nothing, except the system prompt after the first (5 x 2); second runs
  // reuse their 5 full blocks.
  EXPECT_EQ(s["pool_hit_blocks"], 5 * 2 + 6 * 5);
  EXPECT_EQ(s["host_hit_blocks"], 0);
  EXPECT_EQ(j["derived"]["hit_rate"].get<double>(), 40.0 / 72.0);
  bool admit = false;
  for (const Json& a : j["derived"]["apis"]) {
    if (a["api"] != "admit") continue;
    admit = true;
    EXPECT_EQ(a["requests"], 12);
    EXPECT_GT(a["p50_s"].get<double>(), 0.0);
    EXPECT_GE(a["p99_s"].get<double>(), a["p50_s"].get<double>());
  }
  EXPECT_TRUE(admit);
  const RunResult t = Run({"stats"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("55.56% of 72 block positions (12 admissions)"));
  EXPECT_THAT(t.out, HasSubstr("admit"));
  EXPECT_THAT(t.out, HasSubstr("offload"));
  // Over an interval in which nothing happened: no admissions.
  const Json quiet = RunJson({"stats", "--interval", "0.2"});
  EXPECT_EQ(quiet["stats"]["admissions"], 0);
  EXPECT_EQ(quiet["interval"], true);
}

TEST_F(KvctlLiveTest, EventsPrintsRetainedAndFollowsNewOnes) {
  Workload();
  const RunResult all = Run({"events", "--json", "--count", "1000"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::istringstream lines(all.out);
  int stored = 0;
  for (std::string line; std::getline(lines, line);) {
    const Json e = Json::parse(line);
    EXPECT_EQ(e["schema"], "kvmesh.event/1");
    stored += e["type"] == "stored";
  }
  EXPECT_EQ(stored, 20);
  const RunResult t = Run({"events", "--count", "3"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("stored"));
  // More are retained than the count shows: it says so, and how to see the next.
  EXPECT_THAT(t.err, HasSubstr("events 1..3 shown (3, the count); newer ones are retained: --from "
                               "4 for the next"));
  const RunResult rest = Run({"events", "--from", "4", "--count", "1000"});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_THAT(rest.err, Not(HasSubstr("newer ones are retained")));
  // --follow: only what happens after the start; a run in another thread makes 3 new blocks.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    auto e = LiveEngine::Attach(*node_, "late-engine");
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE((*e)->Run(1, TestPrompt(999, 3 * kT + 2)).ok());
  });
  const RunResult f = Run({"events", "--follow", "--count", "3", "--duration", "20", "--json"});
  writer.join();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  std::istringstream fl(f.out);
  int n = 0;
  for (std::string line; std::getline(fl, line); ++n) {
    const Json e = Json::parse(line);
    EXPECT_EQ(e["type"], "stored");
    EXPECT_GT(e["seq"].get<std::uint64_t>(), 20u);
  }
  EXPECT_EQ(n, 3);
}

TEST_F(KvctlLiveTest, EvictDropsASubtreeOrLowPrioritiesAndSaysWhatStayed) {
  Workload();
  const Json roots = RunJson({"tree", "--dump", "--depth", "1"});
  const std::string second = roots["dump"][1]["content_id"];  // the system prompt's block 1
  // A pinned branch: an engine holds a sequence on one prompt.
  auto e = LiveEngine::Attach(*node_, "holder");
  ASSERT_TRUE(e.ok());
  std::vector<Token> held = TestPrompt(7, 2 * kT);
  const std::vector<Token> tail = TestPrompt(100, 3 * kT + 1);
  held.insert(held.end(), tail.begin(), tail.end());
  ASSERT_TRUE((*e)->client().Admit(77, held).ok());
  const Json dry = RunJson({"evict", second, "--dry-run"});
  EXPECT_EQ(dry["schema"], "kvmesh.evict/1");
  EXPECT_EQ(dry["dry_run"], true);
  // Below `second`: 6 branches of 3. The held branch's leaf is pinned; its two other blocks and
  // `second` itself (pinned too, but first of all holding kept blocks) stay for it.
  EXPECT_EQ(dry["evicted"], 15);
  EXPECT_EQ(dry["kept_pinned"], 1);
  EXPECT_EQ(dry["kept_for_descendants"], 3);
  EXPECT_EQ(dry["kept_partial"], 0);
  EXPECT_EQ(RunJson({"tree"})["nodes"], 20);  // a dry run changes nothing
  const RunResult t = Run({"evict", second});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("evicted 15 blocks"));
  EXPECT_THAT(t.out, HasSubstr("(15 pool blocks copied into a tier first)"));
  EXPECT_THAT(t.out, HasSubstr("kept 1 pinned, 3 holding kept blocks below them"));
  EXPECT_EQ(RunJson({"tree"})["nodes"], 5);
  // The evicted blocks went to the host tier (offload priority 0 in TestConfig): a restore finds
  // them.
  EXPECT_EQ(RunJson({"pools"})["tiers"][0]["status"]["entries"], 15);
  ASSERT_TRUE((*e)->client().Release(77).ok());
  // Everything below priority 36 (all of it, nothing pinned now).
  const Json low = RunJson({"evict", "--below-priority", "36"});
  EXPECT_EQ(low["evicted"], 5);
  EXPECT_EQ(RunJson({"tree"})["nodes"], 0);
  EXPECT_EQ(RunJson({"pools"})["pools"][0]["claimed_blocks"], 20);
  EXPECT_EQ(Run({"evict"}).exit_code, 2);  // nothing selected
  EXPECT_EQ(Run({"evict", "0123", "--below-priority", "3"}).exit_code, 2);
}

TEST_F(KvctlLiveTest, FlushWritesCachedBlocksToDisk) {
  Workload();
  const Json j = RunJson({"flush"});
  EXPECT_EQ(j["schema"], "kvmesh.flush/1");
  EXPECT_EQ(j["written"], 20);
  EXPECT_EQ(j["failures"], 0);
  const RunResult again = Run({"flush"});  // nothing left to write
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("flushed 0 blocks to the disk tier"));
  const Json blocks = RunJson({"blocks", "--all"});
  for (const Json& b : blocks["blocks"]) EXPECT_EQ(b["disk"][0], true);
  EXPECT_EQ(RunJson({"pools"})["tiers"][1]["status"]["entries"], 20);
}

TEST_F(KvctlLiveTest, BenchRunsAShortLoadWithoutErrors) {
  const Json j =
      RunJson({"bench", "--clients", "4", "--duration", "0.5", "--prompt-tokens", "257"});
  EXPECT_EQ(j["schema"], "kvmesh.bench/1");
  EXPECT_EQ(j["errors"], 0);
  EXPECT_GT(j["requests"].get<std::int64_t>(), 10);
  EXPECT_EQ(j["cached_tokens"], 256);  // the full blocks (the last token is always recomputed)
  EXPECT_EQ(j["ops"].size(), 3u);
  EXPECT_EQ(j["clients_lost"], 0);
  // The prompt it wrote is at priority 0: the first to go.
  EXPECT_EQ(RunJson({"evict", "--below-priority", "1", "--dry-run"})["evicted"], 256 / kT);
  const RunResult t =
      Run({"bench", "--clients", "2", "--duration", "0.3", "--prompt-tokens", "1024"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("lookup_hit"));
}

// A node that dies under the load ends the run (not at --duration) and the rate counts only the
// time it answered; the failure is an error (exit 1) that says what happened.
TEST_F(KvctlLiveTest, BenchStopsWhenTheNodeDies) {
  RunResult r;
  std::thread bench([&] {
    r = Run({"bench", "--clients", "2", "--duration", "60", "--prompt-tokens", "64", "--json"});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  node_->process().Signal(SIGKILL);
  bench.join();  // a bench that ran on would hold the test for 60 s: the ctest timeout says so
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("peer_unreachable")) << r.err;  // closed, or reset
  const Json j = Json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["clients_lost"], 2);
  EXPECT_LT(j["seconds"].get<double>(), 30.0);
  EXPECT_GT(j["requests"].get<std::int64_t>(), 0);
}

TEST_F(KvctlLiveTest, ReplayLiveRunsTheSyntheticEngineAgainstTheNode) {
  const std::vector<std::string> args = {
      "replay", "--synthetic", "--conversations", "3", "--turns", "2", "--tokens-per-block",
      "16",     "--live",      "--engines",       "2"};
  Json j = RunJson(args);
  EXPECT_EQ(j["schema"], "kvmesh.replay_live/1");
  EXPECT_EQ(j["requests"], 6);
  EXPECT_EQ(j["failed_requests"], 0);
  EXPECT_GT(j["checks"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["check_failures"], 0);
  // The engine reported its checks: the node exports them.
  const Json s = RunJson({"stats"});
  EXPECT_EQ(s["stats"]["engine_checks"], j["checks"]);
  std::vector<std::string> table = args;
  table.push_back("--progress");
  const RunResult t = Run(table);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("6 requests through the synthetic engine"));
  EXPECT_THAT(t.err, HasSubstr("replay ["));  // the progress bar
  // Through the Unix socket directly too.
  const RunResult unix_socket = RunKvctl(
      {"replay", "--synthetic", "--conversations", "1", "--turns", "1", "--tokens-per-block", "16",
       "--live", "--node", node_->unix_socket(), "--secret", node_test::kTestSecret});
  EXPECT_EQ(unix_socket.exit_code, 0) << unix_socket.err;
}

TEST_F(KvctlLiveTest, EveryCommandAsATableAndAsJson) {
  Workload();
  for (const LiveCommand& c : LiveCommands()) {
    const RunResult t = Run(c.args);
    EXPECT_EQ(t.exit_code, 0) << c.args[0] << ": " << t.err;
    EXPECT_FALSE(t.out.empty()) << c.args[0];
    std::vector<std::string> args = c.args;
    args.push_back("--json");
    const RunResult j = Run(args);
    ASSERT_EQ(j.exit_code, 0) << c.args[0] << ": " << j.err;
    // events prints one document per line; the others one document.
    const std::string first = j.out.substr(0, j.out.find('\n', j.out.find('}')) + 1);
    const Json doc = c.schema == "kvmesh.event/1" ? Json::parse(j.out.substr(0, j.out.find('\n')))
                                                  : Json::parse(j.out);
    EXPECT_EQ(doc["schema"], c.schema) << c.args[0];
  }
}

TEST_F(KvctlLiveTest, UnreachableNodeAndWrongSecretAreClearErrorsForEveryCommand) {
  std::vector<LiveCommand> commands = LiveCommands();
  commands.push_back({{"inspect", "00"}, ""});
  commands.push_back({{"replay", "--synthetic", "--live"}, ""});
  for (const LiveCommand& c : commands) {
    std::vector<std::string> unreachable = c.args;
    for (const char* a : {"--node", "127.0.0.1:1", "--secret", node_test::kTestSecret}) {
      unreachable.push_back(a);
    }
    const RunResult u = RunKvctl(unreachable);
    EXPECT_EQ(u.exit_code, 1) << c.args[0];
    EXPECT_THAT(u.err, HasSubstr("is kvnode running?")) << c.args[0] << ": " << u.err;
    EXPECT_TRUE(u.out.empty()) << c.args[0];
    std::vector<std::string> wrong = c.args;
    for (const char* a :
         {"--node", node_->tcp_address().c_str(), "--secret", "not-the-secret-0123456789"}) {
      wrong.push_back(a);
    }
    const RunResult w = RunKvctl(wrong);
    EXPECT_EQ(w.exit_code, 1) << c.args[0];
    EXPECT_THAT(w.err, HasSubstr("refused the secret")) << c.args[0] << ": " << w.err;
  }
}

TEST_F(KvctlLiveTest, AddressAndSecretFromTheEnvironmentOrAKvctlConfigFile) {
  const std::string secret_file = (dir_.path() / "secret").string();
  { std::ofstream(secret_file) << node_test::kTestSecret << "\n"; }
  ::chmod(secret_file.c_str(), 0600);
  const std::string config = (dir_.path() / "kvctl.yaml").string();
  { std::ofstream(config) << "node: " << node_->tcp_address() << "\nsecret_file: secret\n"; }
  RunResult r = RunKvctl({"pools", "--config", config});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunKvctl({"pools"}, {"KVMESH_KVCTL_CONFIG=" + config});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // ~/.config/kvmesh/kvctl.yaml when nothing else is given.
  std::filesystem::create_directories(dir_.path() / "home/.config/kvmesh");
  std::filesystem::copy_file(config, dir_.path() / "home/.config/kvmesh/kvctl.yaml");
  std::filesystem::copy_file(secret_file, dir_.path() / "home/.config/kvmesh/secret");
  r = RunKvctl({"stats"}, {"HOME=" + (dir_.path() / "home").string(), "XDG_CONFIG_HOME="});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The environment before the file, flags before both.
  r = RunKvctl({"pools"}, {"KVMESH_KVCTL_CONFIG=" + config, "KVMESH_NODE=127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(r.err, HasSubstr("the address from KVMESH_NODE"));  // where it came from
  const std::string unreachable_config = (dir_.path() / "unreachable.yaml").string();
  { std::ofstream(unreachable_config) << "node: 127.0.0.1:1\nsecret_file: secret\n"; }
  r = RunKvctl({"pools", "--config", unreachable_config});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("the address from node: in " + unreachable_config)) << r.err;
  // Something that takes the connection but is not kvnode (here its metrics endpoint): said so.
  r = RunKvctl({"pools", "--node", node_->metrics_address(), "--timeout-ms", "500", "--secret",
                node_test::kTestSecret});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("did not answer as kvnode")) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the address from --node")) << r.err;
  r = RunKvctl({"pools", "--node", node_->tcp_address()},
               {"KVMESH_KVCTL_CONFIG=" + config, "KVMESH_NODE=127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunKvctl({"pools", "--config", config, "--secret", "wrong-secret-0123456789"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("refused the secret from --secret")) << r.err;  // not "config"
  // A bad config file names the file, the line and the key.
  const std::string bad = (dir_.path() / "bad.yaml").string();
  { std::ofstream(bad) << "node: 127.0.0.1:7420\nsecrte: x\n"; }
  r = RunKvctl({"pools", "--config", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad.yaml:2: unknown key 'secrte'"));
  r = RunKvctl({"pools", "--config", (dir_.path() / "missing.yaml").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot be read"));
}

TEST_F(KvctlLiveTest, EveryCommandAnswersWhileTheNodeIsUnderLoad) {
  Workload();
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> admitted{0};
  std::vector<std::thread> load;
  for (int i = 0; i < 4; ++i) {
    load.emplace_back([&, i] {
      auto e = LiveEngine::Attach(*node_, "load-" + std::to_string(i));
      ASSERT_TRUE(e.ok()) << e.status();
      for (std::uint32_t k = 0; !stop.load(); ++k) {
        Result<std::int64_t> r = (*e)->Run(k + 1, TestPrompt(1000 * (i + 1) + k % 40, 4 * kT + 3));
        if (r.ok()) admitted.fetch_add(1);
      }
    });
  }
  while (admitted.load() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (const LiveCommand& c : LiveCommands()) {
    std::vector<std::string> args = c.args;
    args.push_back("--json");
    const RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << c.args[0] << ": " << r.err;
  }
  const Json some = RunJson({"blocks"});
  ASSERT_FALSE(some["blocks"].empty());
  const RunResult inspect = Run({"inspect", some["blocks"][0]["content_id"]});
  // The block may have been evicted meanwhile: then "no cached block".
  EXPECT_TRUE(inspect.exit_code == 0 || inspect.err.find("no cached block") != std::string::npos)
      << inspect.err;
  stop.store(true);
  for (auto& t : load) t.join();
  EXPECT_GT(admitted.load(), 20);
}

}  // namespace
}  // namespace kvmesh::cli_test
