// Loading ModelSpecs from hand-written Hugging Face config.json files of every supported family
// (tests/pool/testdata), and the errors of bad ones.
#include "pool/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "pool/model_presets.h"

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

std::string TestData(const std::string& name) {
  return std::string(KVMESH_POOL_TESTDATA) + "/" + name;
}

ModelSpec Load(const std::string& name) {
  auto m = LoadModelSpecFromHfConfig(TestData(name));
  EXPECT_TRUE(m.ok()) << name << ": " << m.status();
  return m.ok() ? *m : ModelSpec{};
}

Status LoadError(const std::string& name) {
  auto m = LoadModelSpecFromHfConfig(TestData(name));
  EXPECT_FALSE(m.ok()) << name;
  return m.ok() ? Status::Ok() : m.status();
}

std::vector<int> Windows(const ModelSpec& m) {
  std::vector<int> w;
  for (const auto& l : m.layers) w.push_back(l.window);
  return w;
}

TEST(HfConfigTest, LlamaMatchesPreset) {
  const ModelSpec m = Load("llama3_8b.json");
  EXPECT_EQ(m.family, "llama");
  EXPECT_EQ(m.layers, ModelPreset("llama-3-8b")->layers);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_EQ(m.name, "llama3_8b");  // no _name_or_path: the file's stem
  EXPECT_EQ(m.revision, "");
}

TEST(HfConfigTest, MistralSlidingWindowOrNull) {
  const ModelSpec v1 = Load("mistral_7b_v01.json");
  EXPECT_EQ(v1.family, "mistral");
  EXPECT_EQ(v1.num_layers(), 32);
  EXPECT_EQ(Windows(v1), std::vector<int>(32, 4096));
  EXPECT_EQ(v1.layers[0].num_kv_heads, 8);
  EXPECT_EQ(v1.layers[0].head_dim, 128);  // 4096 / 32, head_dim absent
  const ModelSpec v3 = Load("mistral_7b_v03.json");
  EXPECT_EQ(Windows(v3), std::vector<int>(32, 0));
  EXPECT_EQ(v3.layers, ModelPreset("mistral-7b")->layers);
}

TEST(HfConfigTest, QwenSlidingOnlyWhenEnabledFromMaxWindowLayers) {
  const ModelSpec q2 = Load("qwen2_7b.json");
  EXPECT_EQ(q2.num_layers(), 28);
  EXPECT_EQ(Windows(q2), std::vector<int>(28, 0));  // use_sliding_window false
  EXPECT_EQ(q2.layers[0], (LayerSpec{0, 4, 128}));  // 3584 / 28
  const ModelSpec s = Load("qwen2_sliding.json");
  for (int i = 0; i < 28; ++i) EXPECT_EQ(s.layers[i].window, i >= 21 ? 32768 : 0) << i;
  const ModelSpec q3 = Load("qwen3_8b.json");
  EXPECT_EQ(q3.family, "qwen3");
  EXPECT_EQ(q3.layers, ModelPreset("qwen3-8b")->layers);
}

TEST(HfConfigTest, Gemma2EvenLayersSlide) {
  const ModelSpec m = Load("gemma2_9b.json");
  EXPECT_EQ(m.layers, ModelPreset("gemma-2-9b")->layers);
  EXPECT_EQ(m.layers[0].window, 4096);
  EXPECT_EQ(m.layers[1].window, 0);
  EXPECT_EQ(m.layers[0].head_dim, 256);
}

TEST(HfConfigTest, Gemma3NestedTextConfigMatchesPreset) {
  const ModelSpec m = Load("gemma3_27b_it.json");
  EXPECT_EQ(m.family, "gemma3");
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_EQ(m.layers, ModelPreset("gemma-3-27b")->layers);
}

TEST(HfConfigTest, Gemma3DefaultsWhenTextConfigOmitsThem) {
  // gemma-3-4b-it leaves num_attention_heads (8), num_key_value_heads (4), head_dim (256) and the
  // pattern (6) at transformers' defaults.
  const ModelSpec m = Load("gemma3_4b_it.json");
  EXPECT_EQ(m.num_layers(), 34);
  EXPECT_EQ(m.num_attention_heads, 8);
  for (int i = 0; i < 34; ++i) {
    EXPECT_EQ(m.layers[i], (LayerSpec{(i + 1) % 6 == 0 ? 0 : 1024, 4, 256})) << i;
  }
  const ModelSpec t = Load("gemma3_1b_it.json");
  EXPECT_EQ(t.family, "gemma3_text");
  EXPECT_EQ(t.num_layers(), 26);
  EXPECT_EQ(t.layers[5], (LayerSpec{0, 1, 256}));
  EXPECT_EQ(t.layers[6], (LayerSpec{512, 1, 256}));
}

TEST(HfConfigTest, GptOssLayerTypes) {
  const ModelSpec m = Load("gpt_oss_120b.json");
  EXPECT_EQ(m.family, "gpt_oss");
  EXPECT_EQ(m.layers, ModelPreset("gpt-oss-120b")->layers);
}

TEST(HfConfigTest, DeepSeekMla) {
  const ModelSpec v3 = Load("deepseek_v3.json");
  EXPECT_EQ(v3.kv_factor(), 1);
  EXPECT_EQ(v3.layers, ModelPreset("deepseek-v3")->layers);
  EXPECT_EQ(*v3.mla, *ModelPreset("deepseek-v3")->mla);
  EXPECT_FALSE(v3.indexer.has_value());
  const ModelSpec lite = Load("deepseek_v2_lite.json");
  EXPECT_EQ(lite.family, "deepseek_v2");
  EXPECT_EQ(lite.num_layers(), 27);
  EXPECT_EQ(lite.num_attention_heads, 16);
  EXPECT_EQ(lite.layers[0], (LayerSpec{0, 1, 576}));
}

TEST(HfConfigTest, DeepSeekV32Indexer) {
  const ModelSpec m = Load("deepseek_v32.json");
  const ModelSpec preset = *ModelPreset("deepseek-v3.2");
  EXPECT_EQ(m.family, "deepseek_v32");
  EXPECT_EQ(m.layers, preset.layers);
  ASSERT_TRUE(m.indexer.has_value());
  EXPECT_EQ(*m.indexer, *preset.indexer);
}

TEST(HfConfigTest, BadConfigsNameTheField) {
  EXPECT_THAT(LoadError("bad_kv_heads.json").message(),
              HasSubstr("num_key_value_heads 7 does not divide num_attention_heads 32"));
  EXPECT_THAT(LoadError("bad_layer_types_count.json").message(),
              HasSubstr("layer_types has 30 entries but num_hidden_layers is 36"));
  const Status type = LoadError("bad_model_type.json");
  EXPECT_TRUE(type.IsNotSupported());
  EXPECT_THAT(type.message(), HasSubstr("unsupported model_type 'mamba'"));
  EXPECT_THAT(type.message(), HasSubstr("llama, mistral"));
  EXPECT_THAT(LoadError("bad_missing_layers.json").message(),
              HasSubstr("field 'num_hidden_layers' is missing"));
  EXPECT_THAT(LoadError("bad_wrong_type.json").message(),
              HasSubstr("field 'num_hidden_layers' must be an integer, got a string \"32\""));
  EXPECT_THAT(LoadError("bad_mla_no_kv_lora_rank.json").message(),
              HasSubstr("field 'kv_lora_rank' is missing (deepseek_v3 uses MLA)"));
  const Status json = LoadError("bad_not_json.json");
  EXPECT_TRUE(json.IsInvalidArgument());
  EXPECT_THAT(json.message(), HasSubstr("bad_not_json.json: not valid JSON"));
  EXPECT_THAT(json.message(), HasSubstr("parse error at line 5, column"));
  // Every error names the file.
  EXPECT_THAT(LoadError("bad_kv_heads.json").message(), HasSubstr("bad_kv_heads.json: "));
}

TEST(HfConfigTest, InlineVariants) {
  auto parse = [](const std::string& text) { return ParseHfConfig(text, "inline"); };
  // Defaults: num_key_value_heads = num_attention_heads, head_dim = hidden_size / heads.
  auto mha = parse(R"({"model_type":"llama","num_hidden_layers":2,"num_attention_heads":16,
                       "hidden_size":2048})");
  ASSERT_TRUE(mha.ok()) << mha.status();
  EXPECT_EQ(mha->layers[0], (LayerSpec{0, 16, 128}));
  EXPECT_EQ(mha->name, "llama");
  // architectures when model_type is absent; _name_or_path names the model.
  auto arch = parse(R"({"architectures":["Qwen3ForCausalLM"],"_name_or_path":"Qwen/Qwen3-0.6B",
                        "num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,
                        "head_dim":128,"hidden_size":1024})");
  ASSERT_TRUE(arch.ok()) << arch.status();
  EXPECT_EQ(arch->family, "qwen3");
  EXPECT_EQ(arch->name, "Qwen/Qwen3-0.6B");
  // An explicit layer_types list wins over the family rule.
  auto types = parse(R"({"model_type":"llama","num_hidden_layers":3,"num_attention_heads":4,
      "hidden_size":256,"sliding_window":64,
      "layer_types":["full_attention","sliding_attention","full_attention"]})");
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ(Windows(*types), (std::vector<int>{0, 64, 0}));

  struct Bad {
    const char* text;
    const char* message;
  };
  const Bad bad[] = {
      {R"([1, 2])", "inline: the top level is an array, not an object"},
      {R"({"num_hidden_layers": 2})", "field 'model_type' is missing"},
      {R"({"model_type":"llama","num_hidden_layers":2,"num_attention_heads":30,"hidden_size":4096})",
       "hidden_size 4096 is not divisible by num_attention_heads 30"},
      {R"({"model_type":"llama","num_hidden_layers":2,"num_attention_heads":32})",
       "field 'hidden_size' is missing"},
      {R"({"model_type":"llama","num_hidden_layers":0,"num_attention_heads":32,"hidden_size":4096})",
       "field 'num_hidden_layers' is 0, out of range"},
      {R"({"model_type":"llama","num_hidden_layers":2,"num_attention_heads":32,"head_dim":128.5})",
       "field 'head_dim' must be an integer, got a number 128.5"},
      {R"({"model_type":"gpt_oss","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,
           "layer_types":["sliding_attention","chunked_attention"],"sliding_window":128})",
       "layer_types[1] is \"chunked_attention\""},
      {R"({"model_type":"gpt_oss","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64})",
       "field 'sliding_window' is missing, but the config has sliding-window layers"},
      {R"({"model_type":"qwen2","num_hidden_layers":4,"num_attention_heads":8,"hidden_size":512,
           "use_sliding_window":true,"sliding_window":64,"max_window_layers":5})",
       "max_window_layers 5 exceeds num_hidden_layers 4"},
      {R"({"model_type":"qwen2","num_hidden_layers":4,"num_attention_heads":8,"hidden_size":512,
           "use_sliding_window":"yes"})",
       "field 'use_sliding_window' must be true or false"},
      {R"({"model_type":"gemma3_text","num_hidden_layers":4,"sliding_window_pattern":0})",
       "field 'sliding_window_pattern' is 0, out of range (minimum 1)"},
      {R"({"model_type":"deepseek_v32","num_hidden_layers":2,"num_attention_heads":8,
           "kv_lora_rank":512,"qk_rope_head_dim":64,"qk_nope_head_dim":128,"v_head_dim":128})",
       "field 'index_head_dim' is missing (deepseek_v32 has a sparse-attention indexer)"},
      {R"({"model_type":"llama","num_hidden_layers":2,"num_attention_heads":32,
           "num_key_value_heads":-8,"hidden_size":4096})",
       "field 'num_key_value_heads' is -8, out of range"},
  };
  for (const Bad& b : bad) {
    auto m = parse(b.text);
    ASSERT_FALSE(m.ok()) << b.text;
    EXPECT_TRUE(m.status().IsInvalidArgument()) << m.status();
    EXPECT_THAT(m.status().message(), HasSubstr(b.message)) << b.text;
  }
}

// A layer count with stray digits (the fuzzer's 28152064) is refused at once: planning its pools
// took over two minutes and 0.8 GB before the bound.
TEST(HfConfigTest, AbsurdLayerCountsAreRefused) {
  auto r = ParseHfConfig(R"({"model_type":"qwen2","num_hidden_layers":28152064,
      "num_attention_heads":28,"hidden_size":3584})",
                         "inline");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("num_hidden_layers 28152064 is more than 1024"));
  auto edge = ParseHfConfig(R"({"model_type":"llama","num_hidden_layers":1024,
      "num_attention_heads":8,"hidden_size":512})",
                            "inline");
  EXPECT_TRUE(edge.ok()) << edge.status();
}

TEST(HfConfigTest, NumberBeyondADoubleIsAnErrorNotAnException) {
  // nlohmann-json throws out_of_range (not parse_error) for these; found by fuzz/hf_config
  // (fuzz/regressions/hf_config/number_overflow.json), where it ended the process.
  for (const char* text : {"1e1001", R"({"model_type":"llama","num_hidden_layers":1e400})"}) {
    auto m = ParseHfConfig(text, "inline");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_TRUE(m.status().IsInvalidArgument()) << m.status();
    EXPECT_THAT(m.status().message(), HasSubstr("inline: not valid JSON: number overflow"))
        << m.status();
  }
}

TEST(HfConfigTest, FilesAndDirectories) {
  const Status missing = LoadModelSpecFromHfConfig(TestData("no_such_config.json")).status();
  EXPECT_TRUE(missing.IsNotFound());
  EXPECT_THAT(missing.message(), HasSubstr("no_such_config.json' does not exist"));

  // A Hugging Face cache snapshot directory: name and revision come from the path.
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / "kvmesh_hf_config_test";
  const fs::path snapshot = root / "models--meta-llama--Meta-Llama-3-8B" / "snapshots" / "8cde5ca8";
  fs::create_directories(snapshot);
  fs::copy_file(TestData("llama3_8b.json"), snapshot / "config.json",
                fs::copy_options::overwrite_existing);
  auto m = LoadModelSpecFromHfConfig(snapshot.string());  // a directory holding config.json
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "meta-llama/Meta-Llama-3-8B");
  EXPECT_EQ(m->revision, "8cde5ca8");
  // Any other config.json: the directory's name.
  const fs::path plain = root / "my-llama";
  fs::create_directories(plain);
  fs::copy_file(TestData("llama3_8b.json"), plain / "config.json",
                fs::copy_options::overwrite_existing);
  m = LoadModelSpecFromHfConfig((plain / "config.json").string());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "my-llama");
  EXPECT_EQ(m->revision, "");
  fs::remove_all(root);

  EXPECT_THAT(SupportedHfModelTypes(), HasSubstr("deepseek_v32"));
}

}  // namespace
}  // namespace kvmesh
