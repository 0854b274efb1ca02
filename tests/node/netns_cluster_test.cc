// Two kvnode processes as two hosts: each in a network namespace of its own, joined by a veth pair
// (10.231.0.1 and 10.231.0.2), static membership, the control plane and UCX over tcp on the veth
// device — no loopback between them. Skipped where `ip netns` is not permitted (it needs
// CAP_NET_ADMIN). The test reaches each node through its Unix socket, a path that any namespace
// can open.
//   - a prefix computed on A is found through the partitioned directory and fetched by B's Admit
//     across the veth pair, every layer checked against the dense reference on B;
//   - a handoff from A (HND) to B (NHD) across the veth pair, converted on receipt, every decode
//     step on B checked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "tests/node/node_process.h"
#include "tests/node/peer_test_util.h"

namespace kvmesh {
namespace {

using namespace std::chrono_literals;
using node_test::ClusterLookup;
using node_test::KvnodeProcess;
using node_test::PeerConfig;
using node_test::Prompt;
using node_test::RunOn;
using node_test::RunOutput;
using node_test::RunToCompletion;
using node_test::ScratchDir;

constexpr std::int32_t kBlockTokens = node_test::kPeerBlockTokens;
constexpr int kControlPort = 7420;

std::string IpTool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// Two network namespaces joined by a veth pair, removed (with the pair) by the destructor. The
// names carry the test process's pid, so that parallel runs do not meet.
class NamespacePair {
 public:
  explicit NamespacePair(const std::filesystem::path& logs) : logs_(logs), ip_(IpTool()) {
    const std::string tag = StrCat("kvm", ::getpid() % 100000);
    names_[0] = tag + "a";
    names_[1] = tag + "b";
    if (ip_.empty()) {
      error_ = "no ip tool (iproute2)";
      return;
    }
    if (std::string e = Ip({"netns", "add", names_[0]}); !e.empty()) {
      error_ = e;
      return;
    }
    created_[0] = true;
    const std::vector<std::vector<std::string>> steps = {
        {"netns", "add", names_[1]},
        {"link", "add", names_[0], "type", "veth", "peer", "name", names_[1]},
        {"link", "set", names_[0], "netns", names_[0]},
        {"link", "set", names_[1], "netns", names_[1]},
        {"-n", names_[0], "addr", "add", address(0) + "/24", "dev", names_[0]},
        {"-n", names_[1], "addr", "add", address(1) + "/24", "dev", names_[1]},
        {"-n", names_[0], "link", "set", names_[0], "up"},
        {"-n", names_[1], "link", "set", names_[1], "up"},
        {"-n", names_[0], "link", "set", "lo", "up"},
        {"-n", names_[1], "link", "set", "lo", "up"},
    };
    for (const auto& step : steps) {
      if (std::string e = Ip(step); !e.empty()) {
        error_ = e;
        return;
      }
      if (step[1] == "add" && step[0] == "netns") created_[1] = true;
    }
  }
  ~NamespacePair() {
    for (int i = 1; i >= 0; --i) {
      if (created_[i]) Ip({"netns", "del", names_[i]});  // with its end of the pair
    }
    // A pair made but not moved into the namespaces (a step failed) is still here.
    if (!error_.empty() && created_[1]) Ip({"link", "del", names_[0]});
  }
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  // Empty when both namespaces and the pair are up; otherwise what failed.
  [[nodiscard]] const std::string& error() const { return error_; }
  // Namespace i's name, which is also the name of its end of the veth pair.
  [[nodiscard]] const std::string& name(int i) const { return names_[i]; }
  [[nodiscard]] static std::string address(int i) { return StrCat("10.231.0.", i + 1); }
  [[nodiscard]] std::vector<std::string> launcher(int i) const {
    return {ip_, "netns", "exec", names_[i]};
  }

 private:
  // Runs `ip args...`; "" on success, else the command and its stderr.
  std::string Ip(const std::vector<std::string>& args) {
    const RunOutput r = RunToCompletion(ip_, args, logs_ / StrCat("ip.", runs_++), 30s);
    if (r.status.exited && r.status.code == 0) return "";
    std::string cmd = "ip";
    for (const std::string& a : args) cmd += " " + a;
    return StrCat(cmd, ": ", r.err.empty() ? r.out : r.err);
  }

  std::filesystem::path logs_;
  std::string ip_;
  std::string names_[2];
  bool created_[2] = {false, false};
  std::string error_;
  int runs_ = 0;
};

// PeerConfig (UCX over tcp, host and disk tiers) with the control plane on the namespace's veth
// address, UCX on its veth device, and both nodes as static members.
std::string NamespaceConfig(const std::filesystem::path& dir, const NamespacePair& ns, int i,
                            const std::string& layout) {
  std::string y = PeerConfig(dir, i == 0 ? "node-a" : "node-b", layout);
  const auto replace = [&y](const std::string& from, const std::string& to) {
    const std::size_t at = y.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) y.replace(at, from.size(), to);
  };
  replace("tcp_listen: 127.0.0.1:0", StrCat("tcp_listen: ", ns.address(i), ":", kControlPort));
  replace("ucx_net_devices: lo", "ucx_net_devices: " + ns.name(i));
  y += StrCat("cluster:\n  membership: static\n  peers:\n", "    - {node_id: node-a, address: \"",
              ns.address(0), ":", kControlPort, "\"}\n", "    - {node_id: node-b, address: \"",
              ns.address(1), ":", kControlPort, "\"}\n", "  directory:\n    batch_ms: 50\n");
  return y;
}

class NetnsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_.emplace(dir_.path());
    if (!ns_->error().empty()) GTEST_SKIP() << "ip netns is not permitted here: " << ns_->error();
  }
  void TearDown() override {
    nodes_[0].reset();  // the processes go before their namespaces
    nodes_[1].reset();
    ns_.reset();
  }
  void StartNodes(const std::string& layout_a, const std::string& layout_b) {
    const std::string layouts[2] = {layout_a, layout_b};
    for (int i = 0; i < 2; ++i) {
      const std::filesystem::path d = dir_.path() / (i == 0 ? "a" : "b");
      std::filesystem::create_directories(d);
      auto n =
          KvnodeProcess::Start(d, NamespaceConfig(d, *ns_, i, layouts[i]), 60s, ns_->launcher(i));
      ASSERT_TRUE(n.ok()) << n.status();
      nodes_[i] = std::move(n).value();
    }
  }
  ScratchDir dir_;
  std::optional<NamespacePair> ns_;
  std::unique_ptr<KvnodeProcess> nodes_[2];
};

TEST_F(NetnsClusterTest, PrefixComputedOnAIsFetchedByBAcrossTheVethPair) {
  StartNodes("HND", "HND");
  const auto requests = Prompt(1000, 8);
  const SyntheticWorkloadStats on_a = RunOn(nodes_[0]->unix_socket(), requests);
  ASSERT_EQ(on_a.check_failures, 0) << on_a.first_error;
  // A's KV events reach the prefix's home node (either of the two) within a few batches.
  auto b = nodes_[1]->Connect();
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  bool located = false;
  for (auto start = std::chrono::steady_clock::now();
       !located && std::chrono::steady_clock::now() - start < 10s;
       std::this_thread::sleep_for(20ms)) {
    Result<rpc::ClusterLookupResponse> r = ClusterLookup(**b, tokens);
    located = r.ok() && r->recommended() == "node-a";
  }
  ASSERT_TRUE(located) << nodes_[1]->process().Stderr();
  const SyntheticWorkloadStats on_b = RunOn(nodes_[1]->unix_socket(), requests);
  EXPECT_EQ(on_b.failed_requests, 0) << on_b.first_error;
  EXPECT_EQ(on_b.check_failures, 0) << on_b.first_error;
  EXPECT_GT(on_b.checks, 0);
  // 8 blocks, the last token recomputed: 7 reusable full blocks, all fetched from A.
  EXPECT_EQ(on_b.remote_hit_blocks, 7) << nodes_[1]->process().Stderr();
  EXPECT_EQ(on_b.pool_hit_blocks, 0);
}

TEST_F(NetnsClusterTest, HandoffFromAInHndToBInNhdAcrossTheVethPair) {
  StartNodes("HND", "NHD");
  const auto requests = Prompt(6000, 12);
  ASSERT_EQ(RunOn(nodes_[0]->unix_socket(), requests).check_failures, 0);
  auto a = nodes_[0]->Connect();
  ASSERT_TRUE(a.ok()) << a.status();
  Result<rpc::HandoffResponse> r =
      (*a)->HandOffTo("node-b", StrCat(NamespacePair::address(1), ":", kControlPort),
                      TraceTokens(requests[0], kBlockTokens));
  ASSERT_TRUE(r.ok()) << r.status() << "\nnode-a:\n"
                      << nodes_[0]->process().Stderr() << "\nnode-b:\n"
                      << nodes_[1]->process().Stderr();
  EXPECT_EQ(r->wanted_blocks(), 11);
  EXPECT_EQ(r->moved_blocks(), 11);
  const SyntheticWorkloadStats on_b = RunOn(nodes_[1]->unix_socket(), requests);
  EXPECT_EQ(on_b.failed_requests, 0) << on_b.first_error;
  EXPECT_EQ(on_b.check_failures, 0) << on_b.first_error;
  EXPECT_GT(on_b.checks, 0);
  EXPECT_EQ(on_b.pool_hit_blocks, 11);
  EXPECT_EQ(on_b.remote_hit_blocks, 0);
}

}  // namespace
}  // namespace kvmesh
