// kvctl inspect against a real kvnode: every component of a block and its tier copies, for a
// cache with per-token-head scales (fp8), NVFP4 block scales and an MLA latent pool (DeepSeek-V3,
// written through the engine API, AttachedPools and the append kernel); tier copies that agree
// (host after an evict and a restore, disk after a flush); and a disk copy corrupted on purpose
// while the node was stopped, which inspect must call corrupt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "tests/cli/kvctl_runner.h"
#include "tests/cli/live_node.h"
#include "tests/store/rocksdb_test_util.h"

namespace kvmesh::cli_test {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using node_test::KvnodeProcess;
using node_test::TestConfig;

constexpr std::int32_t kT = 16;

// TestConfig with another dtype or model preset.
std::string Config(const std::filesystem::path& dir, const std::string& dtype,
                   const std::string& preset = "qwen2.5-0.5b", std::int64_t max_tokens = 4096) {
  std::string y = TestConfig(dir, max_tokens, "8MiB", "64MiB");
  y = std::regex_replace(y, std::regex("dtype: bf16"), "dtype: " + dtype);
  return std::regex_replace(y, std::regex("preset: qwen2.5-0.5b"), "preset: " + preset);
}

class KvctlInspectTest : public ::testing::Test {
 protected:
  void Start(const std::string& yaml) {
    node_.reset();
    auto n = KvnodeProcess::Start(dir_.path(), yaml);
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = std::move(n).value();
  }
  Json RunJson(std::vector<std::string> args) {
    args.push_back("--json");
    const RunResult r = RunKvctl(Kvctl(*node_, std::move(args)));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? Json::parse(r.out) : Json::object();
  }
  // Writes `prompt` through an attached engine; returns the content id of its first block.
  std::string WriteAndFirstBlock(const std::vector<Token>& prompt) {
    auto e = LiveEngine::Attach(*node_);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return "";
    EXPECT_TRUE((*e)->Run(1, prompt).ok());
    const Json tree = RunJson({"tree", "--dump", "--depth", "1"});
    return tree["dump"].empty() ? "" : tree["dump"][0]["content_id"].get<std::string>();
  }
  static const Json& Component(const Json& pool, const std::string& name) {
    for (const Json& c : pool["components"]) {
      if (c["shape"]["name"] == name) return c;
    }
    static const Json none;
    ADD_FAILURE() << "no component " << name;
    return none;
  }
  static const Json& Tier(const Json& pool, const std::string& name) {
    for (const Json& t : pool["tiers"]) {
      if (t["tier"] == name) return t;
    }
    static const Json none;
    ADD_FAILURE() << "no tier " << name;
    return none;
  }

  node_test::ScratchDir dir_;
  std::unique_ptr<KvnodeProcess> node_;
};

TEST_F(KvctlInspectTest, Fp8BlockWithScalesAndTierCopiesThatAgree) {
  Start(Config(dir_.path(), "fp8"));
  const std::vector<Token> prompt = TestPrompt(3, 3 * kT + 1);
  const std::string id = WriteAndFirstBlock(prompt);
  ASSERT_EQ(id.size(), 32u);
  const Json j = RunJson({"inspect", id.substr(0, 8)});
  EXPECT_EQ(j["schema"], "kvmesh.inspect/1");
  EXPECT_EQ(j["content_id"], id);
  EXPECT_EQ(j["tokens"], kT);
  ASSERT_EQ(j["pools"].size(), 1u);
  const Json& p = j["pools"][0];
  EXPECT_EQ(p["dtype"], "fp8");
  EXPECT_EQ(p["pins"], 0);
  const Json& data = Component(p, "data");
  EXPECT_EQ(data["shape"]["bits"], 8);
  EXPECT_EQ(data["shape"]["inner"], 64);
  EXPECT_EQ(data["checksum"].get<std::string>().size(), 32u);
  EXPECT_TRUE(data["has_range"]);
  EXPECT_LE(data["max"].get<double>(), 448.0);
  EXPECT_GE(data["min"].get<double>(), -448.0);
  // One FP32 scale per (token, head): [24 layers, 2, 2 heads, 16 tokens, 1].
  const Json& scale = Component(p, "scale");
  EXPECT_EQ(scale["shape"]["bits"], 32);
  EXPECT_EQ(scale["shape"]["inner"], 1);
  EXPECT_EQ(scale["shape"]["bytes_per_block"], 24 * 2 * 2 * kT * 4);
  EXPECT_GT(scale["min"].get<double>(), 0.0);  // amax/448 of non-zero heads
  EXPECT_GT(scale["max"].get<double>(), scale["min"].get<double>());
  EXPECT_EQ(scale["zeros"], 0);
  EXPECT_FALSE(Tier(p, "host")["present"]);
  EXPECT_FALSE(Tier(p, "disk")["present"]);
  // A host copy (evicted: no tier holds the blocks, so they are offloaded to the host tier), a
  // disk copy (flush writes the host tier's blocks too), then the pool block again (an admission
  // restores it from the host tier).
  const Json evicted = RunJson({"evict", id});
  ASSERT_EQ(evicted["evicted"], 3);
  EXPECT_EQ(evicted["offloaded"], 3);
  ASSERT_EQ(RunKvctl(Kvctl(*node_, {"flush"})).exit_code, 0);
  auto e = LiveEngine::Attach(*node_, "again");
  ASSERT_TRUE(e.ok());
  Result<std::int64_t> reused = (*e)->Run(2, prompt);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, 3 * kT);
  const Json after = RunJson({"inspect", id});  // j (and data, scale into it) stays the first
  const Json& again = after["pools"][0];
  EXPECT_EQ(Component(again, "data")["checksum"], data["checksum"]);  // restored byte for byte
  EXPECT_EQ(Component(again, "scale")["checksum"], scale["checksum"]);
  for (const char* tier : {"host", "disk"}) {
    const Json& t = Tier(again, tier);
    EXPECT_TRUE(t["present"]) << tier;
    EXPECT_TRUE(t["decodes"]) << tier;
    EXPECT_TRUE(t["matches"]) << tier;
    EXPECT_EQ(t["first_difference"], -1) << tier;
  }
  EXPECT_TRUE(after["all_copies_agree"]);
  const RunResult table = RunKvctl(Kvctl(*node_, {"inspect", id}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("host  copy  agrees (verified, byte for byte)"));
  EXPECT_THAT(table.out, HasSubstr("every tier copy agrees with the pool block"));
  EXPECT_THAT(table.out, HasSubstr("scale"));
  // Not a hex prefix.
  EXPECT_EQ(RunKvctl(Kvctl(*node_, {"inspect", "g"})).exit_code, 2);
}

TEST_F(KvctlInspectTest, Nvfp4BlockScalesAndTheGlobalScale) {
  Start(Config(dir_.path(), "nvfp4"));
  const std::string id = WriteAndFirstBlock(TestPrompt(5, 2 * kT + 1));
  ASSERT_EQ(id.size(), 32u);
  const Json j = RunJson({"inspect", id});
  const Json& p = j["pools"][0];
  EXPECT_EQ(p["dtype"], "nvfp4");
  EXPECT_EQ(p["pool_scale"], 1.0);
  const Json& data = Component(p, "data");
  EXPECT_EQ(data["shape"]["bits"], 4);
  EXPECT_EQ(data["shape"]["bytes_per_block"], 24 * 2 * 2 * kT * 64 / 2);  // two codes a byte
  EXPECT_LE(data["max"].get<double>(), 6.0);                              // E2M1 codes
  EXPECT_GE(data["min"].get<double>(), -6.0);
  // One UE4M3 scale per 16 elements: inner = head_dim / 16.
  const Json& scale = Component(p, "scale");
  EXPECT_EQ(scale["shape"]["bits"], 8);
  EXPECT_EQ(scale["shape"]["inner"], 64 / 16);
  EXPECT_GT(scale["min"].get<double>(), 0.0);
  EXPECT_LE(scale["max"].get<double>(), 448.0);
  const RunResult table = RunKvctl(Kvctl(*node_, {"inspect", id}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("nvfp4"));
  EXPECT_THAT(table.out, HasSubstr("pool scale 1"));
}

TEST_F(KvctlInspectTest, MlaLatentPool) {
  // DeepSeek-V3: one latent of 512 + 64 per token and layer (kv_factor 1, one head); a tiny cache.
  Start(Config(dir_.path(), "bf16", "deepseek-v3", 256));
  const std::string id = WriteAndFirstBlock(TestPrompt(9, 2 * kT + 1));
  ASSERT_EQ(id.size(), 32u);
  ASSERT_EQ(RunKvctl(Kvctl(*node_, {"flush"})).exit_code, 0);
  const Json j = RunJson({"inspect", id});
  const Json& p = j["pools"][0];
  const Json& data = Component(p, "data");
  EXPECT_EQ(data["shape"]["num_layers"], 61);
  EXPECT_EQ(data["shape"]["kv_factor"], 1);
  EXPECT_EQ(data["shape"]["num_heads"], 1);
  EXPECT_EQ(data["shape"]["inner"], 576);
  EXPECT_EQ(data["shape"]["bytes_per_block"], 61 * kT * 576 * 2);
  EXPECT_TRUE(data["has_range"]);
  EXPECT_GT(data["max"].get<double>(), 0.0);
  EXPECT_EQ(p["components"].size(), 1u);  // bf16: no scales
  EXPECT_TRUE(Tier(p, "disk")["matches"]);
  const RunResult table = RunKvctl(Kvctl(*node_, {"inspect", id}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("[61,1,1,16,576] HND"));
}

// Flips one payload byte of the disk tier's copy of `id` (the node is stopped), through the raw
// RocksDB API (RawDb finds the bundle through its meta record).
void CorruptDiskCopy(const std::filesystem::path& db_path, const std::string& id_hex) {
  auto id = ContentId::FromHex(id_hex);
  ASSERT_TRUE(id.ok());
  store_test::RawDb raw(db_path.string());
  bool done = false;
  for (const auto& [name, handle] : raw.by_name) {
    if (name.rfind("pool.", 0) != 0 || name.ends_with(".meta") || !raw.Has(name, *id)) continue;
    std::string value = raw.Get(name, *id);
    ASSERT_GT(value.size(), 4096u);
    value[value.size() / 2] ^= 0x40;  // inside the payload
    raw.Put(name, *id, value);
    done = true;
  }
  EXPECT_TRUE(done) << "no disk copy of " << id_hex;
}

TEST_F(KvctlInspectTest, ACorruptedDiskCopyIsReportedCorrupt) {
  // One block whose only token run holds the prompt's last token: never restored, always written.
  const std::vector<Token> prompt = TestPrompt(11, kT);
  Start(Config(dir_.path(), "int8"));
  const std::string id = WriteAndFirstBlock(prompt);
  ASSERT_EQ(id.size(), 32u);
  ASSERT_EQ(RunKvctl(Kvctl(*node_, {"flush"})).exit_code, 0);
  EXPECT_TRUE(Tier(RunJson({"inspect", id})["pools"][0], "disk")["matches"]);
  const auto st = node_->Terminate();
  ASSERT_TRUE(st && st->exited && st->code == 0);
  node_.reset();
  CorruptDiskCopy(dir_.path() / "data" / "rocksdb", id);
  Start(Config(dir_.path(), "int8"));
  // The same tokens written again: the same content id in the pool, the disk's copy corrupt.
  ASSERT_EQ(WriteAndFirstBlock(prompt), id);
  const RunResult table = RunKvctl(Kvctl(*node_, {"inspect", id}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("disk  copy  CORRUPT"));
  EXPECT_THAT(table.out, HasSubstr("the copy is corrupt; the tier dropped it"));
  EXPECT_THAT(table.out, HasSubstr("a tier copy is corrupt or differs from the pool block"));
  // The tier dropped it: now there is none, and the tier counted it.
  const Json j = RunJson({"inspect", id});
  EXPECT_FALSE(Tier(j["pools"][0], "disk")["present"]);
  EXPECT_TRUE(j["all_copies_agree"]);
  EXPECT_EQ(RunJson({"pools"})["tiers"][1]["corrupt"], 1);
}

}  // namespace
}  // namespace kvmesh::cli_test
