// Membership against a real etcd (skipped when etcd is not installed), and the static list.
#include "node/membership.h"

#include <gtest/gtest.h>

#include <thread>

#include "node/etcd_client.h"
#include "tests/node/etcd_process.h"

namespace kvmesh {
namespace {

using namespace std::chrono_literals;
using node_test::EtcdProcess;
using node_test::ScratchDir;

PeerInfo Self(const std::string& id) {
  PeerInfo p;
  p.node_id = id;
  p.control_address = "127.0.0.1:" + std::to_string(7000 + id.back());
  p.role = NodeRole::kDecode;
  p.namespace_digest_hex = "00ff";
  return p;
}

std::vector<std::string> Ids(const PeerTable& t) {
  std::vector<std::string> ids;
  for (const PeerInfo& p : t.Snapshot()) ids.push_back(p.node_id);
  return ids;
}

// Polls `pred` every 20 ms up to `timeout`.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

ClusterSection EtcdConfig(const std::string& endpoint, int ttl_s = 3) {
  ClusterSection c;
  c.membership = MembershipKind::kEtcd;
  c.etcd.endpoints = {endpoint};
  c.etcd.lease_ttl_s = ttl_s;
  c.etcd.prefix = "/test/members/";
  c.etcd.poll_interval = 100ms;
  return c;
}

TEST(MembershipTest, PeerInfoRoundTripsThroughJson) {
  PeerInfo p = Self("a");
  p.ucx_address = {std::byte{0}, std::byte{0xff}, std::byte{7}};
  p.incarnation = 1234567890123ull;
  Result<PeerInfo> back = DecodePeerInfo(EncodePeerInfo(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
  EXPECT_TRUE(DecodePeerInfo("{\"node_id\": \"x\"}").status().IsCorruption());
  EXPECT_TRUE(DecodePeerInfo("not json").status().IsCorruption());
}

TEST(MembershipTest, Base64RoundTrips) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    Result<std::string> back = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
}

TEST(MembershipTest, StaticListFillsTheTableWithoutSelf) {
  ClusterSection c;
  c.membership = MembershipKind::kStatic;
  c.peers = {{"a", "127.0.0.1:1"}, {"b", "127.0.0.1:2"}, {"c", "127.0.0.1:3"}};
  PeerTable table("b");
  Result<std::unique_ptr<Membership>> m = Membership::Start(c, Self("b"), &table);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(Ids(table), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(table.Find("c")->control_address, "127.0.0.1:3");
  const PeerTableStats st = table.stats();
  EXPECT_EQ(st.health.kind, "static");
  EXPECT_TRUE(st.health.ok);
  EXPECT_TRUE(st.health.last_view.has_value());
  EXPECT_EQ(st.members, 2);
  EXPECT_EQ(st.joined, 2);
  EXPECT_EQ(st.left, 0);
}

// What kvctl status and /metrics count: a member that appears, one that comes back with a new
// incarnation (a restarted node, or one whose lease lapsed), a changed address alone (not counted),
// one that leaves — by Upsert, Remove and a full listing alike.
TEST(PeerTableTest, CountsJoinsLeavesAndRejoins) {
  PeerTable t("self");
  PeerInfo a = Self("a");
  a.incarnation = 1;
  t.Upsert(a);
  t.Upsert(Self("self"));  // this node: ignored
  EXPECT_EQ(t.stats().joined, 1);
  a.control_address = "127.0.0.1:9";
  t.Upsert(a);  // same incarnation
  EXPECT_EQ(t.stats().rejoined, 0);
  a.incarnation = 2;
  t.Upsert(a);
  EXPECT_EQ(t.stats().rejoined, 1);
  PeerInfo b = Self("b");
  t.ReplaceAll({a, b});  // b joins
  a.incarnation = 3;
  t.ReplaceAll({a});  // b leaves, a rejoins
  PeerTableStats st = t.stats();
  EXPECT_EQ(st.members, 1);
  EXPECT_EQ(st.joined, 2);
  EXPECT_EQ(st.left, 1);
  EXPECT_EQ(st.rejoined, 2);
  t.Remove("a");
  t.Remove("a");  // gone already: nothing
  st = t.stats();
  EXPECT_EQ(st.members, 0);
  EXPECT_EQ(st.left, 2);
  EXPECT_EQ(st.health.kind, "none");  // until a membership reports
}

// Contacts (handoff peers outside the membership) are reachable through Resolve only: no member,
// no count, no listener call; a member of the same id wins; at most kMaxContacts, the oldest goes.
TEST(PeerTableTest, ContactsAreNoMembers) {
  PeerTable t("self");
  int notified = 0;
  t.Subscribe([&](const std::vector<PeerInfo>&) { ++notified; });
  t.SetContact("decode-1", "127.0.0.1:9001");
  t.SetContact("self", "127.0.0.1:9002");  // this node: ignored
  EXPECT_EQ(t.Find("decode-1"), nullptr);
  ASSERT_NE(t.Resolve("decode-1"), nullptr);
  EXPECT_EQ(t.Resolve("decode-1")->control_address, "127.0.0.1:9001");
  EXPECT_EQ(t.Resolve("self"), nullptr);
  EXPECT_TRUE(t.Snapshot().empty());
  EXPECT_EQ(t.stats().members, 0);
  EXPECT_EQ(t.stats().joined, 0);
  EXPECT_EQ(notified, 0);
  t.SetContact("decode-1", "127.0.0.1:9003");  // moved
  EXPECT_EQ(t.Resolve("decode-1")->control_address, "127.0.0.1:9003");
  EXPECT_EQ(t.contacts(), 1u);
  // A member of that id is what Resolve gives, and a contact never moves it.
  PeerInfo m = Self("decode-1");
  m.control_address = "127.0.0.1:7000";
  t.Upsert(m);
  EXPECT_EQ(notified, 1);
  t.SetContact("decode-1", "127.0.0.1:9004");
  EXPECT_EQ(t.Resolve("decode-1")->control_address, "127.0.0.1:7000");
  EXPECT_EQ(t.Find("decode-1")->control_address, "127.0.0.1:7000");
  EXPECT_EQ(notified, 1);
  // Bounded: the contact set longest ago goes first.
  for (std::size_t i = 0; i < PeerTable::kMaxContacts; ++i) {
    t.SetContact("n" + std::to_string(i), "127.0.0.1:1");
  }
  EXPECT_EQ(t.contacts(), PeerTable::kMaxContacts);
  EXPECT_NE(t.Resolve("n1"), nullptr);
  t.SetContact("n0", "127.0.0.1:2");  // moved: now the newest
  t.SetContact("late", "127.0.0.1:3");
  EXPECT_EQ(t.contacts(), PeerTable::kMaxContacts);
  EXPECT_NE(t.Resolve("n0"), nullptr);
  EXPECT_EQ(t.Resolve("n1"), nullptr);  // set longest ago now that n0 moved
  EXPECT_NE(t.Resolve("late"), nullptr);
  EXPECT_EQ(t.stats().members, 1);
}

class EtcdMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (node_test::EtcdBinary().empty()) GTEST_SKIP() << node_test::kEtcdMissing;
    Result<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start(dir_.path() / "etcd");
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(etcd).value();
  }
  ScratchDir dir_;
  std::unique_ptr<EtcdProcess> etcd_;
};

TEST_F(EtcdMembershipTest, NodesJoinAndLeaveWithoutRestarts) {
  PeerTable ta("a"), tb("b"), tc("c");
  auto a = Membership::Start(EtcdConfig(etcd_->endpoint()), Self("a"), &ta);
  auto b = Membership::Start(EtcdConfig(etcd_->endpoint()), Self("b"), &tb);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(Eventually([&] { return Ids(ta) == std::vector<std::string>{"b"}; }, 5s));
  ASSERT_TRUE(Eventually([&] { return Ids(tb) == std::vector<std::string>{"a"}; }, 5s));
  // What b advertised is what a sees, with b's lease as its incarnation.
  std::shared_ptr<const PeerInfo> seen = ta.Find("b");
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(seen->control_address, Self("b").control_address);
  EXPECT_EQ(seen->role, NodeRole::kDecode);
  EXPECT_NE(seen->incarnation, 0u);

  // c joins later: both see it, nobody rejoined.
  auto c = Membership::Start(EtcdConfig(etcd_->endpoint()), Self("c"), &tc);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->WaitForFirstView(5s));
  EXPECT_TRUE(Eventually([&] { return Ids(ta) == std::vector<std::string>{"b", "c"}; }, 5s));
  EXPECT_TRUE(Eventually([&] { return Ids(tc) == std::vector<std::string>{"a", "b"}; }, 5s));

  // A changed self (a UCX address learnt later) reaches the others.
  PeerInfo updated = Self("c");
  updated.ucx_address = {std::byte{1}, std::byte{2}};
  (*c)->UpdateSelf(updated);
  EXPECT_TRUE(Eventually(
      [&] {
        auto p = ta.Find("c");
        return p != nullptr && p->ucx_address == updated.ucx_address;
      },
      5s));

  // b leaves cleanly (revoke): gone from the others at their next list, well before the TTL.
  const auto left = std::chrono::steady_clock::now();
  (*b)->Stop();
  EXPECT_TRUE(Eventually([&] { return Ids(ta) == std::vector<std::string>{"c"}; }, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - left, 2s);

  // What a's status says: etcd up, one lease (the incarnation c sees for a), b and c joined, b
  // left, the list read within the last poll intervals.
  const PeerTableStats st = ta.stats();
  EXPECT_EQ(st.health.kind, "etcd");
  EXPECT_TRUE(st.health.ok) << st.health.error;
  EXPECT_EQ(st.health.joins, 1);
  ASSERT_NE(tc.Find("a"), nullptr);
  EXPECT_EQ(static_cast<std::uint64_t>(st.health.lease), tc.Find("a")->incarnation);
  ASSERT_TRUE(st.health.last_view.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - *st.health.last_view, 2s);
  EXPECT_EQ(st.members, 1);
  EXPECT_EQ(st.joined, 2);
  EXPECT_EQ(st.left, 1);
  EXPECT_EQ(st.rejoined, 0);
}

TEST_F(EtcdMembershipTest, AMemberWhoseLeaseLapsesIsRemovedWithinTheTtl) {
  PeerTable ta("a");
  auto a = Membership::Start(EtcdConfig(etcd_->endpoint()), Self("a"), &ta);
  ASSERT_TRUE(a.ok());
  // A member that never keeps its lease alive (a node whose keepalive died): TTL 2 s.
  const EtcdClient client({etcd_->endpoint()}, 2s);
  Result<std::int64_t> lease = client.GrantLease(2);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client.Put("/test/members/ghost", EncodePeerInfo(Self("ghost")), *lease).ok());
  const auto put = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return ta.Find("ghost") != nullptr; }, 3s));
  ASSERT_TRUE(Eventually([&] { return ta.Find("ghost") == nullptr; }, 6s));
  const double gone_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - put).count();
  // etcd expires a lease at its TTL (2 s) give or take its own tick; a's poll adds 100 ms.
  EXPECT_GE(gone_s, 1.5);
  EXPECT_LE(gone_s, 2 + 1.5);
  // a itself, kept alive at ttl/3, is still a member after several TTLs.
  std::this_thread::sleep_for(3500ms);
  Result<std::vector<EtcdKeyValue>> kvs = client.ListPrefix("/test/members/");
  ASSERT_TRUE(kvs.ok());
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_EQ((*kvs)[0].key, "/test/members/a");
}

TEST_F(EtcdMembershipTest, EtcdDownKeepsTheLastViewAndRecovers) {
  PeerTable ta("a"), tb("b");
  auto a = Membership::Start(EtcdConfig(etcd_->endpoint(), 10), Self("a"), &ta);
  auto b = Membership::Start(EtcdConfig(etcd_->endpoint(), 10), Self("b"), &tb);
  ASSERT_TRUE(Eventually([&] { return Ids(ta) == std::vector<std::string>{"b"}; }, 5s));
  EXPECT_TRUE(ta.stats().health.ok);
  etcd_->process().Signal(SIGSTOP);  // etcd unreachable (calls time out)
  // The outage shows in the health that kvctl status and /metrics report.
  EXPECT_TRUE(Eventually([&] { return !ta.stats().health.ok; }, 5s));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(Ids(ta), std::vector<std::string>{"b"});  // the last view is kept
  PeerTableStats down = ta.stats();
  EXPECT_FALSE(down.health.error.empty());
  EXPECT_GE(down.health.failures, 1);
  EXPECT_EQ(down.left, 0);
  etcd_->process().Signal(SIGCONT);
  PeerTable tc("c");
  auto c = Membership::Start(EtcdConfig(etcd_->endpoint(), 10), Self("c"), &tc);
  EXPECT_TRUE(Eventually([&] { return Ids(ta) == std::vector<std::string>{"b", "c"}; }, 8s));
  const PeerTableStats up = ta.stats();
  EXPECT_TRUE(up.health.ok) << up.health.error;
  EXPECT_TRUE(up.health.error.empty());
  EXPECT_GE(up.health.failures, down.health.failures);
  EXPECT_EQ(up.health.joins, 1);  // a TTL of 10 s outlived the outage: the same lease
}

}  // namespace
}  // namespace kvmesh
