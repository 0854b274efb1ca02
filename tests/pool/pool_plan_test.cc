// Pool plans of the presets against numbers worked out by hand (the arithmetic is in the comments
// and the expressions; the results are the brief's and the public configs').
#include "pool/pool_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pool/model_presets.h"

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::int64_t kGiB = std::int64_t{1} << 30;

PoolPlan Plan(const char* preset, KvDtype dtype, int tpb, std::int64_t free_bytes,
              KvLayout order = KvLayout::kHND) {
  CacheConfig c;
  c.dtype = dtype;
  c.kv_layout = order;
  c.tokens_per_block = tpb;
  auto plan = BuildPoolPlan(*ModelPreset(preset), c, free_bytes);
  EXPECT_TRUE(plan.ok()) << preset << ": " << plan.status();
  return plan.ok() ? *plan : PoolPlan{};
}

TEST(PoolPlanTest, Llama3_8bBf16Is8MiBPerBlock) {
  const PoolPlan plan = Plan("llama-3-8b", KvDtype::kBF16, 64, 80 * kGiB);
  ASSERT_EQ(plan.pools.size(), 1u);
  const PoolSpec& p = plan.pools[0];
  EXPECT_EQ(p.id, PoolId{0});
  EXPECT_EQ(p.key, (PoolKey{0, 8, 128}));
  EXPECT_EQ(PoolKeyString(p.key), "full/8x128");
  EXPECT_EQ(p.layers.size(), 32u);
  // 32 layers × 2 (K, V) × 8 heads × 64 tokens × 128 dims × 2 bytes = 8 MiB.
  EXPECT_EQ(p.bytes_per_block(), 32 * 2 * 8 * 64 * 128 * 2);
  EXPECT_EQ(p.bytes_per_block(), 8 * kMiB);
  EXPECT_EQ(p.ComponentBytesPerBlock(KvComponent::kScale), 0);
  EXPECT_EQ(p.bytes_per_token(), 128 * 1024);  // 8 MiB / 64
  EXPECT_EQ(plan.bytes_per_token, 128 * 1024);
  // 80 GiB × 0.9 = 72 GiB = 9216 blocks of 8 MiB.
  EXPECT_EQ(plan.budget_bytes, 72 * kGiB);
  EXPECT_EQ(p.num_blocks, 9216);
  EXPECT_EQ(p.tokens(), 9216 * 64);
  EXPECT_FALSE(plan.limited_by_max_tokens());
  EXPECT_EQ(p.pool_scale.source, PoolScaleSource::kNone);
}

TEST(PoolPlanTest, StridesInBothOrders) {
  const PoolPlan plan = Plan("llama-3-8b", KvDtype::kBF16, 64, 80 * kGiB);
  const PoolSpec& p = plan.pools[0];
  const PagedTensorLayout hnd = p.layout.data();
  EXPECT_EQ(hnd.order, KvLayout::kHND);
  EXPECT_EQ(hnd.TokenStride(), 128);
  EXPECT_EQ(hnd.HeadStride(), 64 * 128);
  EXPECT_EQ(hnd.KvStride(), 8 * 64 * 128);
  EXPECT_EQ(hnd.LayerStride(), 2 * 8 * 64 * 128);
  EXPECT_EQ(hnd.BlockStride(), 32 * 2 * 8 * 64 * 128);
  const PagedTensorLayout nhd = p.LayoutIn(KvLayout::kNHD).data();
  EXPECT_EQ(nhd.TokenStride(), 8 * 128);
  EXPECT_EQ(nhd.HeadStride(), 128);
  EXPECT_EQ(nhd.BlockStride(), hnd.BlockStride());
  // The configured order is what the plan carries.
  const PoolPlan nplan = Plan("llama-3-8b", KvDtype::kBF16, 64, 80 * kGiB, KvLayout::kNHD);
  // (Compared per component: WithOrder also re-orders absent components, MakeKvPoolLayout leaves
  // them default, so whole-layout equality would compare absent components' order fields.)
  EXPECT_EQ(nplan.pools[0].layout.data(), p.LayoutIn(KvLayout::kNHD).data());
  EXPECT_EQ(nplan.pools[0].geometry.layout, KvLayout::kNHD);
}

TEST(PoolPlanTest, BudgetRuleWithMaxTokens) {
  CacheConfig c;
  c.tokens_per_block = 64;
  c.max_tokens = 100000;
  auto plan = BuildPoolPlan(*ModelPreset("llama-3-8b"), c, 80 * kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // min(72 GiB, 100000 × 131072 B = 13107200000 B) = 13107200000 B → 1562.5 → 1562 blocks.
  EXPECT_EQ(plan->max_tokens_bytes, 100000LL * 131072);
  EXPECT_EQ(plan->budget_bytes, 13107200000LL);
  EXPECT_TRUE(plan->limited_by_max_tokens());
  EXPECT_EQ(plan->pools[0].num_blocks, 1562);
  EXPECT_EQ(plan->pools[0].tokens(), 99968);  // an upper bound: never more than max_tokens

  // A max_tokens above what memory allows changes nothing.
  c.max_tokens = 10'000'000;
  plan = BuildPoolPlan(*ModelPreset("llama-3-8b"), c, 80 * kGiB);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->limited_by_max_tokens());
  EXPECT_EQ(plan->pools[0].num_blocks, 9216);

  // The fraction applies to the free bytes: 0.5 × 10 GiB = 640 blocks of 8 MiB.
  c.max_tokens.reset();
  c.free_gpu_memory_fraction = 0.5;
  plan = BuildPoolPlan(*ModelPreset("llama-3-8b"), c, 10 * kGiB);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->pools[0].num_blocks, 640);
}

TEST(PoolPlanTest, DeepSeekV3IsOneLatentOf576) {
  const PoolPlan plan = Plan("deepseek-v3", KvDtype::kBF16, 64, 80 * kGiB);
  ASSERT_EQ(plan.pools.size(), 1u);
  const PoolSpec& p = plan.pools[0];
  EXPECT_EQ(p.geometry.kv_factor, 1);
  EXPECT_EQ(p.geometry.num_kv_heads, 1);
  EXPECT_EQ(p.geometry.head_dim, 576);  // 512 + 64 elements per token per layer
  EXPECT_EQ(p.layout.data().LayerStride(), 64 * 576);
  EXPECT_EQ(p.bytes_per_block(), 61 * 1 * 1 * 64 * 576 * 2);  // 4497408
  EXPECT_EQ(p.bytes_per_token(), 61 * 576 * 2);               // 70272
  EXPECT_FALSE(p.layout.index_k().present());
}

TEST(PoolPlanTest, DeepSeekV32IndexerPool) {
  const PoolPlan plan = Plan("deepseek-v3.2", KvDtype::kBF16, 64, 80 * kGiB);
  ASSERT_EQ(plan.pools.size(), 1u);
  const PoolSpec& p = plan.pools[0];
  EXPECT_EQ(p.geometry.index_layers, 61);
  // Indexer K: 61 layers × 64 tokens × 128 dims × 1 byte (FP8); scales: one FP32 per 128 dims.
  EXPECT_EQ(p.ComponentBytesPerBlock(KvComponent::kIndexK), 61 * 64 * 128);    // 499712
  EXPECT_EQ(p.ComponentBytesPerBlock(KvComponent::kIndexScale), 61 * 64 * 4);  // 15616
  EXPECT_EQ(p.bytes_per_block(), 61 * 64 * 576 * 2 + 61 * 64 * 128 + 61 * 64 * 4);
  EXPECT_EQ(plan.bytes_per_token, 61 * (576 * 2 + 128 + 4));  // 78324
  EXPECT_EQ(plan.Locate(60).index_slot, 60);

  // FP4 indexer: 64 bytes per 128 elements.
  ModelSpec m = *ModelPreset("deepseek-v3.2");
  m.indexer->fp4 = true;
  CacheConfig c;
  c.tokens_per_block = 64;
  auto fp4 = BuildPoolPlan(m, c, 80 * kGiB);
  ASSERT_TRUE(fp4.ok()) << fp4.status();
  EXPECT_EQ(fp4->pools[0].ComponentBytesPerBlock(KvComponent::kIndexK), 61 * 64 * 64);
}

TEST(PoolPlanTest, IndexerOnlyOnMaskedLayers) {
  ModelSpec m = *ModelPreset("deepseek-v3.2");
  for (int i = 0; i < 61; ++i) m.indexer->layer_mask[i] = i % 2 == 1;  // 30 layers
  CacheConfig c;
  c.tokens_per_block = 16;
  auto plan = BuildPoolPlan(m, c, 8 * kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PoolSpec& p = plan->pools[0];
  EXPECT_EQ(p.geometry.index_layers, 30);
  EXPECT_EQ(p.ComponentBytesPerBlock(KvComponent::kIndexK), 30 * 16 * 128);
  EXPECT_EQ(plan->Locate(0).index_slot, -1);
  EXPECT_EQ(plan->Locate(1).index_slot, 0);
  EXPECT_EQ(plan->Locate(59).index_slot, 29);
  EXPECT_EQ(plan->Locate(60).index_slot, -1);
}

TEST(PoolPlanTest, Gemma3GetsTwoPools) {
  const PoolPlan plan = Plan("gemma-3-27b", KvDtype::kBF16, 32, 10 * kGiB);
  ASSERT_EQ(plan.pools.size(), 2u);
  const PoolSpec& sliding = plan.pools[0];  // layer 0 slides, so its pool comes first
  const PoolSpec& global = plan.pools[1];
  EXPECT_EQ(sliding.key, (PoolKey{1024, 16, 128}));
  EXPECT_EQ(global.key, (PoolKey{0, 16, 128}));
  EXPECT_EQ(sliding.layers.size(), 52u);
  EXPECT_EQ(global.layers, (std::vector<std::int32_t>{5, 11, 17, 23, 29, 35, 41, 47, 53, 59}));
  EXPECT_EQ(sliding.bytes_per_block(), 52 * 2 * 16 * 32 * 128 * 2);  // 13631488
  EXPECT_EQ(global.bytes_per_block(), 10 * 2 * 16 * 32 * 128 * 2);   // 2621440
  EXPECT_EQ(plan.bytes_per_token, 62 * 2 * 16 * 128 * 2);            // 507904
  // Equal shares of 9 GiB: 4.5 GiB each → 354 sliding blocks, 1843 global blocks.
  EXPECT_DOUBLE_EQ(sliding.share, 0.5);
  EXPECT_EQ(sliding.budget_bytes, 9 * kGiB / 2);
  EXPECT_EQ(sliding.num_blocks, 9 * kGiB / 2 / 13631488);
  EXPECT_EQ(sliding.num_blocks, 354);
  EXPECT_EQ(global.num_blocks, 1843);
  // Layer locations.
  EXPECT_EQ(plan.Locate(5).pool, PoolId{1});
  EXPECT_EQ(plan.Locate(5).local_layer, 0);
  EXPECT_EQ(plan.Locate(6).pool, PoolId{0});
  EXPECT_EQ(plan.Locate(6).local_layer, 5);
  EXPECT_EQ(plan.Locate(61).local_layer, 51);
  EXPECT_LE(plan.TotalPoolBytes(), plan.budget_bytes);
}

TEST(PoolPlanTest, ConfiguredShares) {
  CacheConfig c;
  c.free_gpu_memory_fraction = 0.5;
  c.pool_shares = {0.75, 0.25};
  auto plan = BuildPoolPlan(*ModelPreset("gemma-3-27b"), c, 10 * kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 5 GiB: 3.75 GiB / 13631488 B = 295.4 → 295; 1.25 GiB / 2621440 B = 512.
  EXPECT_EQ(plan->pools[0].num_blocks, 295);
  EXPECT_EQ(plan->pools[1].num_blocks, 512);

  c.pool_shares = {1.0};
  auto wrong = BuildPoolPlan(*ModelPreset("gemma-3-27b"), c, 10 * kGiB);
  EXPECT_TRUE(wrong.status().IsInvalidArgument());
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("pool_shares has 1 entries but google/gemma-3-27b-it has 2 pools "
                        "(sliding-1024/16x128, full/16x128)"));
}

TEST(PoolPlanTest, GptOssTwoPoolsOf18Layers) {
  const PoolPlan plan = Plan("gpt-oss-120b", KvDtype::kBF16, 32, 80 * kGiB);
  ASSERT_EQ(plan.pools.size(), 2u);
  EXPECT_EQ(plan.pools[0].key, (PoolKey{128, 8, 64}));
  EXPECT_EQ(plan.pools[0].layers.size(), 18u);
  EXPECT_EQ(plan.pools[1].key, (PoolKey{0, 8, 64}));
  EXPECT_EQ(plan.pools[1].bytes_per_block(), 18 * 2 * 8 * 32 * 64 * 2);
}

TEST(PoolPlanTest, EveryDtypeOnLlama) {
  struct Case {
    KvDtype dtype;
    std::int64_t data;
    std::int64_t scale;
    PoolScaleSource pool_scale;
  };
  // tokens_per_block 64; elements per block: 32 × 2 × 8 × 64 × 128 = 4194304.
  const Case cases[] = {
      {KvDtype::kBF16, 8 * kMiB, 0, PoolScaleSource::kNone},
      {KvDtype::kFP16, 8 * kMiB, 0, PoolScaleSource::kNone},
      // One FP32 scale per (token, head): 32 × 2 × 8 × 64 × 4 B.
      {KvDtype::kFP8, 4 * kMiB, 32 * 2 * 8 * 64 * 4, PoolScaleSource::kNone},
      {KvDtype::kINT8, 4 * kMiB, 32 * 2 * 8 * 64 * 4, PoolScaleSource::kNone},
      {KvDtype::kFP8PerTensor, 4 * kMiB, 0, PoolScaleSource::kDefault},
      // NVFP4: a 128-element head is 64 bytes plus 8 one-byte block scales.
      {KvDtype::kNVFP4, 32 * 2 * 8 * 64 * 64, 32 * 2 * 8 * 64 * 8, PoolScaleSource::kDefault},
  };
  for (const Case& c : cases) {
    const PoolPlan plan = Plan("llama-3-8b", c.dtype, 64, 80 * kGiB);
    const PoolSpec& p = plan.pools[0];
    EXPECT_EQ(p.ComponentBytesPerBlock(KvComponent::kData), c.data) << KvDtypeName(c.dtype);
    EXPECT_EQ(p.ComponentBytesPerBlock(KvComponent::kScale), c.scale) << KvDtypeName(c.dtype);
    EXPECT_EQ(p.bytes_per_block(), c.data + c.scale);
    EXPECT_EQ(p.bytes_per_token() * 64, c.data + c.scale);
    EXPECT_EQ(p.num_blocks, 72 * kGiB / (c.data + c.scale));
    EXPECT_EQ(p.pool_scale.source, c.pool_scale) << KvDtypeName(c.dtype);
  }
}

TEST(PoolPlanTest, Nvfp4HeadIs64BytesPlus8Scales) {
  const PoolPlan plan = Plan("llama-3-8b", KvDtype::kNVFP4, 64, 80 * kGiB);
  const PoolSpec& p = plan.pools[0];
  EXPECT_EQ(p.layout.data().RowBytes(), 64);  // 128 elements, two per byte
  EXPECT_EQ(p.layout.scale().inner, 8);       // 128 / 16 UE4M3 scales
  EXPECT_EQ(p.layout.scale().RowBytes(), 8);
  EXPECT_EQ(p.pool_scale.value, 1.0f);
}

TEST(PoolPlanTest, PoolScaleFromConfig) {
  CacheConfig c;
  c.dtype = KvDtype::kNVFP4;
  c.nvfp4_expected_amax = 24.0f;
  auto plan = BuildPoolPlan(*ModelPreset("gemma-3-27b"), c, 10 * kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const PoolSpec& p : plan->pools) {
    EXPECT_EQ(p.pool_scale.value, 112.0f);  // 448 × 6 / 24
    EXPECT_EQ(p.pool_scale.source, PoolScaleSource::kFromExpectedAmax);
  }
}

TEST(PoolPlanTest, Errors) {
  const ModelSpec llama = *ModelPreset("llama-3-8b");
  CacheConfig c;
  c.tokens_per_block = 3;
  EXPECT_THAT(BuildPoolPlan(llama, c, kGiB).status().message(),
              HasSubstr("tokens_per_block 3 is not a power of two"));

  c = CacheConfig{};
  EXPECT_THAT(BuildPoolPlan(llama, c, 0).status().message(),
              HasSubstr("free primary memory 0 bytes must be positive"));

  ModelSpec bad = llama;
  bad.layers[2].num_kv_heads = 5;
  EXPECT_THAT(BuildPoolPlan(bad, c, kGiB).status().message(),
              HasSubstr("layers[2].num_kv_heads 5 does not divide"));

  // nvfp4 needs head_dim % 16 == 0; the error names the pool.
  const ModelSpec odd = UniformModelSpec("odd", "llama", 4, 8, 8, 72);
  c.dtype = KvDtype::kNVFP4;
  const Status s = BuildPoolPlan(odd, c, kGiB).status();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_THAT(s.message(), HasSubstr("pool 0 (full/8x72): head_dim 72 is not a multiple of 16"));

  // Too little memory for one block.
  c = CacheConfig{};
  c.tokens_per_block = 64;
  const Status small = BuildPoolPlan(llama, c, 8 * kMiB).status();
  EXPECT_TRUE(small.IsResourceExhausted());
  EXPECT_THAT(small.message(), HasSubstr("pool 0 (full/8x128) gets no block"));
  EXPECT_THAT(small.message(), HasSubstr("less than one block of 8388608 bytes"));
}

}  // namespace
}  // namespace kvmesh
