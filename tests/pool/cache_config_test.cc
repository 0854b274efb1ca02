// CacheConfig::Validate (every rejected value names its field) and the pool-wide scales.
#include "pool/cache_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

TEST(CacheConfigTest, DefaultsAreValidAndAsDocumented) {
  const CacheConfig c;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.dtype, KvDtype::kBF16);
  EXPECT_EQ(c.kv_layout, KvLayout::kHND);
  EXPECT_EQ(c.tokens_per_block, 32);
  EXPECT_DOUBLE_EQ(c.free_gpu_memory_fraction, 0.9);
  EXPECT_FALSE(c.max_tokens.has_value());
  EXPECT_TRUE(c.pool_shares.empty());
}

TEST(CacheConfigTest, AcceptsEveryPowerOfTwoBlockSize) {
  for (int tpb = 2; tpb <= 1024; tpb *= 2) {
    CacheConfig c;
    c.tokens_per_block = tpb;
    EXPECT_TRUE(c.Validate().ok()) << tpb;
  }
}

TEST(CacheConfigTest, RejectsBadValuesWithTheReason) {
  struct Case {
    std::function<void(CacheConfig&)> edit;
    const char* message;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {[](CacheConfig& c) { c.tokens_per_block = 3; },
       "tokens_per_block 3 is not a power of two greater than 1"},
      {[](CacheConfig& c) { c.tokens_per_block = 1; }, "tokens_per_block 1 is not a power of two"},
      {[](CacheConfig& c) { c.tokens_per_block = 0; }, "tokens_per_block 0"},
      {[](CacheConfig& c) { c.tokens_per_block = -64; }, "tokens_per_block -64"},
      {[](CacheConfig& c) { c.free_gpu_memory_fraction = 0; },
       "free_gpu_memory_fraction 0 must be in (0, 1]"},
      {[](CacheConfig& c) { c.free_gpu_memory_fraction = 1.5; }, "free_gpu_memory_fraction 1.5"},
      {[](CacheConfig& c) { c.free_gpu_memory_fraction = std::nan(""); },
       "free_gpu_memory_fraction nan"},
      {[](CacheConfig& c) { c.max_tokens = 0; }, "max_tokens 0 must be positive"},
      {[](CacheConfig& c) {
         c.pool_shares = {0.5, 0.4};
       },
       "pool_shares [0.5, 0.4] sum to 0.9, not 1"},
      {[](CacheConfig& c) {
         c.pool_shares = {1.5, -0.5};
       },
       "pool_shares[1] -0.5 must be a finite number greater than 0"},
      {[](CacheConfig& c) { c.host_budget_bytes = -1; },
       "host_budget_bytes -1 must not be negative"},
      {[](CacheConfig& c) { c.disk_budget_bytes = -2; },
       "disk_budget_bytes -2 must not be negative"},
      {[](CacheConfig& c) { c.nvfp4_global_scale = 0.0f; },
       "nvfp4_global_scale 0 must be a finite number greater than 0"},
      {[&](CacheConfig& c) { c.nvfp4_expected_amax = inf; }, "nvfp4_expected_amax inf"},
      {[](CacheConfig& c) { c.fp8_per_tensor_scale = -1.0f; }, "fp8_per_tensor_scale -1"},
      {[](CacheConfig& c) {
         c.nvfp4_global_scale = 1.0f;
         c.nvfp4_expected_amax = 10.0f;
       },
       "nvfp4_global_scale and nvfp4_expected_amax are both given"},
      {[](CacheConfig& c) { c.nvfp4_expected_amax = 1e-40f; }, "448*6/amax is not finite"},
  };
  for (const Case& c : cases) {
    CacheConfig config;
    c.edit(config);
    const Status s = config.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(CacheConfigTest, SharesWithinToleranceAreAccepted) {
  CacheConfig c;
  c.pool_shares = {1.0 / 3, 1.0 / 3, 1.0 / 3};
  EXPECT_TRUE(c.Validate().ok());
  c.pool_shares = {0.75, 0.25 + 5e-7};
  EXPECT_TRUE(c.Validate().ok());
  c.pool_shares = {0.75, 0.25 + 5e-6};
  EXPECT_FALSE(c.Validate().ok());
}

TEST(CacheConfigTest, PoolScales) {
  CacheConfig c;
  EXPECT_EQ(ResolvePoolScale(c).source, PoolScaleSource::kNone);
  EXPECT_EQ(ResolvePoolScale(c).Describe(c.dtype), "");

  c.dtype = KvDtype::kNVFP4;
  PoolScale s = ResolvePoolScale(c);
  EXPECT_EQ(s.value, 1.0f);
  EXPECT_EQ(s.source, PoolScaleSource::kDefault);
  EXPECT_THAT(s.Describe(c.dtype), HasSubstr("default: neither nvfp4_global_scale nor"));

  c.nvfp4_expected_amax = 12.0f;
  s = ResolvePoolScale(c);
  EXPECT_EQ(s.value, 224.0f);  // 448 * 6 / 12
  EXPECT_EQ(s.source, PoolScaleSource::kFromExpectedAmax);
  c.nvfp4_expected_amax = 7.0f;
  EXPECT_EQ(ResolvePoolScale(c).value, 2688.0f / 7.0f);  // correctly rounded FP32 division

  c.nvfp4_expected_amax.reset();
  c.nvfp4_global_scale = 3.5f;
  s = ResolvePoolScale(c);
  EXPECT_EQ(s.value, 3.5f);
  EXPECT_EQ(s.source, PoolScaleSource::kConfigured);

  c.dtype = KvDtype::kFP8PerTensor;
  EXPECT_EQ(ResolvePoolScale(c).source, PoolScaleSource::kDefault);
  c.fp8_per_tensor_scale = 0.25f;
  EXPECT_EQ(ResolvePoolScale(c).value, 0.25f);
  EXPECT_EQ(PoolScaleSourceName(ResolvePoolScale(c).source), "configured");
}

}  // namespace
}  // namespace kvmesh
