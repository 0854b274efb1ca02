// The cluster: section of the node config: keys, defaults, and errors that name key and line.
#include <gtest/gtest.h>

#include "node/node_config.h"
#include "tests/node/node_config_test_util.h"

namespace kvmesh {
namespace {

TEST(NodeConfigClusterTest, DefaultsAreASingleNode) {
  const NodeConfig c;
  EXPECT_EQ(c.cluster.membership, MembershipKind::kNone);
  EXPECT_TRUE(c.cluster.peers.empty());
  EXPECT_EQ(c.cluster.etcd.endpoints, std::vector<std::string>{"127.0.0.1:2379"});
  EXPECT_EQ(c.cluster.etcd.lease_ttl_s, 10);
  EXPECT_EQ(c.cluster.directory.batch_ms, 100);
}

TEST(NodeConfigClusterTest, EveryKeyIsRead) {
  const NodeConfig c = ParseOk(R"(
node_id: a
cluster:
  advertise: "10.0.0.1:7420"
  membership: static
  peers:
    - {node_id: a, address: "10.0.0.1:7420"}
    - node_id: b
      address: "10.0.0.2:7420"
  etcd:
    endpoints: ["10.0.0.9:2379", "10.0.0.10:2379"]
    lease_ttl_s: 4
    prefix: /x/
    poll_interval: 200ms
  directory:
    batch_ms: 20
    lookup_timeout: 1s
    max_batch_events: 100
)");
  EXPECT_EQ(c.cluster.advertise, "10.0.0.1:7420");
  EXPECT_EQ(c.cluster.membership, MembershipKind::kStatic);
  ASSERT_EQ(c.cluster.peers.size(), 2u);
  EXPECT_EQ(c.cluster.peers[1], (StaticPeer{"b", "10.0.0.2:7420"}));
  EXPECT_EQ(c.cluster.etcd.endpoints.size(), 2u);
  EXPECT_EQ(c.cluster.etcd.lease_ttl_s, 4);
  EXPECT_EQ(c.cluster.etcd.prefix, "/x/");
  EXPECT_EQ(c.cluster.etcd.poll_interval, std::chrono::milliseconds(200));
  EXPECT_EQ(c.cluster.directory.batch_ms, 20);
  EXPECT_EQ(c.cluster.directory.lookup_timeout, std::chrono::milliseconds(1000));
  EXPECT_EQ(c.cluster.directory.max_batch_events, 100);
}

TEST(NodeConfigClusterTest, ErrorsNameTheKeyAndItsLine) {
  EXPECT_EQ(ParseError("cluster:\n  membership: zookeeper\n"),
            "kvnode.yaml:2: cluster.membership: 'zookeeper' is not one of none, static, etcd");
  EXPECT_EQ(ParseError("cluster:\n  etcd:\n    lease_tl_s: 3\n"),
            "kvnode.yaml:3: unknown key 'lease_tl_s' in cluster.etcd (did you mean lease_ttl_s?)");
  EXPECT_EQ(ParseError("cluster:\n  etcd:\n    lease_ttl_s: 1\n"),
            "kvnode.yaml:3: cluster.etcd.lease_ttl_s: 1 is not in 2..3600 seconds");
  EXPECT_EQ(ParseError("cluster:\n  peers:\n    - {node_id: a, adress: \"x:1\"}\n"),
            "kvnode.yaml:3: unknown key 'adress' in cluster.peers[0] (known keys: node_id, "
            "address)");
  EXPECT_EQ(ParseError("cluster:\n  membership: static\n  peers:\n    - {node_id: a, address: "
                       "\"h:1\"}\n    - {node_id: a, address: \"h:2\"}\n"),
            "kvnode.yaml:5: cluster.peers[1].node_id: 'a' is listed twice (also cluster.peers[0])");
  EXPECT_EQ(ParseError("cluster:\n  peers:\n    - {node_id: b, address: nohost}\n"),
            "kvnode.yaml:3: cluster.peers[0].address: 'nohost': expected host:port, e.g. "
            "127.0.0.1:7420");
  EXPECT_EQ(ParseError("cluster:\n  advertise: \"10.0.0.1:0\"\n"),
            "kvnode.yaml:2: cluster.advertise: '10.0.0.1:0': port 0 cannot be reached");
  EXPECT_EQ(ParseError("control:\n  tcp_listen: \"\"\ncluster:\n  membership: etcd\n"),
            "kvnode.yaml:4: cluster.membership: etcd needs control.tcp_listen: peers reach each "
            "other over TCP");
  EXPECT_EQ(ParseError("cluster:\n  directory:\n    batch_ms: 0\n"),
            "kvnode.yaml:3: cluster.directory.batch_ms: 0 is not in 1..60000");
  EXPECT_EQ(ParseError("cluster:\n  directory:\n    resync_interval: 50ms\n"),
            "kvnode.yaml:3: cluster.directory.resync_interval: 50ms is not 0 (off) or in "
            "100ms..1h");
  EXPECT_EQ(ParseError("cluster:\n  etcd:\n    prefix: /x\n"),
            "kvnode.yaml:3: cluster.etcd.prefix: '/x' must end with '/'");
  EXPECT_EQ(ParseError("cluster:\n  etcd: 3\n"),
            "kvnode.yaml:2: cluster.etcd: expected a map of keys, got '3'");
}

}  // namespace
}  // namespace kvmesh
