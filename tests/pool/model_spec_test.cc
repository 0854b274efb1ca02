// ModelSpec::Validate and the built-in presets, whose numbers are the public configs' numbers.
#include "pool/model_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "pool/model_presets.h"

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

int CountWindow(const ModelSpec& m, int window) {
  return static_cast<int>(std::count_if(m.layers.begin(), m.layers.end(),
                                        [&](const LayerSpec& l) { return l.window == window; }));
}

TEST(ModelSpecTest, UniformSpecIsValid) {
  const ModelSpec m = UniformModelSpec("m", "llama", 4, 8, 2, 64);
  EXPECT_TRUE(m.Validate().ok());
  EXPECT_EQ(m.num_layers(), 4);
  EXPECT_EQ(m.kv_factor(), 2);
  EXPECT_EQ(m.layers[3], (LayerSpec{0, 2, 64}));
}

TEST(ModelSpecTest, RejectsInconsistentFieldsNamingThem) {
  struct Case {
    ModelSpec spec;
    const char* message;
  };
  ModelSpec no_name = UniformModelSpec("", "llama", 2, 8, 2, 64);
  ModelSpec no_layers = UniformModelSpec("m", "llama", 0, 8, 2, 64);
  ModelSpec no_heads = UniformModelSpec("m", "llama", 2, 0, 2, 64);
  ModelSpec gqa = UniformModelSpec("m", "llama", 2, 32, 7, 64);
  ModelSpec zero_dim = UniformModelSpec("m", "llama", 2, 8, 2, 64);
  zero_dim.layers[1].head_dim = 0;
  ModelSpec neg_window = UniformModelSpec("m", "llama", 2, 8, 2, 64);
  neg_window.layers[0].window = -1;
  const Case cases[] = {
      {no_name, "model name is empty"},
      {no_layers, "num_hidden_layers 0"},
      {no_heads, "num_attention_heads 0 must be positive"},
      {gqa, "layers[0].num_kv_heads 7 does not divide num_attention_heads 32"},
      {zero_dim, "layers[1].head_dim 0 must be positive"},
      {neg_window, "layers[0].window -1"},
  };
  for (const Case& c : cases) {
    const Status s = c.spec.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(ModelSpecTest, MlaLayersMustHoldOneLatent) {
  ModelSpec m = *ModelPreset("deepseek-v3");
  EXPECT_TRUE(m.Validate().ok());
  m.layers[5].head_dim = 512;
  EXPECT_THAT(
      m.Validate().message(),
      HasSubstr("layers[5].head_dim 512 must be kv_lora_rank + qk_rope_head_dim = 512 + 64"));
  m = *ModelPreset("deepseek-v3");
  m.layers[0].num_kv_heads = 128;
  EXPECT_THAT(m.Validate().message(), HasSubstr("layers[0].num_kv_heads 128 must be 1 for MLA"));
  m = *ModelPreset("deepseek-v3");
  m.mla->kv_lora_rank = 0;
  EXPECT_THAT(m.Validate().message(), HasSubstr("kv_lora_rank 0"));
}

TEST(ModelSpecTest, IndexerChecks) {
  ModelSpec m = *ModelPreset("deepseek-v3.2");
  EXPECT_TRUE(m.Validate().ok());
  m.indexer->layer_mask.pop_back();
  EXPECT_THAT(m.Validate().message(), HasSubstr("layer_mask has 60 entries but the model has 61"));
  m = *ModelPreset("deepseek-v3.2");
  m.indexer->layer_mask.assign(61, false);
  EXPECT_THAT(m.Validate().message(), HasSubstr("selects no layer"));
  m = *ModelPreset("deepseek-v3.2");
  m.indexer->index_head_dim = 100;
  EXPECT_THAT(m.Validate().message(),
              HasSubstr("index_head_dim 100 is not a multiple of the indexer quant block 128"));
  m = *ModelPreset("deepseek-v3.2");
  m.indexer->index_n_heads = 0;
  EXPECT_THAT(m.Validate().message(), HasSubstr("index_n_heads 0"));
}

TEST(ModelPresetsTest, EveryPresetIsValidAndNamed) {
  EXPECT_GE(ModelPresets().size(), 6u);
  for (const ModelPresetInfo& p : ModelPresets()) {
    auto m = ModelPreset(p.name);
    ASSERT_TRUE(m.ok()) << p.name;
    EXPECT_TRUE(m->Validate().ok()) << p.name << ": " << m->Validate();
    EXPECT_EQ(m->name, p.hf_id);
    EXPECT_THAT(ListPresets(), HasSubstr(std::string(p.name)));
  }
}

TEST(ModelPresetsTest, LlamaNumbers) {
  const ModelSpec m8 = *ModelPreset("llama-3-8b");
  EXPECT_EQ(m8.num_layers(), 32);
  EXPECT_EQ(m8.num_attention_heads, 32);
  EXPECT_EQ(CountWindow(m8, 0), 32);
  EXPECT_EQ(m8.layers[0], (LayerSpec{0, 8, 128}));
  const ModelSpec m70 = *ModelPreset("LLAMA-3-70B");  // case-insensitive
  EXPECT_EQ(m70.num_layers(), 80);
  EXPECT_EQ(m70.num_attention_heads, 64);
  EXPECT_EQ(m70.layers[79], (LayerSpec{0, 8, 128}));
}

TEST(ModelPresetsTest, SmallModelsNumbers) {
  // Qwen2.5-0.5B: 24 layers, 14 heads of 896/14 = 64, 2 KV heads: 12 KiB of bf16 KV per token.
  const ModelSpec q = *ModelPreset("qwen2.5-0.5b");
  EXPECT_EQ(q.num_layers(), 24);
  EXPECT_EQ(q.num_attention_heads, 14);
  EXPECT_EQ(CountWindow(q, 0), 24);
  EXPECT_EQ(q.layers[23], (LayerSpec{0, 2, 64}));
  // Llama-3.2-1B: 16 layers, 32 heads of 2048/32 = 64, 8 KV heads.
  const ModelSpec l = *ModelPreset("llama-3.2-1b");
  EXPECT_EQ(l.num_layers(), 16);
  EXPECT_EQ(l.num_attention_heads, 32);
  EXPECT_EQ(l.layers[0], (LayerSpec{0, 8, 64}));
}

TEST(ModelPresetsTest, GemmaThreeEverySixthLayerGlobal) {
  const ModelSpec m = *ModelPreset("gemma-3-27b");
  EXPECT_EQ(m.num_layers(), 62);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_EQ(CountWindow(m, 0), 10);
  EXPECT_EQ(CountWindow(m, 1024), 52);
  for (int i = 0; i < 62; ++i) {
    EXPECT_EQ(m.layers[i].window, (i + 1) % 6 == 0 ? 0 : 1024) << "layer " << i;
    EXPECT_EQ(m.layers[i].num_kv_heads, 16);
    EXPECT_EQ(m.layers[i].head_dim, 128);
  }
}

TEST(ModelPresetsTest, GptOssAlternatesStartingSliding) {
  const ModelSpec m = *ModelPreset("gpt-oss-120b");
  EXPECT_EQ(m.num_layers(), 36);
  EXPECT_EQ(m.num_attention_heads, 64);
  for (int i = 0; i < 36; ++i) {
    EXPECT_EQ(m.layers[i], (LayerSpec{i % 2 == 0 ? 128 : 0, 8, 64})) << "layer " << i;
  }
  EXPECT_EQ(ModelPreset("gpt-oss-20b")->num_layers(), 24);
}

TEST(ModelPresetsTest, DeepSeekMlaAndIndexer) {
  const ModelSpec v3 = *ModelPreset("deepseek-v3");
  EXPECT_EQ(v3.num_layers(), 61);
  EXPECT_EQ(v3.num_attention_heads, 128);
  EXPECT_EQ(v3.kv_factor(), 1);
  ASSERT_TRUE(v3.mla.has_value());
  EXPECT_EQ(*v3.mla, (MlaSpec{512, 64, 128, 128}));
  EXPECT_EQ(v3.layers[60], (LayerSpec{0, 1, 576}));
  EXPECT_FALSE(v3.indexer.has_value());

  const ModelSpec v32 = *ModelPreset("deepseek-v3.2");
  ASSERT_TRUE(v32.indexer.has_value());
  EXPECT_EQ(v32.indexer->index_head_dim, 128);
  EXPECT_EQ(v32.indexer->index_n_heads, 64);
  EXPECT_EQ(v32.indexer->quant_block, 128);
  EXPECT_FALSE(v32.indexer->fp4);
  EXPECT_EQ(v32.indexer->NumIndexedLayers(), 61);
  EXPECT_EQ(v32.layers, v3.layers);
}

TEST(ModelPresetsTest, UnknownPresetListsKnownNames) {
  auto m = ModelPreset("llama-4-maverick");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(m.status().IsNotFound());
  EXPECT_THAT(m.status().message(), HasSubstr("unknown model preset 'llama-4-maverick'"));
  EXPECT_THAT(m.status().message(), HasSubstr("llama-3-8b, llama-3-70b"));
  EXPECT_THAT(m.status().message(), HasSubstr("deepseek-v3.2"));
}

}  // namespace
}  // namespace kvmesh
