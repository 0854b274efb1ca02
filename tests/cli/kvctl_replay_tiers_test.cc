// Runs the real kvctl binary: `kvctl replay` with a host tier and a RocksDB tier behind the pool
// (synchronous copies, so the figures are exact): the JSON "tiers" object equals the library's
// ReplayTraceWithTiers, the text summary has the tier lines, a --disk-path is kept and a temporary
// directory is not, and bad tier flags exit 2 with a message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

TEST(KvctlReplayTiersTest, JsonMatchesTheLibrary) {
  const RunResult run = RunKvctl(
      With(kReplay, {"--host-tier-blocks", "100", "--disk-tier-blocks", "1000", "--json"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");  // no log lines, no progress bar
  const Json j = Json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << run.out;
  SyntheticTraceOptions g;
  g.seed = 3;
  g.conversations = 60;
  g.turns = 4;
  g.concurrency = 12;
  auto trace = GenerateSyntheticTrace(g);
  ASSERT_TRUE(trace.ok());
  ReplayConfig config;
  config.tokens_per_block = 64;
  config.capacity_blocks = 60;
  TieredReplayOptions tiers;
  tiers.block_bytes = 512;
  tiers.host_blocks = 100;
  tiers.disk_blocks = 1000;
  tiers.copy_threads = 0;
  auto expected = ReplayTraceWithTiers(*trace, config, tiers);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const Json& t = j["tiers"];
  ASSERT_TRUE(t.is_object());
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
      {{"--capacity-blocks", "10", "--host-tier-blocks", "0"}, "are both 0"},
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
