// Rotating the control plane's secret on a running kvnode (docs/kvnode.md, "Rotating the secret"):
// secret_file and second_secret_file, re-read on SIGHUP. The three steps of a rotation, each
// checked with real clients over the node's socket: the new secret accepted beside the old one; the
// new one first and the old one second; the old one no longer. A session opened with the old secret
// stays open throughout, and a reload that fails (a secret too short) keeps the secrets in use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <thread>

#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

using ::testing::HasSubstr;

constexpr const char* kNewSecret = "the-next-secret-0123456789abcdef";

void WriteSecret(const std::filesystem::path& p, const std::string& secret) {
  std::ofstream(p) << secret << "\n";
  ::chmod(p.c_str(), 0600);
}

// How many times the node's log says `what`.
int Count(KvnodeProcess& node, const std::string& what) {
  const std::string log = node.process().Stdout() + node.process().Stderr();
  int n = 0;
  for (std::size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
  return n;
}

// SIGHUP, then waits until the log says `what` once more than before.
void Reload(KvnodeProcess& node, const std::string& what) {
  const int before = Count(node, what);
  node.process().Signal(SIGHUP);
  for (int i = 0; i < 200 && Count(node, what) == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(Count(node, what), before + 1) << node.process().Stderr();
}

TEST(KvnodeSecretRotationTest, SighupRotatesTheSecretWithoutARestart) {
  ScratchDir dir;
  const std::filesystem::path secret = dir.path() / "secret";
  const std::filesystem::path next = dir.path() / "secret.next";  // absent: no second secret
  WriteSecret(secret, kTestSecret);
  const std::string yaml = std::regex_replace(
      TestConfig(dir.path()), std::regex("  secret: [^\n]*\n"),
      "  secret_file: " + secret.string() + "\n  second_secret_file: " + next.string() + "\n");
  auto node = KvnodeProcess::Start(dir.path(), yaml);
  ASSERT_TRUE(node.ok()) << node.status();
  const auto connect = [&](const std::string& s) {
    NodeClientOptions o = (*node)->Client("rotation");
    o.secret = s;
    return NodeClient::Connect(o);
  };
  const auto denied = [&](const std::string& s) {
    return connect(s).status().code() == StatusCode::kPermissionDenied;
  };
  ASSERT_TRUE(connect(kTestSecret).ok());
  EXPECT_TRUE(denied(kNewSecret));
  auto held = connect(kTestSecret);  // opened with the old secret; used again at the end
  ASSERT_TRUE(held.ok()) << held.status();

  // 1. The new secret is accepted beside the old one (every node of a fleet gets this first).
  WriteSecret(next, kNewSecret);
  Reload(**node, "secrets reloaded");
  EXPECT_TRUE(connect(kTestSecret).ok());
  EXPECT_TRUE(connect(kNewSecret).ok());
  // 2. The new one is the node's (the one it presents to peers); the old one still accepted, while
  //    engines and kvctl move to the new one.
  WriteSecret(secret, kNewSecret);
  WriteSecret(next, kTestSecret);
  Reload(**node, "secrets reloaded");
  EXPECT_TRUE(connect(kTestSecret).ok());
  EXPECT_TRUE(connect(kNewSecret).ok());
  // 3. The old one no longer.
  std::filesystem::remove(next);
  Reload(**node, "secrets reloaded");
  EXPECT_TRUE(denied(kTestSecret));
  EXPECT_TRUE(connect(kNewSecret).ok());
  EXPECT_THAT((*node)->process().Stderr() + (*node)->process().Stdout(),
              HasSubstr("no second secret"));

  // A reload that fails keeps the secrets in use, and says why.
  WriteSecret(secret, "short");
  Reload(**node, "secrets not reloaded");
  EXPECT_TRUE(connect(kNewSecret).ok());
  EXPECT_TRUE(denied("short"));

  // The session opened with the old secret was never closed.
  const std::vector<Token> prompt = {1, 2, 3};
  EXPECT_TRUE((*held)->Lookup(prompt).ok());
  held->reset();
  const auto st = (*node)->Terminate();
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->exited && st->code == 0);
}

}  // namespace
}  // namespace kvmesh::node_test
