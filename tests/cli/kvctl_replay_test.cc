// Runs the real kvctl binary: `kvctl replay` on synthetic traces and trace files (JSON numbers
// equal to the library's), the sweep's CSV and PNG, the progress bar, and the exit codes and
// messages of bad command lines, empty traces and a line without end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "pool/trace.h"
#include "pool/trace_replay.h"
#include "tests/cli/kvctl_runner.h"

namespace kvmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using cli_test::ReadFile;
using cli_test::RunKvctl;
using cli_test::RunResult;

Json RunJson(std::vector<std::string> args) {
  args.push_back("--json");
  const RunResult r = RunKvctl(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // stderr is not a terminal here: no progress bar
  Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

bool GnuplotAvailable() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream dirs(path);
  std::string d;
  while (std::getline(dirs, d, ':')) {
    if (!d.empty() && access((fs::path(d) / "gnuplot").c_str(), X_OK) == 0) return true;
  }
  return false;
}

// The synthetic trace the flags below describe, replayed at 64 tokens per block (hit rates do not
// depend on the block size; the tests run faster under the sanitizers).
SyntheticTraceOptions SmallSynthetic() {
  SyntheticTraceOptions o;
  o.seed = 3;
  o.conversations = 60;
  o.turns = 4;
  o.concurrency = 12;
  return o;
}
const std::vector<std::string> kSmallSyntheticFlags = {
    "replay",  "--synthetic", "--seed",        "3",  "--conversations",    "60",
    "--turns", "4",           "--concurrency", "12", "--tokens-per-block", "64"};
constexpr std::int32_t kSmallTokensPerBlock = 64;

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void ExpectSameRun(const Json& j, const ReplayResult& r) {
  EXPECT_EQ(j["requests"], r.requests);
  EXPECT_EQ(j["input_blocks"], r.input_blocks);
  EXPECT_EQ(j["reused_blocks"], r.reused_blocks);
  EXPECT_EQ(j["evicted_blocks"], r.evicted_blocks);
  EXPECT_EQ(j["cached_blocks"], r.cached_blocks);
  EXPECT_EQ(j["rejected_requests"], r.rejected_requests);
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), r.hit_rate());
}

TEST(KvctlReplayTest, SyntheticJsonMatchesTheLibrary) {
  auto trace = GenerateSyntheticTrace(SmallSynthetic());
  ASSERT_TRUE(trace.ok());
  for (const char* policy : {"lru", "priority-lru", "learned", "optimal"}) {
    SCOPED_TRACE(policy);
    const Json j =
        RunJson(With(kSmallSyntheticFlags, {"--capacity-blocks", "150", "--policy", policy}));
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["schema"], "kvmesh.replay/1");
    EXPECT_EQ(j["trace"]["source"], "synthetic");
    EXPECT_EQ(j["trace"]["synthetic"]["seed"], 3);
    EXPECT_EQ(j["trace"]["requests"], 240);
    EXPECT_EQ(j["policy"], policy);
    EXPECT_EQ(j["capacity_blocks"], 150);
    EXPECT_EQ(j["tokens_per_block"], 64);
    EXPECT_TRUE(j["capacity_bytes"].is_null());
    ReplayConfig config;
    config.tokens_per_block = kSmallTokensPerBlock;
    config.capacity_blocks = 150;
    ASSERT_TRUE(SetReplayPolicy(policy, &config).ok());
    auto expected = ReplayTrace(*trace, config);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ExpectSameRun(j, *expected);
    EXPECT_GT(expected->evicted_blocks, 0);
    EXPECT_EQ(j["priorities"].is_null(), std::string(policy) != "priority-lru");
  }
}

TEST(KvctlReplayTest, OptimalIsTheBoundInTheText) {
  const RunResult text =
      RunKvctl(With(kSmallSyntheticFlags, {"--capacity-blocks", "150", "--policy", "optimal"}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("policy      optimal (the offline optimum)\n"));
  // The optimum with tiers is refused: it replays the pool alone.
  const RunResult tiers =
      RunKvctl(With(kSmallSyntheticFlags, {"--capacity-blocks", "150", "--policy", "optimal",
                                           "--host-tier-blocks", "100"}));
  EXPECT_EQ(tiers.exit_code, 2) << tiers.err;
  EXPECT_THAT(tiers.err, HasSubstr("--policy optimal replays the pool alone: leave out "
                                   "--host-tier-blocks and --disk-tier-blocks"));
}

TEST(KvctlReplayTest, OneOffShareReachesTheGenerator) {
  const Json j = RunJson(With(kSmallSyntheticFlags, {"--one-off-share", "0.5"}));
  EXPECT_EQ(j["trace"]["synthetic"]["one_off_share"], 0.5);
  SyntheticTraceOptions o = SmallSynthetic();
  o.one_off_share = 0.5;
  auto trace = GenerateSyntheticTrace(o);
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(j["trace"]["requests"], std::ssize(*trace));
  EXPECT_LT(std::ssize(*trace), 240);  // some conversations had one turn, not four
  const RunResult text = RunKvctl(With(kSmallSyntheticFlags, {"--one-off-share", "0.5"}));
  EXPECT_THAT(text.out, HasSubstr("60 conversations x 4 turns (0.50 of them 1 turn)"));
}

TEST(KvctlReplayTest, UnlimitedByDefaultAndTextSummary) {
  const Json j = RunJson(kSmallSyntheticFlags);
  EXPECT_TRUE(j["capacity_blocks"].is_null());
  EXPECT_EQ(j["policy"], "learned");  // kDefaultEvictionPolicy
  EXPECT_EQ(j["evicted_blocks"], 0);
  const RunResult text = RunKvctl(kSmallSyntheticFlags);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  char hit[32];
  std::snprintf(hit, sizeof(hit), "hit rate    %.4f\n", j["hit_rate"].get<double>());
  EXPECT_THAT(text.out, HasSubstr(hit));
  EXPECT_THAT(text.out, HasSubstr("capacity    unlimited"));
  EXPECT_THAT(text.out, HasSubstr("evictions   0\n"));
}

TEST(KvctlReplayTest, WrittenTraceReplaysToTheSameNumbers) {
  const cli_test::ScratchDir dir("kvctl_replay");
  const std::string path = dir.Path("synthetic.jsonl");
  const Json synthetic =
      RunJson(With(kSmallSyntheticFlags, {"--capacity-blocks", "100", "--write-trace", path}));
  EXPECT_EQ(synthetic["trace"]["written_to"], path);
  ASSERT_TRUE(fs::exists(path));
  const Json file = RunJson({"replay", path, "--capacity-blocks", "100"});
  EXPECT_EQ(file["trace"]["source"], "file");
  EXPECT_EQ(file["trace"]["path"], path);
  for (const char* field : {"requests", "input_blocks", "reused_blocks", "evicted_blocks"}) {
    EXPECT_EQ(file[field], synthetic[field]) << field;
  }
  const Json limited = RunJson({"replay", path, "--limit", "10"});
  EXPECT_EQ(limited["requests"], 10);
  // `--sweep TRACE.jsonl`: the file is the trace, the capacities the default list.
  const Json sweep = RunJson({"replay", "--sweep", path, "--policy", "lru", "--no-plot",
                              "--out-dir", dir.Path("out"), "--limit", "20"});
  EXPECT_EQ(sweep["trace"]["path"], path);
  EXPECT_EQ(sweep["runs"].size(), 6u);
}

TEST(KvctlReplayTest, CapacityBytesConvertsAtOneBlockOfTheModel) {
  // Llama-3-8B bf16: 32 layers x 2 x 8 heads x 512 tokens x 128 x 2 bytes = 64 MiB per block.
  const std::vector<std::string> synthetic = {"replay", "--synthetic", "--conversations", "20"};
  const Json j = RunJson(With(synthetic, {"--capacity-bytes", "8GiB"}));
  EXPECT_EQ(j["capacity_bytes"], 8LL << 30);
  EXPECT_EQ(j["bytes_per_block"], 64LL << 20);
  EXPECT_EQ(j["capacity_blocks"], 128);
  EXPECT_EQ(j["model"], "llama-3-8b");
  EXPECT_EQ(j["dtype"], "bf16");
  const Json fp8 = RunJson(With(synthetic, {"--capacity-bytes", "8GiB", "--model", "llama-3-8b",
                                            "--dtype", "fp8", "--tokens-per-block", "64"}));
  // fp8: 1 byte per element plus an FP32 scale per (token, head): 32*2*8*64*(128+4) B.
  EXPECT_EQ(fp8["bytes_per_block"], 32LL * 2 * 8 * 64 * (128 + 4));
  EXPECT_EQ(fp8["capacity_blocks"], (8LL << 30) / (32LL * 2 * 8 * 64 * (128 + 4)));
  const RunResult text = RunKvctl(With(synthetic, {"--capacity-bytes", "8GiB"}));
  EXPECT_THAT(text.out, HasSubstr("from --capacity-bytes 8.00 GiB at 64.00 MiB per block "
                                  "(llama-3-8b bf16, 512 tokens)"));
}

TEST(KvctlReplayTest, SweepWritesCsvAndPng) {
  const cli_test::ScratchDir dir("kvctl_replay");
  const Json j = RunJson(
      With(kSmallSyntheticFlags, {"--sweep=100,300,unlimited", "--out-dir", dir.Path("out")}));
  EXPECT_EQ(j["schema"], "kvmesh.replay_sweep/1");
  ASSERT_EQ(j["runs"].size(), 12u);  // 3 capacities x (lru, priority-lru, learned, optimal)
  const std::string csv = ReadFile(dir.Path("out/replay_sweep.csv"));
  std::stringstream lines(csv);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "capacity_blocks,policy,hit_rate,reused_blocks,input_blocks,evictions");
  auto trace = GenerateSyntheticTrace(SmallSynthetic());
  ASSERT_TRUE(trace.ok());
  int rows = 0;
  for (const Json& run : j["runs"]) {
    ASSERT_TRUE(std::getline(lines, line));
    const std::string capacity = run["capacity_blocks"].is_null()
                                     ? "unlimited"
                                     : std::to_string(run["capacity_blocks"].get<int>());
    char expected[256];
    std::snprintf(expected, sizeof(expected), "%s,%s,%.6f,%lld,%lld,%lld", capacity.c_str(),
                  run["policy"].get<std::string>().c_str(), run["hit_rate"].get<double>(),
                  run["reused_blocks"].get<long long>(), run["input_blocks"].get<long long>(),
                  run["evicted_blocks"].get<long long>());
    EXPECT_EQ(line, expected);
    ReplayConfig config;
    config.tokens_per_block = kSmallTokensPerBlock;
    if (!run["capacity_blocks"].is_null())
      config.capacity_blocks = run["capacity_blocks"].get<int>();
    ASSERT_TRUE(SetReplayPolicy(run["policy"].get<std::string>(), &config).ok());
    auto library = ReplayTrace(*trace, config);
    ASSERT_TRUE(library.ok());
    ExpectSameRun(run, *library);
    ++rows;
  }
  EXPECT_EQ(rows, 12);
  EXPECT_FALSE(std::getline(lines, line));
  EXPECT_EQ(j["runs"][0]["capacity_blocks"], 100);
  EXPECT_EQ(j["runs"][0]["policy"], "lru");
  EXPECT_EQ(j["runs"][3]["policy"], "optimal");
  EXPECT_TRUE(j["runs"][11]["capacity_blocks"].is_null());
  // The plot script draws every policy, the optimum dashed, and the unlimited level.
  const std::string gp = ReadFile(dir.Path("out/replay_sweep.gp"));
  for (const char* name :
       {"'lru'", "'priority-lru'", "'learned'", "dt 3 title 'optimal'", "title 'unlimited'"}) {
    EXPECT_THAT(gp, HasSubstr(name));
  }
  if (!GnuplotAvailable()) GTEST_SKIP() << "gnuplot is not installed: PNG not checked";
  EXPECT_EQ(j["plot"], "written");
  EXPECT_EQ(j["png"], dir.Path("out/replay_sweep.png"));
  const std::string png = ReadFile(dir.Path("out/replay_sweep.png"));
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // A relative --out-dir and one finite capacity: gnuplot's warnings (an x range of one point)
  // stay out of kvctl's output, and the script redraws its plot when run from its own folder.
  const std::string rel = fs::relative(dir.Path("rel"), fs::current_path()).string();
  const RunResult r = RunKvctl(
      With(kSmallSyntheticFlags, {"--sweep=100,unlimited", "--policy", "lru", "--out-dir", rel}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  ASSERT_TRUE(fs::remove(dir.Path("rel/replay_sweep.png")));
  const std::string redraw = "cd '" + dir.Path("rel") + "' && gnuplot replay_sweep.gp 2>/dev/null";
  EXPECT_EQ(std::system(redraw.c_str()), 0);
  EXPECT_TRUE(fs::exists(dir.Path("rel/replay_sweep.png")));
}

TEST(KvctlReplayTest, SweepWithoutGnuplotWritesTheCsvAndFailsOnlyWithPlot) {
  const cli_test::ScratchDir dir("kvctl_replay");
  const std::vector<std::string> args =
      With(kSmallSyntheticFlags,
           {"--sweep=100,unlimited", "--policy", "lru", "--out-dir", dir.Path("out"), "--json"});
  const std::vector<std::string> env = {"KVMESH_GNUPLOT=/nonexistent/gnuplot"};
  const RunResult skipped = RunKvctl(args, env);
  ASSERT_EQ(skipped.exit_code, 0) << skipped.err;
  const Json j = Json::parse(skipped.out);
  EXPECT_EQ(j["runs"].size(), 2u);  // --policy lru: one policy
  EXPECT_TRUE(j["png"].is_null());
  EXPECT_THAT(j["plot"].get<std::string>(), HasSubstr("skipped: cannot run /nonexistent/gnuplot"));
  EXPECT_TRUE(fs::exists(dir.Path("out/replay_sweep.csv")));
  EXPECT_FALSE(fs::exists(dir.Path("out/replay_sweep.png")));

  const RunResult required = RunKvctl(With(args, {"--plot"}), env);
  EXPECT_EQ(required.exit_code, 1);
  EXPECT_THAT(required.err, HasSubstr("kvctl: --plot: cannot run /nonexistent/gnuplot"));
  EXPECT_EQ(required.out, "");

  const RunResult no_plot = RunKvctl(With(args, {"--no-plot"}));
  EXPECT_EQ(no_plot.exit_code, 0) << no_plot.err;
  EXPECT_EQ(Json::parse(no_plot.out)["plot"], "skipped (--no-plot)");
}

TEST(KvctlReplayTest, ProgressBarOnlyWhenAskedOffATerminal) {
  const RunResult quiet = RunKvctl(kSmallSyntheticFlags);
  EXPECT_EQ(quiet.err, "");
  const RunResult bar = RunKvctl(With(kSmallSyntheticFlags, {"--progress"}));
  ASSERT_EQ(bar.exit_code, 0) << bar.err;
  EXPECT_THAT(bar.err, HasSubstr("240/240 requests"));
  EXPECT_THAT(bar.err, HasSubstr("hit rate"));
  EXPECT_EQ(bar.err.back(), '\n');
}

TEST(KvctlReplayTest, BadInputExitsTwoWithAMessage) {
  const cli_test::ScratchDir dir("kvctl_replay");
  const std::string bad = dir.Path("bad.jsonl");
  std::ofstream(bad) << "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, "
                        "\"hash_ids\": [1]}\n\n"
                        "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, "
                        "\"hash_ids\": [1, -2]}\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string missing = dir.Path("missing.jsonl");
  const std::vector<Case> cases = {
      {{"replay", missing}, "trace file " + missing + " does not exist"},
      {{"replay", bad}, bad + ":3: hash_ids must be an array of non-negative integers"},
      {{"replay", bad, "--capacity-blocks", "5", "--capacity-bytes", "1GiB"},
       "give at most one of --capacity-blocks and --capacity-bytes"},
      {{"replay", "--synthetic", "--capacity-blocks", "0"}, "the capacity must be at least 1"},
      {{"replay", "--synthetic", "--capacity-bytes", "1MiB"}, "holds no block"},
      {{"replay", "--synthetic", "--policy", "fifo"},
       "--policy: eviction policy 'fifo' is not one of lru, priority-lru, learned, optimal"},
      {{"replay", "--synthetic", "--one-off-share", "1.5"}, "one_off_share 1.5"},
      {{"replay"}, "give exactly one of TRACE.jsonl and --synthetic"},
      {{"replay", bad, "--synthetic"}, "give exactly one of TRACE.jsonl and --synthetic"},
      {{"replay", "--synthetic", "--tokens-per-block", "3"}, "tokens_per_block 3"},
      {{"replay", "--synthetic", "--sweep=0,5"}, "--sweep: capacity 0"},
      {{"replay", "--synthetic", "--sweep", "--capacity-blocks", "9"}, "--sweep gives the"},
      {{"replay", "--synthetic", "--model", "llama-3-8b"}, "only apply with --capacity-bytes"},
      {{"replay", "--synthetic", "--turn-blocks", "4-2"}, "--turn-blocks '4-2'"},
      {{"replay", "--synthetic", "--priority-tail", "101"},
       "--priority-tail 101 is outside 0..100"},
      {{"replay", "--synthetic", "--priority-prefix", "-1"}, "--priority-prefix -1 is outside"},
      {{"replay", "--synthetic", "--capacity-blocks", "-5"}, "(e.g. 3000, or 256k)"},
      {{"replay", "--synthetic", "--no-such-flag"}, "--no-such-flag"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunKvctl(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args.back() << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args.back();
    EXPECT_THAT(r.err, HasSubstr("kvctl: "));
    EXPECT_EQ(r.out, "") << c.args.back();
  }
}

TEST(KvctlReplayTest, NothingToReplayIsAnError) {
  // An empty trace used to "replay" with a hit rate of 0 and exit 0.
  const cli_test::ScratchDir dir("kvctl_replay");
  const std::string empty = dir.Path("empty.jsonl");
  std::ofstream(empty).close();
  const std::string blank = dir.Path("blank.jsonl");
  std::ofstream(blank) << "\n  \n\r\n";
  const std::string one = dir.Path("one.jsonl");
  std::ofstream(one) << "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, "
                        "\"hash_ids\": [1]}\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"replay", empty}, "kvctl: trace " + empty + " has no requests: nothing to replay\n"},
      {{"replay", blank, "--json"},
       "kvctl: trace " + blank + " has no requests: nothing to replay\n"},
      {{"replay", empty, "--sweep=1,2", "--no-plot", "--out-dir", dir.Path("out")},
       "kvctl: trace " + empty + " has no requests: nothing to replay\n"},
      {{"replay", one, "--limit", "0"}, "kvctl: --limit 0 leaves no request: nothing to replay\n"},
      {{"replay", "--synthetic", "--limit", "0"},
       "kvctl: --limit 0 leaves no request: nothing to replay\n"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunKvctl(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[1] << "\n" << r.err;
    EXPECT_EQ(r.err, c.message);
    EXPECT_EQ(r.out, "");
  }
  EXPECT_EQ(RunKvctl({"replay", one}).exit_code, 0);  // one request is something
}

TEST(KvctlReplayTest, AGigabyteWithoutNewlineIsRefusedAtTheLineBound) {
  // What used to hold 2.1 GB before failing: 1 GiB and no newline (a sparse file here, so nothing
  // is written to the disk). The reader stops after 1 MiB (pool/trace.h, kMaxTraceLineBytes).
  const cli_test::ScratchDir dir("kvctl_replay");
  const std::string path = dir.Path("trace.jsonl");
  std::ofstream(path).close();
  fs::resize_file(path, std::uintmax_t{1} << 30);
  const RunResult r = RunKvctl({"replay", path});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "kvctl: " + path + ":1: line longer than 1048576 bytes\n");
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace kvmesh
