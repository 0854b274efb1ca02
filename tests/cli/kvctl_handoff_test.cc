// kvctl handoff against two kvnode processes on loopback (UCX tcp/lo): prefill on one, `kvctl
// handoff` asks it to hand the prompt to the other, which is in the other layout order (HND ->
// NHD, converted on receipt); the decode node's engine then finds every block in its pool and
// checks every decode step against the dense reference. A second handoff moves nothing; a decode
// node that does not answer and a missing flag are errors that say so.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "tests/cli/kvctl_runner.h"
#include "tests/node/etcd_process.h"
#include "tests/node/node_process.h"
#include "tests/node/peer_test_util.h"

namespace kvmesh {
namespace {

using cli_test::RunKvctl;
using node_test::KvnodeProcess;

std::string WriteTokens(const std::filesystem::path& path, const std::vector<Token>& tokens) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  for (const Token t : tokens) std::fprintf(f, "%d\n", t);
  std::fclose(f);
  return path.string();
}

TEST(KvctlHandoffTest, PrefillHereDecodeThereThroughKvctl) {
  node_test::ScratchDir dir;
  auto prefill = node_test::StartPeerProcess(dir.path() / "p", "prefill-1", "HND");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto decode = node_test::StartPeerProcess(dir.path() / "d", "decode-1", "NHD");
  ASSERT_TRUE(decode.ok()) << decode.status();
  const auto requests = node_test::Prompt(7000, 9);
  ASSERT_EQ(node_test::RunOn((*prefill)->unix_socket(), requests).check_failures, 0);
  const std::string tokens =
      WriteTokens(dir.path() / "prompt.txt", TraceTokens(requests[0], node_test::kPeerBlockTokens));

  const std::vector<std::string> handoff{"handoff",
                                         "--node",
                                         (*prefill)->tcp_address(),
                                         "--secret",
                                         node_test::kTestSecret,
                                         "--to-node-id",
                                         "decode-1",
                                         "--to",
                                         (*decode)->tcp_address(),
                                         "--tokens",
                                         tokens};
  std::vector<std::string> args = handoff;
  args.emplace_back("--json");
  cli_test::RunResult r = RunKvctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "kvmesh.handoff/1");
  EXPECT_EQ(j["to_node_id"], "decode-1");
  EXPECT_EQ(j["wanted_blocks"], 8);  // 9 blocks of tokens; the last one holds the decoded token
  EXPECT_EQ(j["had_blocks"], 0);
  EXPECT_EQ(j["moved_blocks"], 8);
  EXPECT_EQ(j["held_blocks"], 8);

  // Again, as a table: the decode node has them all now.
  r = RunKvctl(handoff);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("8 full blocks wanted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("had 8 (not moved), moved 0 (verified), held 8"), std::string::npos)
      << r.out;

  const SyntheticWorkloadStats on_decode = node_test::RunOn((*decode)->unix_socket(), requests);
  EXPECT_EQ(on_decode.failed_requests, 0) << on_decode.first_error;
  EXPECT_EQ(on_decode.check_failures, 0) << on_decode.first_error;
  EXPECT_GT(on_decode.checks, 0);
  EXPECT_EQ(on_decode.pool_hit_blocks, 8);
  EXPECT_EQ(on_decode.remote_hit_blocks, 0);

  // A decode node nobody runs: a failure (exit 1) that kvctl reports.
  args = handoff;
  args[8] = StrCat("127.0.0.1:", node_test::FreeLoopbackPort());
  r = RunKvctl(args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  // It says that the prefill node could not reach the decode node (kvctl reached the prefill node).
  EXPECT_NE(r.err.find(StrCat("kvctl: node prefill-1 handing off to decode-1 at ", args[8], ": ")),
            std::string::npos)
      << r.err;
  // No --to-node-id: a usage error.
  r = RunKvctl({"handoff", "--node", (*prefill)->tcp_address(), "--to", (*decode)->tcp_address(),
                "--tokens", tokens});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--to-node-id"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvmesh
