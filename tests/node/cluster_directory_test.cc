// kvnode processes on loopback with a real etcd (skipped without etcd). Three: a prefix stored on
// A is located from C through the partitioned directory; A's eviction reaches the directory within
// the batch bound; A leaving removes its entries. Two: host-tier copies reach the directory
// through the holdings' resync.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "common/strings.h"
#include "node/prefix_directory.h"
#include "tests/node/etcd_process.h"
#include "tests/node/node_process.h"

namespace kvmesh {
namespace {

using namespace std::chrono_literals;
using node_test::ClusterLookup;
using node_test::EtcdProcess;
using node_test::KvnodeProcess;
using node_test::ScratchDir;

constexpr int kBatchMs = 50;
constexpr std::int64_t kT = 16;  // tokens per block of TestConfig

// By default no host or disk tier: an evicted block is gone from the node entirely.
std::string ClusterConfig(const std::filesystem::path& dir, const std::string& id,
                          const std::string& etcd, const std::string& host_cache = "",
                          const std::string& directory_extra = "") {
  std::string y = node_test::TestConfig(
      dir, 4096, host_cache, "",
      StrCat("cluster:\n  membership: etcd\n  etcd:\n    endpoints: [\"", etcd,
             "\"]\n    lease_ttl_s: 2\n    prefix: /kvmesh-test/\n    poll_interval: 100ms\n"
             "  directory:\n    batch_ms: ",
             kBatchMs, "\n", directory_extra));
  const std::string from = "node_id: test-node";
  y.replace(y.find(from), from.size(), "node_id: " + id);
  return y;
}

std::vector<Token> Prompt(int blocks, Token base) {
  std::vector<Token> p;
  for (int i = 0; i < blocks * kT + 1; ++i) p.push_back(base + i);
  return p;
}

// The prefix tokens the lookup credits `node` with (0 when absent).
std::int64_t PrefixOf(const rpc::ClusterLookupResponse& r, const std::string& node) {
  for (const rpc::NodePrefix& n : r.nodes()) {
    if (n.node_id() == node) return n.prefix_tokens();
  }
  return 0;
}

// Polls `c`'s ClusterLookup until `pred` holds or `timeout` passes; the time it took.
template <typename Pred>
std::optional<std::chrono::milliseconds> Until(NodeClient& c, const std::vector<Token>& p,
                                               Pred pred, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < timeout) {
    Result<rpc::ClusterLookupResponse> r = ClusterLookup(c, p);
    if (r.ok() && pred(*r)) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
    }
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

TEST(ClusterDirectoryTest, StoredOnALocatedFromCEvictionAndLeaveReachTheDirectory) {
  if (node_test::EtcdBinary().empty()) GTEST_SKIP() << node_test::kEtcdMissing;
  ScratchDir dir;
  auto etcd = EtcdProcess::Start(dir.path() / "etcd");
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  std::map<std::string, std::unique_ptr<KvnodeProcess>> nodes;
  for (const std::string id : {"a", "b", "c"}) {
    std::filesystem::create_directories(dir.path() / id);
    auto n = KvnodeProcess::Start(dir.path() / id,
                                  ClusterConfig(dir.path() / id, id, (*etcd)->endpoint()));
    ASSERT_TRUE(n.ok()) << n.status();
    nodes[id] = std::move(n).value();
  }
  auto a = nodes["a"]->Connect("engine-a");
  auto c = nodes["c"]->Connect("router-c");
  ASSERT_TRUE(a.ok() && c.ok());
  // 12 full blocks, so the homes of its ids spread over all three nodes.
  const std::vector<Token> p = Prompt(12, 1000);
  ASSERT_TRUE((*a)->Admit(1, p).ok());
  ASSERT_TRUE((*a)->StoreFullBlocks(1).ok());
  ASSERT_TRUE((*a)->Release(1).ok());

  // Located from C: A holds all 12 blocks in its pool; a router should pick A.
  const auto seen = Until(
      **c, p,
      [](const rpc::ClusterLookupResponse& r) {
        return r.members() == 3 && PrefixOf(r, "a") == 12 * kT;
      },
      10s);
  ASSERT_TRUE(seen.has_value()) << nodes["c"]->process().Stderr();
  Result<rpc::ClusterLookupResponse> r = ClusterLookup(**c, p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->recommended(), "a");
  ASSERT_EQ(r->nodes_size(), 1);
  EXPECT_EQ(r->nodes(0).pool_tokens(), 12 * kT);
  EXPECT_EQ(r->full_blocks(), 12);
  EXPECT_EQ(r->unreachable_homes_size(), 0);

  // A evicts everything (kvctl evict --below-priority 101): the directory forgets A's blocks
  // within a batch interval plus the round trips (bounded here at 20 intervals for a loaded CI).
  auto op = nodes["a"]->Connect("kvctl");
  ASSERT_TRUE(op.ok());
  rpc::Request evict;
  evict.mutable_evict()->set_below_priority(101);
  Result<rpc::Response> evicted = (*op)->Call(std::move(evict));
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_GE(evicted->evict().evicted(), 12);
  const auto forgotten = Until(
      **c, p, [](const rpc::ClusterLookupResponse& r) { return r.nodes_size() == 0; }, 5s);
  ASSERT_TRUE(forgotten.has_value());
  EXPECT_LT(forgotten->count(), 20 * kBatchMs) << "staleness after eviction";
  std::printf("directory staleness after eviction: %lld ms (batch_ms %d)\n",
              static_cast<long long>(forgotten->count()), kBatchMs);

  // Stored again on A, and a shorter prefix of it on B: both listed, A first.
  ASSERT_TRUE((*a)->Admit(2, p).ok());
  ASSERT_TRUE((*a)->StoreFullBlocks(2).ok());
  ASSERT_TRUE((*a)->Release(2).ok());
  auto b = nodes["b"]->Connect("engine-b");
  ASSERT_TRUE(b.ok());
  const std::vector<Token> half(p.begin(), p.begin() + 5 * kT + 1);
  ASSERT_TRUE((*b)->Admit(1, half).ok());
  ASSERT_TRUE((*b)->StoreFullBlocks(1).ok());
  ASSERT_TRUE((*b)->Release(1).ok());
  ASSERT_TRUE(Until(
                  **c, p,
                  [](const rpc::ClusterLookupResponse& r) {
                    return PrefixOf(r, "a") == 12 * kT && PrefixOf(r, "b") == 5 * kT &&
                           r.recommended() == "a";
                  },
                  5s)
                  .has_value());

  // A leaves (SIGTERM: lease revoked): its entries go, B's stay; the cluster is now two nodes.
  a->reset();
  op->reset();
  ASSERT_TRUE(nodes["a"]->Terminate().has_value());
  const auto left = Until(
      **c, p,
      [](const rpc::ClusterLookupResponse& r) {
        return r.members() == 2 && PrefixOf(r, "a") == 0 && PrefixOf(r, "b") == 5 * kT;
      },
      10s);
  EXPECT_TRUE(left.has_value()) << nodes["c"]->process().Stderr();

  // C's status (kvctl status) tells the same story: etcd membership up, two members (B, and C
  // itself with its lease as incarnation), A and B joined and A left; its directory shard.
  Result<rpc::StatusResponse> st = (*c)->GetStatus();
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_TRUE(st->has_cluster());
  const rpc::ClusterStatus& cs = st->cluster();
  EXPECT_EQ(cs.membership(), "etcd");
  EXPECT_TRUE(cs.membership_ok()) << cs.membership_error();
  EXPECT_NE(cs.lease(), 0);
  EXPECT_EQ(cs.joins(), 1);
  EXPECT_GE(cs.last_view_age_s(), 0.0);
  EXPECT_LT(cs.last_view_age_s(), 5.0);
  EXPECT_EQ(cs.members_joined(), 2);
  EXPECT_EQ(cs.members_left(), 1);
  EXPECT_EQ(cs.members_rejoined(), 0);
  EXPECT_FALSE(cs.peer_enabled());
  ASSERT_EQ(cs.members_size(), 2);
  EXPECT_EQ(cs.members(0).node_id(), "b");
  EXPECT_FALSE(cs.members(0).self());
  EXPECT_NE(cs.members(0).incarnation(), 0u);
  EXPECT_EQ(cs.members(1).node_id(), "c");
  EXPECT_TRUE(cs.members(1).self());
  EXPECT_EQ(cs.members(1).control_address(), nodes["c"]->tcp_address());
  EXPECT_EQ(cs.members(1).incarnation(), static_cast<std::uint64_t>(cs.lease()));
  // B's 5 blocks, each homed at B or C: C's shard holds the ones homed at it.
  EXPECT_LE(cs.directory_shard_ids(), 5);
  EXPECT_EQ(cs.directory_held_ids(), 0);
  EXPECT_EQ(cs.directory_events_lost(), 0);
  // And /metrics.
  const std::string& maddr = nodes["c"]->metrics_address();
  ASSERT_FALSE(maddr.empty());
  const std::optional<std::string> scraped =
      node_test::HttpGet(std::stoi(maddr.substr(maddr.rfind(':') + 1)), "/metrics");
  ASSERT_TRUE(scraped.has_value());
  const std::string& metrics = *scraped;
  EXPECT_NE(metrics.find("kvmesh_cluster_members 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kvmesh_cluster_member_changes_total{change=\"left\"} 1\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("kvmesh_cluster_membership_up 1\n"), std::string::npos);
}

// Tier copies reach the directory through the holdings' resync (no KV event announces them): A
// has a host tier; its blocks, evicted from the pool into it, are listed from C as A's host-tier
// prefix within a resync interval.
TEST(ClusterDirectoryTest, HostTierCopiesReachTheDirectoryThroughTheResync) {
  if (node_test::EtcdBinary().empty()) GTEST_SKIP() << node_test::kEtcdMissing;
  ScratchDir dir;
  auto etcd = EtcdProcess::Start(dir.path() / "etcd");
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  constexpr int kResyncMs = 200;
  std::map<std::string, std::unique_ptr<KvnodeProcess>> nodes;
  for (const std::string id : {"a", "c"}) {
    std::filesystem::create_directories(dir.path() / id);
    auto n = KvnodeProcess::Start(
        dir.path() / id, ClusterConfig(dir.path() / id, id, (*etcd)->endpoint(), "16MiB",
                                       StrCat("    resync_interval: ", kResyncMs, "ms\n")));
    ASSERT_TRUE(n.ok()) << n.status();
    nodes[id] = std::move(n).value();
  }
  auto a = nodes["a"]->Connect("engine-a");
  auto c = nodes["c"]->Connect("router-c");
  auto op = nodes["a"]->Connect("kvctl");
  ASSERT_TRUE(a.ok() && c.ok() && op.ok());
  const std::vector<Token> p = Prompt(12, 5000);
  ASSERT_TRUE((*a)->Admit(1, p).ok());
  ASSERT_TRUE((*a)->StoreFullBlocks(1).ok());
  ASSERT_TRUE((*a)->Release(1).ok());
  ASSERT_TRUE(Until(
                  **c, p,
                  [](const rpc::ClusterLookupResponse& r) {
                    return r.members() == 2 && PrefixOf(r, "a") == 12 * kT;
                  },
                  10s)
                  .has_value())
      << nodes["c"]->process().Stderr();
  rpc::Request evict;
  evict.mutable_evict()->set_below_priority(101);
  Result<rpc::Response> evicted = (*op)->Call(std::move(evict));
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_GE(evicted->evict().evicted(), 12);
  // Out of A's pool, into its host tier: listed from C as A's host-tier prefix, none in the pool.
  const auto in_host = Until(
      **c, p,
      [](const rpc::ClusterLookupResponse& r) {
        return r.nodes_size() == 1 && r.nodes(0).node_id() == "a" &&
               r.nodes(0).host_tokens() == 12 * kT && r.nodes(0).pool_tokens() == 0;
      },
      10s);
  ASSERT_TRUE(in_host.has_value()) << nodes["a"]->process().Stderr();
  std::printf("host-tier copies in the directory after eviction: %lld ms (resync_interval %d)\n",
              static_cast<long long>(in_host->count()), kResyncMs);
  EXPECT_EQ(ClusterLookup(**c, p)->recommended(), "a");
  // What an operator sees of it on A's /metrics.
  const std::string& address = nodes["a"]->metrics_address();
  const auto body =
      node_test::HttpGet(std::stoi(address.substr(address.rfind(':') + 1)), "/metrics");
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(node_test::MetricValue(*body, "kvmesh_directory_held_ids"), 12);
  EXPECT_GE(node_test::MetricValue(*body, "kvmesh_directory_resyncs_total{cause=\"periodic\"}")
                .value_or(0),
            1);
  EXPECT_EQ(node_test::MetricValue(*body, "kvmesh_directory_resyncs_total{cause=\"lost_events\"}"),
            0);
}

// A home that restarts (a new incarnation at the same address) is sent its next update on a new
// connection: the first update after the restart does not fail on the old process's connection.
TEST(ClusterDirectoryTest, AnUpdateToARestartedHomeGoesThroughTheFirstTime) {
  ScratchDir dir;
  const int port = node_test::FreeLoopbackPort();
  std::string y = node_test::TestConfig(
      dir.path() / "b", 4096, "", "",
      StrCat("cluster:\n  membership: static\n  peers:\n    - {node_id: a, address: "
             "\"127.0.0.1:1\"}\n    - {node_id: b, address: \"127.0.0.1:",
             port, "\"}\n"));
  const auto replace = [&y](const std::string& from, const std::string& to) {
    y.replace(y.find(from), from.size(), to);
  };
  replace("node_id: test-node", "node_id: b");
  replace("tcp_listen: 127.0.0.1:0", StrCat("tcp_listen: 127.0.0.1:", port));
  std::filesystem::create_directories(dir.path() / "b");
  auto b = KvnodeProcess::Start(dir.path() / "b", y);
  ASSERT_TRUE(b.ok()) << b.status();

  // A as a holder: its updates for ids homed at B.
  std::unique_ptr<DirectoryTransport> transport =
      MakePeerDirectoryTransport("a", std::make_shared<PresentedSecret>(node_test::kTestSecret));
  PeerInfo home;
  home.node_id = "b";
  home.control_address = (*b)->tcp_address();
  home.incarnation = 1;
  rpc::DirectoryUpdateRequest update;
  update.set_node_id("a");
  rpc::DirectoryEntry* e = update.add_entries();
  e->set_content_id(std::string(16, '\x01'));
  e->set_tier(0);
  ASSERT_TRUE(transport->Update(home, update, 5s).ok());

  ASSERT_TRUE((*b)->Terminate().has_value());
  b->reset();
  b = KvnodeProcess::Start(dir.path() / "b", y);
  ASSERT_TRUE(b.ok()) << b.status();
  home.incarnation = 2;
  const Status again = transport->Update(home, update, 5s);
  EXPECT_TRUE(again.ok()) << again;
  Result<rpc::StatusResponse> st = (*(*b)->Connect())->GetStatus();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->cluster().directory_shard_ids(), 1);
}

// Static membership: a member that restarts with an empty shard keeps no incarnation to tell the
// others so. It asks each member for what it holds homed there (send_all), and they send it all:
// the holder it restarted behind is found again. (Before, resyncs sent only changes, and the
// restarted node's shard stayed empty of the others' entries: a lookup from it found no holder.)
TEST(ClusterDirectoryTest, AStaticMemberThatRestartsGetsItsHomedEntriesAgain) {
  ScratchDir dir;
  const int port_a = node_test::FreeLoopbackPort();
  int port_b = node_test::FreeLoopbackPort();
  while (port_b == port_a) port_b = node_test::FreeLoopbackPort();
  const auto config = [&](const std::string& id, int port) {
    std::string y = node_test::TestConfig(
        dir.path() / id, 4096, "", "",
        StrCat("cluster:\n  membership: static\n  peers:\n    - {node_id: a, address: "
               "\"127.0.0.1:",
               port_a, "\"}\n    - {node_id: b, address: \"127.0.0.1:", port_b,
               "\"}\n  directory:\n    batch_ms: ", kBatchMs, "\n"));
    const auto replace = [&y](const std::string& from, const std::string& to) {
      y.replace(y.find(from), from.size(), to);
    };
    replace("node_id: test-node", "node_id: " + id);
    replace("tcp_listen: 127.0.0.1:0", StrCat("tcp_listen: 127.0.0.1:", port));
    std::filesystem::create_directories(dir.path() / id);
    return y;
  };
  auto a = KvnodeProcess::Start(dir.path() / "a", config("a", port_a));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = KvnodeProcess::Start(dir.path() / "b", config("b", port_b));
  ASSERT_TRUE(b.ok()) << b.status();
  auto engine = (*a)->Connect("engine-a");
  ASSERT_TRUE(engine.ok());
  const std::vector<Token> p = Prompt(12, 5000);  // 12 ids: some homed at B
  ASSERT_TRUE((*engine)->Admit(1, p).ok());
  ASSERT_TRUE((*engine)->StoreFullBlocks(1).ok());
  ASSERT_TRUE((*engine)->Release(1).ok());
  const auto all_of_a = [](const rpc::ClusterLookupResponse& r) {
    return r.members() == 2 && PrefixOf(r, "a") == 12 * kT;
  };
  {
    auto from_b = (*b)->Connect("router-b");
    ASSERT_TRUE(from_b.ok());
    ASSERT_TRUE(Until(**from_b, p, all_of_a, 10s).has_value()) << (*b)->process().Stderr();
  }
  // B restarts with an empty data_dir (its shard is new); A holds on, with nothing new to send.
  ASSERT_TRUE((*b)->Terminate().has_value());
  b->reset();
  std::filesystem::remove_all(dir.path() / "b");
  b = KvnodeProcess::Start(dir.path() / "b", config("b", port_b));
  ASSERT_TRUE(b.ok()) << b.status();
  auto from_b = (*b)->Connect("router-b");
  ASSERT_TRUE(from_b.ok());
  EXPECT_TRUE(Until(**from_b, p, all_of_a, 10s).has_value())
      << "B's shard never got A's entries back\n"
      << (*b)->process().Stderr();
}

}  // namespace
}  // namespace kvmesh
