// The Mooncake conversation trace replayed with tiers (the figures): a pool of 5,860
// blocks of 512 tokens alone, then with a host tier of 58,600 and a RocksDB tier of 586,000
// blocks (4 KiB each, real bytes). The RocksDB tier is larger than the trace's distinct blocks, so
// the tiers recover what an unlimited pool reuses (0.366) up to blocks in flight; every restored
// block is checked against its content id. Skips when the trace is absent (KVMESH_MOONCAKE_TRACE
// at run time, else the path configured into the build).
//
// Label `integration`: about 12 s in a release build (0.7 GiB of RocksDB writes), far longer
// under the sanitizers.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "store/tiered_replay.h"
#include "tests/common/mooncake_trace_path.h"

namespace kvmesh {
namespace {

TEST(MooncakeTieredReplayTest, TiersRecoverTheUnlimitedHitRate) {
  const std::string path = MooncakeTracePath();
  if (path.empty() || !std::filesystem::exists(path)) {
    GTEST_SKIP() << "Mooncake trace not found at '" << path << "'";
  }
  auto trace = ReadTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ReplayConfig config;
  config.policy = EvictionPolicyKind::kLru;
  auto unlimited = ReplayTrace(*trace, config);
  config.capacity_blocks = 5860;
  auto alone = ReplayTrace(*trace, config);
  ASSERT_TRUE(unlimited.ok() && alone.ok());
  TieredReplayOptions tiers;
  tiers.host_blocks = 58600;
  tiers.disk_blocks = 586000;
  auto r = ReplayTraceWithTiers(*trace, config, tiers);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf(
      "pool alone %.4f, with tiers %.4f (pool %lld, host %lld, disk %lld), unlimited %.4f\n",
      alone->hit_rate(), r->replay.hit_rate_with_tiers(),
      static_cast<long long>(r->replay.reused_blocks),
      static_cast<long long>(r->tiers.host_hit_blocks),
      static_cast<long long>(r->tiers.disk_hit_blocks), unlimited->hit_rate());
  EXPECT_NEAR(unlimited->hit_rate(), 0.366, 0.005);
  EXPECT_LT(alone->hit_rate(), 0.2);
  EXPECT_LE(r->replay.hit_rate_with_tiers(), unlimited->hit_rate());
  EXPECT_GE(r->replay.hit_rate_with_tiers(), 0.99 * unlimited->hit_rate());
  EXPECT_GT(r->tiers.disk_hit_blocks, 0);
  EXPECT_EQ(r->tiers.mismatched_blocks, 0);
  EXPECT_EQ(r->tiers.verified_blocks, r->replay.restored_blocks);
  EXPECT_EQ(r->tiers.offload.onboard_corrupt, 0);
}

}  // namespace
}  // namespace kvmesh
