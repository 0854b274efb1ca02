// The synthetic engine's shared report (node/synthetic_stats_json.h): the hits by tier, a
// clustered node's remote hits included, add up to the hit rate in the JSON and in the text line.
// kvmesh-synth's kvmesh.synthetic/1 and `kvctl replay --live` once left the remote hits out of
// both while counting them in hit_rate.
#include "node/synthetic_stats_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

SyntheticWorkloadStats Stats() {
  SyntheticWorkloadStats s;
  s.requests = 5;
  s.failed_requests = 1;
  s.admit_waits = 2;
  s.admit_wait_seconds = 0.5;
  s.prompt_tokens = 640;
  s.reused_tokens = 320;
  s.computed_tokens = 320;
  s.input_blocks = 20;
  s.pool_hit_blocks = 3;
  s.host_hit_blocks = 2;
  s.disk_hit_blocks = 1;
  s.remote_hit_blocks = 4;
  s.decode_tokens = 7;
  s.checks = 9;
  s.check_failures = 1;
  s.worst_error = 0.25;
  s.first_error = "request 3: refused";
  return s;
}

TEST(SyntheticStatsJsonTest, HitsByTierAddUpToTheHitRate) {
  const nlohmann::json j = WorkloadStatsJson(Stats());
  const nlohmann::json& hits = j.at("hits");
  EXPECT_EQ(hits.at("pool"), 3);
  EXPECT_EQ(hits.at("host"), 2);
  EXPECT_EQ(hits.at("disk"), 1);
  EXPECT_EQ(hits.at("remote"), 4);
  std::int64_t sum = 0;
  for (const auto& [tier, n] : hits.items()) sum += n.get<std::int64_t>();
  EXPECT_DOUBLE_EQ(j.at("hit_rate").get<double>(),
                   static_cast<double>(sum) / j.at("input_blocks").get<double>());
  EXPECT_DOUBLE_EQ(j.at("hit_rate").get<double>(), 0.5);
}

TEST(SyntheticStatsJsonTest, CarriesEveryCount) {
  const nlohmann::json j = WorkloadStatsJson(Stats());
  EXPECT_EQ(j.at("requests"), 5);
  EXPECT_EQ(j.at("failed_requests"), 1);
  EXPECT_EQ(j.at("admit_waits"), 2);
  EXPECT_DOUBLE_EQ(j.at("admit_wait_seconds").get<double>(), 0.5);
  EXPECT_EQ(j.at("prompt_tokens"), 640);
  EXPECT_EQ(j.at("reused_tokens"), 320);
  EXPECT_EQ(j.at("computed_tokens"), 320);
  EXPECT_EQ(j.at("decode_tokens"), 7);
  EXPECT_EQ(j.at("checks"), 9);
  EXPECT_EQ(j.at("check_failures"), 1);
  EXPECT_DOUBLE_EQ(j.at("worst_error").get<double>(), 0.25);
  EXPECT_EQ(j.at("first_error"), "request 3: refused");
}

TEST(SyntheticStatsJsonTest, TextLineNamesEveryTier) {
  EXPECT_EQ(HitRateText(Stats()), "0.5000 of 20 block positions: pool 3, host 2, disk 1, remote 4");
  EXPECT_THAT(HitRateText(SyntheticWorkloadStats{}), HasSubstr("0.0000 of 0 block positions"));
}

}  // namespace
}  // namespace kvmesh
