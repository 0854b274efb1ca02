// kvctl route against two kvnode processes with a static member list (no etcd needed): the
// table, --explain and --json of a prompt stored on one node, asked of the other.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "common/strings.h"
#include "tests/cli/kvctl_runner.h"
#include "tests/node/etcd_process.h"
#include "tests/node/node_process.h"

namespace kvmesh {
namespace {

using namespace std::chrono_literals;
using cli_test::RunKvctl;
using node_test::KvnodeProcess;

std::string Config(const std::filesystem::path& dir, const std::string& id, int port,
                   const std::string& peers) {
  std::string y = node_test::TestConfig(dir, 4096, "", "",
                                        StrCat("cluster:\n  membership: static\n  peers:\n", peers,
                                               "  directory:\n    batch_ms: 20\n"));
  auto replace = [&y](const std::string& from, const std::string& to) {
    y.replace(y.find(from), from.size(), to);
  };
  replace("node_id: test-node", "node_id: " + id);
  replace("tcp_listen: 127.0.0.1:0", StrCat("tcp_listen: 127.0.0.1:", port));
  return y;
}

TEST(KvctlRouteTest, TableExplainAndJsonFromTheOtherNode) {
  node_test::ScratchDir dir;
  const int pa = node_test::FreeLoopbackPort();
  const int pb = node_test::FreeLoopbackPort();
  const std::string peers = StrCat("    - {node_id: a, address: \"127.0.0.1:", pa,
                                   "\"}\n    - {node_id: b, address: "
                                   "\"127.0.0.1:",
                                   pb, "\"}\n");
  std::filesystem::create_directories(dir.path() / "a");
  std::filesystem::create_directories(dir.path() / "b");
  auto a = KvnodeProcess::Start(dir.path() / "a", Config(dir.path() / "a", "a", pa, peers));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = KvnodeProcess::Start(dir.path() / "b", Config(dir.path() / "b", "b", pb, peers));
  ASSERT_TRUE(b.ok()) << b.status();
  // The prompt text's bytes are its tokens (kvctl route PROMPT): 100 bytes = 6 full blocks of 16.
  const std::string text(100, 'x');
  std::vector<Token> tokens(text.begin(), text.end());
  auto engine = (*a)->Connect();
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->Admit(1, tokens).ok());
  ASSERT_TRUE((*engine)->StoreFullBlocks(1).ok());
  const std::vector<std::string> node{"--node", (*b)->tcp_address(), "--secret",
                                      node_test::kTestSecret};
  cli_test::RunResult r;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    std::vector<std::string> args{"route", "--json", text};
    args.insert(args.end(), node.begin(), node.end());
    r = RunKvctl(args);
    // The directory learns a's blocks from its KV events, in batches: until every batch is in, a
    // may be recommended for fewer tokens than it holds.
    if (r.exit_code == 0 && r.out.find("\"recommended\": \"a\"") != std::string::npos &&
        r.out.find("\"prefix_tokens\": 96") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "kvmesh.route/1");
  EXPECT_EQ(j["recommended"], "a");
  EXPECT_EQ(j["members"], 2);
  ASSERT_EQ(j["nodes"].size(), 1u);
  EXPECT_EQ(j["nodes"][0]["node_id"], "a");
  EXPECT_EQ(j["nodes"][0]["prefix_tokens"], 96);
  EXPECT_EQ(j["nodes"][0]["pool_tokens"], 96);

  std::vector<std::string> args{"route", "--explain", text};
  args.insert(args.end(), node.begin(), node.end());
  r = RunKvctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prompt 100 tokens, 6 full blocks of 16; 2 members in view"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("6 of 6 full blocks from the start; longest prefix"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("route to: a"), std::string::npos) << r.out;
  // A prompt that ends on a block boundary: its last block is not counted, and it says why.
  args = {"route", std::string(96, 'x')};
  args.insert(args.end(), node.begin(), node.end());
  r = RunKvctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prompt 96 tokens, 5 full blocks of 16 (not the last: it ends on the last "
                       "token, always recomputed); 2 members in view"),
            std::string::npos)
      << r.out;

  // kvctl status of B shows the cluster: static membership, both members, B's directory shard.
  args = {"status"};
  args.insert(args.end(), node.begin(), node.end());
  r = RunKvctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cluster     static, 2 members: the member list of the config; peer data "
                       "path off\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("members     1 joined, 0 left, 0 rejoined"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("directory   "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(StrCat("\nb (this)         127.0.0.1:", pb)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(StrCat("\na                127.0.0.1:", pa)), std::string::npos) << r.out;
  args.push_back("--json");
  r = RunKvctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json sj = nlohmann::json::parse(r.out)["status"]["cluster"];
  EXPECT_EQ(sj["membership"], "static");
  EXPECT_EQ(sj["membership_ok"], true);
  ASSERT_EQ(sj["members"].size(), 2u);
  EXPECT_EQ(sj["members"][1]["node_id"], "b");
  EXPECT_EQ(sj["members"][1]["self"], true);
  // a's 6 blocks are homed at a or b: the two shards hold all of them.
  std::int64_t shard_ids = sj["directory_shard_ids"].is_string()
                               ? std::stoll(sj["directory_shard_ids"].get<std::string>())
                               : sj["directory_shard_ids"].get<std::int64_t>();
  EXPECT_LE(shard_ids, 6);

  // A prompt nobody holds; and a bad --tokens file.
  args = {"route", "something else entirely, long enough for a block"};
  args.insert(args.end(), node.begin(), node.end());
  r = RunKvctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("route to: any node"), std::string::npos) << r.out;
  const std::string bad = (dir.path() / "bad.txt").string();
  std::FILE* f = std::fopen(bad.c_str(), "w");
  std::fputs("1 2 three", f);
  std::fclose(f);
  args = {"route", "--tokens", bad};
  args.insert(args.end(), node.begin(), node.end());
  r = RunKvctl(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'three' is not a token id"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvmesh
