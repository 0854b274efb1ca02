// Runs the real kvctl binary: `kvctl layout` output (JSON numbers, text picture) and the exit codes
// and messages of bad command lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/kvctl_runner.h"

namespace kvmesh {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using cli_test::RunKvctl;
using cli_test::RunResult;

std::string TestData(const std::string& name) {
  return std::string(KVMESH_POOL_TESTDATA) + "/" + name;
}

Json RunJson(std::vector<std::string> args) {
  args.push_back("--json");
  const RunResult r = RunKvctl(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

TEST(KvctlLayoutTest, JsonLlama3_8b) {
  const Json j = RunJson(
      {"layout", "--model", "llama-3-8b", "--tokens-per-block", "64", "--gpu-memory", "80GiB"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["schema"], "kvmesh.layout/1");
  EXPECT_EQ(j["model"]["name"], "meta-llama/Meta-Llama-3-8B");
  EXPECT_EQ(j["cache"]["dtype"], "bf16");
  EXPECT_EQ(j["cache"]["kv_layout"], "HND");
  EXPECT_EQ(j["memory"]["free_bytes"], 80LL << 30);
  EXPECT_EQ(j["budget"]["budget_bytes"], 72LL << 30);
  EXPECT_EQ(j["bytes_per_token"], 131072);
  ASSERT_EQ(j["pools"].size(), 1u);
  const Json& p = j["pools"][0];
  EXPECT_EQ(p["key_string"], "full/8x128");
  EXPECT_EQ(p["layers"].size(), 32u);
  EXPECT_EQ(p["bytes_per_block"], 8 << 20);
  EXPECT_EQ(p["num_blocks"], 9216);
  EXPECT_EQ(p["tokens"], 9216 * 64);
  EXPECT_TRUE(p["pool_scale"].is_null());
  ASSERT_EQ(p["components"].size(), 1u);
  const Json& data = p["components"][0];
  EXPECT_EQ(data["name"], "data");
  EXPECT_EQ(data["shape"], Json::parse("[9216, 32, 2, 8, 64, 128]"));
  EXPECT_EQ(data["dims"], Json::parse(R"(["block","layer","kv","head","token","dim"])"));
  EXPECT_EQ(data["strides"]["HND"]["token"], 128);
  EXPECT_EQ(data["strides"]["HND"]["head"], 64 * 128);
  EXPECT_EQ(data["strides"]["NHD"]["token"], 8 * 128);
  EXPECT_EQ(data["strides"]["NHD"]["head"], 128);
  EXPECT_EQ(data["strides"]["HND"]["block"], 32 * 2 * 8 * 64 * 128);
  EXPECT_EQ(data["bytes_per_block"], 8 << 20);
}

TEST(KvctlLayoutTest, JsonMaxTokensLimitsTheBudget) {
  const Json j = RunJson({"layout", "--model", "llama-3-8b", "--tokens-per-block", "64",
                          "--gpu-memory", "80GiB", "--max-tokens", "100000"});
  EXPECT_EQ(j["budget"]["limited_by"], "max_tokens");
  EXPECT_EQ(j["budget"]["budget_bytes"], 13107200000LL);
  EXPECT_EQ(j["pools"][0]["num_blocks"], 1562);
}

TEST(KvctlLayoutTest, JsonGemma3Nvfp4Nhd) {
  const Json j = RunJson({"layout", "--model", "gemma-3-27b", "--dtype", "nvfp4", "--layout", "NHD",
                          "--gpu-memory", "80GiB", "--nvfp4-expected-amax", "24"});
  ASSERT_EQ(j["pools"].size(), 2u);
  const Json& sliding = j["pools"][0];
  EXPECT_EQ(sliding["key"]["window"], 1024);
  EXPECT_EQ(sliding["layers"].size(), 52u);
  EXPECT_EQ(j["pools"][1]["layers"].size(), 10u);
  EXPECT_EQ(sliding["pool_scale"]["value"], 112.0);
  EXPECT_EQ(sliding["pool_scale"]["source"], "expected_amax");
  const Json& data = sliding["components"][0];
  EXPECT_EQ(data["bits"], 4);
  EXPECT_EQ(data["elements_per_byte"], 2);
  EXPECT_EQ(data["order"], "NHD");
  EXPECT_EQ(data["dims"][3], "token");
  // 52 layers × 2 × 16 heads × 32 tokens × 128 / 2 bytes; scales 128/16 = 8 bytes per head.
  EXPECT_EQ(data["bytes_per_block"], 52 * 2 * 16 * 32 * 64);
  EXPECT_EQ(sliding["components"][1]["name"], "scale");
  EXPECT_EQ(sliding["components"][1]["inner"], 8);
  EXPECT_EQ(sliding["components"][1]["bytes_per_block"], 52 * 2 * 16 * 32 * 8);
}

TEST(KvctlLayoutTest, JsonDeepSeekV32HasIndexerComponents) {
  const Json j = RunJson({"layout", "--model", "deepseek-v3.2", "--gpu-memory", "80GiB"});
  const Json& p = j["pools"][0];
  EXPECT_EQ(p["kv_factor"], 1);
  ASSERT_EQ(p["components"].size(), 3u);  // data, index_k, index_scale (bf16: no scale)
  EXPECT_EQ(p["components"][0]["inner"], 576);
  EXPECT_EQ(p["components"][1]["name"], "index_k");
  EXPECT_EQ(p["components"][1]["bytes_per_block"], 61 * 32 * 128);
  EXPECT_EQ(p["components"][2]["bytes_per_block"], 61 * 32 * 4);
  EXPECT_EQ(j["bytes_per_token"], 78324);
}

TEST(KvctlLayoutTest, HfConfig) {
  const Json j =
      RunJson({"layout", "--hf-config", TestData("gpt_oss_120b.json"), "--gpu-memory", "8GiB"});
  EXPECT_EQ(j["model"]["family"], "gpt_oss");
  EXPECT_EQ(j["model"]["hf_config"], TestData("gpt_oss_120b.json"));
  ASSERT_EQ(j["pools"].size(), 2u);
  EXPECT_EQ(j["pools"][0]["key_string"], "sliding-128/8x64");
}

TEST(KvctlLayoutTest, DetectsMemoryWithoutFlag) {
  const Json j = RunJson({"layout", "--model", "llama-3-8b"});
  EXPECT_THAT(std::string(j["memory"]["kind"]), ::testing::AnyOf("gpu", "host"));
  EXPECT_GT(j["memory"]["free_bytes"].get<std::int64_t>(), 0);
}

TEST(KvctlLayoutTest, TextHasTableAndPicture) {
  const RunResult r = RunKvctl(
      {"layout", "--model", "llama-3-8b", "--tokens-per-block", "64", "--gpu-memory", "80GiB"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("BYTES/TOKEN"));
  EXPECT_THAT(r.out, HasSubstr("[9216,32,2,8,64,128]"));
  EXPECT_THAT(r.out, HasSubstr("[4194304,131072,65536,8192,128,1]"));
  EXPECT_THAT(r.out, HasSubstr("8.00 MiB"));
  EXPECT_THAT(
      r.out,
      HasSubstr("offset = b*4194304 + layer*131072 + kv*65536 + head*8192 + token*128 + dim"));
  EXPECT_THAT(r.out, HasSubstr("NHD instead: token*1024 + head*128"));
  EXPECT_THAT(r.out, HasSubstr("|K h0 t0-63|K h1 t0-63|..|K h7 t0-63|V h0 t0-63|"));

  const RunResult n = RunKvctl({"layout", "--model", "gemma-3-27b", "--dtype", "nvfp4", "--layout",
                                "NHD", "--gpu-memory", "80GiB"});
  EXPECT_EQ(n.exit_code, 0) << n.err;
  EXPECT_THAT(n.out, HasSubstr("SHAPE [b,l,kv,t,h,d]"));
  EXPECT_THAT(n.out, HasSubstr("gs 1 (default: neither nvfp4_global_scale nor"));
  EXPECT_THAT(n.out, HasSubstr("|K t0 h0-15|K t1 h0-15|"));
}

TEST(KvctlLayoutTest, ListsPresetsAndHelp) {
  const RunResult list = RunKvctl({"layout", "--model", "list"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_THAT(list.out, HasSubstr("deepseek-ai/DeepSeek-V3.2-Exp"));
  const RunResult help = RunKvctl({"layout", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--tokens-per-block"));
}

TEST(KvctlLayoutTest, BadCommandLines) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    const char* message;
  };
  const Case cases[] = {
      {{"layout", "--model", "llama-3-8b", "--dtype", "fp7"}, 2, "unknown cache dtype 'fp7'"},
      {{"layout", "--model", "llama-3-8b", "--tokens-per-block", "3"},
       2,
       "tokens_per_block 3 is not a power of two greater than 1"},
      {{"layout", "--model", "llama-3-8b", "--tokens-per-block", "many"}, 2, "--tokens-per-block"},
      {{"layout"}, 2, "give exactly one of --model NAME"},
      {{"layout", "--model", "llama-3-8b", "--hf-config", TestData("llama3_8b.json")},
       2,
       "--model excludes --hf-config"},
      {{"layout", "--hf-config", TestData("no_such.json")}, 2, "no_such.json' does not exist"},
      {{"layout", "--model", "llama-3-8b", "--gpu-memory", "12XB"}, 2, "--gpu-memory: bad"},
      {{"layout", "--model", "llama-3-8b", "--gpu-memory", "0"},
       2,
       "free primary memory 0 bytes must be positive"},
      {{"layout", "--model", "llama-9"}, 2, "unknown model preset 'llama-9': known presets are"},
      {{"layout", "--model", "llama-3-8b", "--layout", "HDN"}, 2, "unknown kv layout 'HDN'"},
      {{"layout", "--model", "llama-3-8b", "--free-gpu-memory-fraction", "0"},
       2,
       "free_gpu_memory_fraction 0 must be in (0, 1]"},
      {{"layout", "--model", "gemma-3-27b", "--pool-shares", "0.5,0.6"}, 2, "sum to 1.1, not 1"},
      {{"layout", "--model", "llama-3-8b", "--nvfp4-global-scale", "2", "--nvfp4-expected-amax",
        "3"},
       2,
       "are both given"},
      {{"layout", "--hf-config", TestData("bad_kv_heads.json")},
       2,
       "num_key_value_heads 7 does not divide num_attention_heads 32"},
      {{"layout", "--hf-config", TestData("bad_model_type.json")},
       2,
       "unsupported model_type 'mamba'"},
      {{"layout", "--hf-config", TestData("bad_not_json.json")}, 2, "not valid JSON"},
      {{"layout", "--model", "llama-3-8b", "--gpu-memory", "1MiB"}, 1, "gets no block"},
      {{"layout", "--model", "llama-3-8b", "--frobnicate"}, 2, "--frobnicate"},
      {{"frobnicate"}, 2, "commands: layout"},
      // A scale for another dtype is refused, not ignored.
      {{"layout", "--model", "llama-3-8b", "--dtype", "bf16", "--nvfp4-global-scale", "2"},
       2,
       "--nvfp4-global-scale applies to --dtype nvfp4 only, not bf16"},
      {{"layout", "--model", "llama-3-8b", "--dtype", "fp8", "--fp8-per-tensor-scale", "2"},
       2,
       "--fp8-per-tensor-scale applies to --dtype fp8_per_tensor only, not fp8"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunKvctl(c.args);
    const std::string cmd = ::testing::PrintToString(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << cmd << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("kvctl: ")) << cmd;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << cmd;
    EXPECT_EQ(r.out, "") << cmd;
  }
}

}  // namespace
}  // namespace kvmesh
