// Prefill -> decode handoff (node/handoff.h) between nodes on loopback, UCX over tcp/lo:
//   - every block of a prompt computed on the prefill node A is handed to the decode node B (which
//     did not list A: it learns A's address from the request, as a contact, not a member); B's
//     Admit of the same prompt then hits them all in its pool and the synthetic engine's
//     dense-reference checks pass on them;
//   - the same with A in HND and B in NHD (and back): converted on receipt, checks passing on B;
//   - blocks B already holds are not moved; only the rest are;
//   - a handoff request with a member's wrong address, a wrong node id, this node's own id or no
//     address for a node outside the membership is refused and never changes the member list;
//   - kvnode processes, HND prefill and NHD decode: a client asks the prefill node to hand off
//     (HandOffTo), decode on the other node checked step by step; a second handoff moves nothing;
//   - a converting handoff from a holder that corrupts a bundle or sends another block's: nothing
//     moved, the decode side computes and its checks pass;
//   - a decode node that stops answering: the handoff fails within the peer request timeout and
//     the source blocks, pinned while it waited, are unpinned (no leak);
//   - kvmesh-synth's disaggregated mode over two kvnode processes: prefill, handoff and checked
//     decode of each request of a multi-turn workload; an unreachable decode address.
#include "node/handoff.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "node/client.h"
#include "node/control_server.h"
#include "node/node.h"
#include "node/node_config.h"
#include "node/synthetic_engine.h"
#include "tests/node/loopback_port.h"
#include "tests/node/lying_holder.h"
#include "tests/node/node_process.h"
#include "tests/node/peer_node_util.h"
#include "tests/node/peer_test_util.h"

namespace kvmesh {
namespace {

using node_test::kTestSecret;
using node_test::KvnodeProcess;
using node_test::ScratchDir;
using node_test::TestConfig;

constexpr std::int32_t kBlockTokens = node_test::kPeerBlockTokens;

using node_test::PeerConfig;
using node_test::Prompt;
using node_test::RunOn;

using node_test::PinnedBlocks;
using node_test::StartPeerNode;

// Prefill on A in `from` order, decode on B in `to` order, their pools on device_a and device_b
// (cpu, or emulated: device pools, staged out of A's pool and into B's).
void ExpectEveryBlockHandedOff(const std::string& from, const std::string& to,
                               const std::string& device_a = "cpu",
                               const std::string& device_b = "cpu") {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a", from, device_a);
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b", to, device_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(1000, 8);
  const SyntheticWorkloadStats prefill = RunOn(a->unix_socket(), requests);
  ASSERT_EQ(prefill.check_failures, 0) << prefill.first_error;
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});
  ASSERT_EQ(b->peers()->Find("node-a"), nullptr);

  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  Result<HandoffResult> r = a->handoff_sender()->HandOff("node-b", tokens, SequenceOptions{},
                                                         std::chrono::milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  // 8 blocks, the last token not reusable: 7 full blocks, all moved.
  EXPECT_EQ(r->wanted_blocks, 7);
  EXPECT_EQ(r->pinned_blocks, 7);
  EXPECT_EQ(r->had_blocks, 0);
  EXPECT_EQ(r->moved_blocks, 7);
  EXPECT_EQ(r->held_blocks, 7);
  EXPECT_EQ(PinnedBlocks(*a), 0);  // unpinned after the acknowledgement
  EXPECT_EQ(PinnedBlocks(*b), 0);
  // B reaches A back at the address A gave, as a contact: its member list stays as it was.
  ASSERT_NE(b->peers()->Resolve("node-a"), nullptr);
  EXPECT_EQ(b->peers()->Resolve("node-a")->control_address, a->tcp_address());
  EXPECT_EQ(b->peers()->Find("node-a"), nullptr);
  EXPECT_EQ(b->peers()->stats().members, 0);
  EXPECT_EQ(b->peers()->stats().joined, 0);
  EXPECT_EQ(b->handoff_receiver()->stats().moved_blocks, 7);
  const auto pools = static_cast<std::int64_t>(b->pools().pools().size());
  EXPECT_EQ(b->handoff_receiver()->stats().converted_blocks, from == to ? 0 : 7 * pools);
  // What the operators of the two nodes see on /metrics: B received one whole handoff of 7
  // blocks; A served B's fetches as the holder.
  const auto on_b = node_test::ScrapeMetrics(*b);
  ASSERT_TRUE(on_b.has_value());
  EXPECT_EQ(node_test::MetricValue(
                *on_b, "kvmesh_handoffs_received_total{mode=\"whole\",outcome=\"completed\"}"),
            1);
  EXPECT_EQ(node_test::MetricValue(*on_b, "kvmesh_handoff_received_blocks_total{mode=\"whole\"}"),
            7);
  const PeerServiceStats served = a->peer_service()->stats();
  EXPECT_GT(served.fetches_served, 0);
  EXPECT_EQ(served.fetches_failed, 0);
  EXPECT_EQ(served.blocks_missing, 0);
  const auto on_a = node_test::ScrapeMetrics(*a);
  ASSERT_TRUE(on_a.has_value());
  EXPECT_EQ(node_test::MetricValue(*on_a, "kvmesh_peer_fetches_served_total{outcome=\"served\"}"),
            served.fetches_served);
  EXPECT_EQ(node_test::MetricValue(*on_a, "kvmesh_peer_sent_blocks_total{outcome=\"sent\"}"),
            served.blocks_sent);
  EXPECT_EQ(node_test::MetricValue(*on_a, "kvmesh_peer_sent_bytes_total"), served.bytes_sent);
  EXPECT_GT(served.bytes_sent, 0);

  const SyntheticWorkloadStats decode = RunOn(b->unix_socket(), requests);
  EXPECT_EQ(decode.failed_requests, 0) << decode.first_error;
  EXPECT_EQ(decode.check_failures, 0) << decode.first_error;
  EXPECT_GT(decode.checks, 0);
  EXPECT_EQ(decode.pool_hit_blocks, 7);  // in B's own pool: no fetch at admission
  EXPECT_EQ(decode.remote_hit_blocks, 0);
  EXPECT_EQ(decode.reused_tokens, 7 * kBlockTokens);
  b->Shutdown();
  a->Shutdown();
}

TEST(HandoffTest, EveryBlockIsHandedOffAndTheDecodeAdmitHitsThemAll) {
  ExpectEveryBlockHandedOff("HND", "HND");
}

TEST(HandoffTest, HndBlocksAreConvertedToNhdOnReceipt) { ExpectEveryBlockHandedOff("HND", "NHD"); }

TEST(HandoffTest, DevicePoolsHandOffThroughStaging) {
  ExpectEveryBlockHandedOff("HND", "HND", "emulated", "emulated");
}

TEST(HandoffTest, DevicePoolsConvertThroughStaging) {
  ExpectEveryBlockHandedOff("HND", "NHD", "emulated", "emulated");
  ExpectEveryBlockHandedOff("NHD", "HND", "cpu", "emulated");
  ExpectEveryBlockHandedOff("HND", "HND", "emulated", "cpu");
}

TEST(HandoffTest, NhdBlocksAreConvertedToHndOnReceipt) { ExpectEveryBlockHandedOff("NHD", "HND"); }

TEST(HandoffTest, AdmitDoesNotFetchFromAPeerInTheOtherOrder) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a", "HND");
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b", "NHD");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(5000, 4);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  b->peers()->Upsert({.node_id = "node-a", .control_address = a->tcp_address()});
  ASSERT_TRUE(b->peer_sessions()->Link("node-a").ok());
  EXPECT_TRUE(b->peer_sessions()->OtherOrder("node-a"));
  const SyntheticWorkloadStats on_b = RunOn(b->unix_socket(), requests);
  EXPECT_EQ(on_b.check_failures, 0) << on_b.first_error;
  EXPECT_EQ(on_b.remote_hit_blocks, 0);
  EXPECT_EQ(b->remote_fetcher()->stats().fetches, 0);
  b->Shutdown();
  a->Shutdown();
}

TEST(HandoffTest, OnlyTheBlocksTheDecodeNodeLacksMove) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a");
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(2000, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  // B computed the first 4 blocks itself (the engine stores every full block of its prompt).
  ASSERT_EQ(RunOn(b->unix_socket(), Prompt(2000, 4)).check_failures, 0);
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});

  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  Result<HandoffResult> r = a->handoff_sender()->HandOff("node-b", tokens, SequenceOptions{},
                                                         std::chrono::milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->wanted_blocks, 7);
  EXPECT_EQ(r->had_blocks, 4);
  EXPECT_EQ(r->moved_blocks, 3);
  EXPECT_EQ(r->held_blocks, 7);
  EXPECT_EQ(a->peer_service()->stats().blocks_sent, 3);
  EXPECT_EQ(PinnedBlocks(*a), 0);

  const SyntheticWorkloadStats decode = RunOn(b->unix_socket(), requests);
  EXPECT_EQ(decode.check_failures, 0) << decode.first_error;
  EXPECT_EQ(decode.pool_hit_blocks, 7);
  EXPECT_EQ(decode.remote_hit_blocks, 0);
  b->Shutdown();
  a->Shutdown();
}

// HandOffTo as an operator or a router sends it, with mistakes: it never changes the prefill node's
// member list. A member named with another address is refused (the member's address stands); a
// wrong node id at a member's address fails on the decode node's id and adds no member; the node
// itself is refused; a node that is no member needs its address. A member named without an address
// is reached where membership says. Each failure says which handoff failed.
TEST(HandoffTest, AHandoffRequestNeverChangesTheMemberList) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a");
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(5000, 4);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});  // membership
  NodeClientOptions o;
  o.address = a->unix_socket();
  o.secret = kTestSecret;
  auto client = NodeClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  const auto members_unchanged = [&] {
    const PeerTableStats st = a->peers()->stats();
    EXPECT_EQ(st.members, 1);
    EXPECT_EQ(st.joined, 1);
    EXPECT_EQ(st.left, 0);
    EXPECT_EQ(st.rejoined, 0);
    ASSERT_NE(a->peers()->Find("node-b"), nullptr);
    EXPECT_EQ(a->peers()->Find("node-b")->control_address, b->tcp_address());
  };

  const std::string elsewhere = "127.0.0.1:" + std::to_string(node_test::FreeLoopbackPort());
  Result<rpc::HandoffResponse> moved = (*client)->HandOffTo("node-b", elsewhere, tokens);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), StatusCode::kInvalidArgument) << moved.status();
  EXPECT_NE(
      moved.status().message().find("is a member of this node's cluster at " + b->tcp_address()),
      std::string::npos)
      << moved.status();
  members_unchanged();

  Result<rpc::HandoffResponse> wrong_id = (*client)->HandOffTo("zz", b->tcp_address(), tokens);
  ASSERT_FALSE(wrong_id.ok());
  EXPECT_NE(
      wrong_id.status().message().find("node node-a handing off to zz at " + b->tcp_address()),
      std::string::npos)
      << wrong_id.status();
  EXPECT_EQ(a->peers()->Find("zz"), nullptr);
  members_unchanged();

  Result<rpc::HandoffResponse> self = (*client)->HandOffTo("node-a", a->tcp_address(), tokens);
  ASSERT_FALSE(self.ok());
  EXPECT_EQ(self.status().code(), StatusCode::kInvalidArgument) << self.status();
  EXPECT_NE(self.status().message().find("this node itself"), std::string::npos) << self.status();

  Result<rpc::HandoffResponse> unknown = (*client)->HandOffTo("node-c", "", tokens);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status();
  EXPECT_NE(unknown.status().message().find("give its address"), std::string::npos)
      << unknown.status();
  members_unchanged();

  Result<rpc::HandoffResponse> r = (*client)->HandOffTo("node-b", "", tokens);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->wanted_blocks(), 3);
  EXPECT_EQ(r->held_blocks(), 3);
  Result<rpc::HandoffResponse> again = (*client)->HandOffTo("node-b", b->tcp_address(), tokens);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->had_blocks(), 3);
  members_unchanged();
  client->reset();
  b->Shutdown();
  a->Shutdown();
}

TEST(HandoffTest, SourceBlocksAreUnpinnedWhenTheDecodeNodeDoesNotAnswer) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a");
  ASSERT_NE(a, nullptr);
  std::filesystem::create_directories(dir.path() / "b");
  auto b = KvnodeProcess::Start(dir.path() / "b", PeerConfig(dir.path() / "b", "node-b"));
  ASSERT_TRUE(b.ok()) << b.status();
  const auto warmup = Prompt(3000, 2);
  const auto requests = Prompt(4000, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), warmup).check_failures, 0);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  a->peers()->Upsert({.node_id = "node-b", .control_address = (*b)->tcp_address()});
  // A first handoff opens the link (the handshake); then B stops answering.
  Result<HandoffResult> first =
      a->handoff_sender()->HandOff("node-b", TraceTokens(warmup[0], kBlockTokens),
                                   SequenceOptions{}, std::chrono::milliseconds(5000));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->moved_blocks, 1);
  const pid_t pid = (*b)->process().pid();
  ASSERT_TRUE(node_test::StopProcess(pid));

  std::atomic<std::int64_t> pinned_while_waiting{-1};
  std::thread sampler([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    pinned_while_waiting = PinnedBlocks(*a);
  });
  const auto start = std::chrono::steady_clock::now();
  Result<HandoffResult> r =
      a->handoff_sender()->HandOff("node-b", TraceTokens(requests[0], kBlockTokens),
                                   SequenceOptions{}, std::chrono::milliseconds(1500));
  const auto took = std::chrono::steady_clock::now() - start;
  sampler.join();
  // Counted while B is still stopped: once it goes on, it may still pull the blocks its late
  // request names (A serving them pins them while they are sent).
  const std::int64_t pinned_after = PinnedBlocks(*a);
  ::kill(pid, SIGCONT);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(took, std::chrono::milliseconds(3000));  // the peer request timeout is 2 s
  const auto pools = static_cast<std::int64_t>(a->pools().pools().size());
  EXPECT_EQ(pinned_while_waiting.load(), 7 * pools);  // pinned while the decode node had them
  EXPECT_EQ(pinned_after, 0);                         // and unpinned when the wait ended
  a->Shutdown();
}

// A converting handoff (A in HND to B in NHD) from a holder that lies: B pulls from a lying
// PeerService standing in for A (A's engine and sessions, its own server), which corrupts a payload
// byte of (in the middle, or the last payload byte: what the one-pass converting decode checks
// last, after it has written the rest), or sends another block's bundle for, the first block of
// every fetch. Each bundle is checked as it is decoded and a block that fails is never published,
// so nothing is moved, the handoff answers so, and B's engine computes the prompt with every
// check passing.
void ExpectConvertingHandoffRefusesLies(int corrupt_at, int foreign_at, bool corrupt_last = false) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a", "HND");
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b", "NHD");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(3000, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  node_test::LyingSource liar(a->block_source(), a->peer_service()->codecs(), corrupt_at,
                              foreign_at, /*missing_at=*/-1, corrupt_last);
  PeerService lying(PeerServiceOptions{}, a->peer_sessions(), &liar, a->peer_service()->codecs());
  node_test::PeerOnlyHandler handler(&lying);
  auto server = node_test::StartPeerOnlyServer("node-a", kTestSecret, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  b->peers()->Upsert({.node_id = "node-a", .control_address = (*server)->tcp_address()});
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});

  Result<HandoffResult> r =
      a->handoff_sender()->HandOff("node-b", TraceTokens(requests[0], kBlockTokens),
                                   SequenceOptions{}, std::chrono::milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->wanted_blocks, 7);
  EXPECT_EQ(r->moved_blocks, 0);
  EXPECT_EQ(r->held_blocks, 0);
  EXPECT_EQ(b->handoff_receiver()->stats().converted_blocks, 0);
  EXPECT_GT(lying.stats().blocks_sent, 0);  // the lies did travel
  EXPECT_EQ(PinnedBlocks(*a), 0);
  EXPECT_EQ(PinnedBlocks(*b), 0);
  const SyntheticWorkloadStats decode = RunOn(b->unix_socket(), requests);
  EXPECT_EQ(decode.failed_requests, 0) << decode.first_error;
  EXPECT_EQ(decode.check_failures, 0) << decode.first_error;
  EXPECT_GT(decode.checks, 0);
  EXPECT_EQ(decode.pool_hit_blocks, 0);
  EXPECT_EQ(decode.remote_hit_blocks, 0);
  b->Shutdown();  // before the lying server, as in peer_fetch_test
  (*server)->Stop();
  a->Shutdown();
}

TEST(HandoffTest, ConvertingHandoffRefusesACorruptedBundle) {
  ExpectConvertingHandoffRefusesLies(0, -1);
}

TEST(HandoffTest, ConvertingHandoffRefusesABundleCorruptInItsLastByte) {
  ExpectConvertingHandoffRefusesLies(0, -1, /*corrupt_last=*/true);
}

TEST(HandoffTest, ConvertingHandoffRefusesAnotherBlocksBundle) {
  ExpectConvertingHandoffRefusesLies(-1, 0);
}

// Prefill on one kvnode process, handoff asked of it by a client (HandOffTo, as an engine or a tool
// would), decode on another kvnode process in the other order: every decode step checked.
TEST(HandoffTest, KvnodeProcessesPrefillHereDecodeThere) {
  ScratchDir dir;
  auto prefill = node_test::StartPeerProcess(dir.path() / "p", "prefill-1", "HND");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto decode = node_test::StartPeerProcess(dir.path() / "d", "decode-1", "NHD");
  ASSERT_TRUE(decode.ok()) << decode.status();
  const auto requests = Prompt(6000, 12);
  ASSERT_EQ(RunOn((*prefill)->unix_socket(), requests).check_failures, 0);

  NodeClientOptions o;
  o.address = (*prefill)->unix_socket();
  o.secret = kTestSecret;
  auto client = NodeClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  Result<rpc::HandoffResponse> r = (*client)->HandOffTo("decode-1", (*decode)->tcp_address(),
                                                        TraceTokens(requests[0], kBlockTokens));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->wanted_blocks(), 11);
  EXPECT_EQ(r->had_blocks(), 0);
  EXPECT_EQ(r->moved_blocks(), 11);
  EXPECT_EQ(r->held_blocks(), 11);
  // A second handoff of the same prompt moves nothing.
  Result<rpc::HandoffResponse> again = (*client)->HandOffTo("decode-1", (*decode)->tcp_address(),
                                                            TraceTokens(requests[0], kBlockTokens));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->had_blocks(), 11);
  EXPECT_EQ(again->moved_blocks(), 0);

  const SyntheticWorkloadStats on_decode = RunOn((*decode)->unix_socket(), requests);
  EXPECT_EQ(on_decode.failed_requests, 0) << on_decode.first_error;
  EXPECT_EQ(on_decode.check_failures, 0) << on_decode.first_error;
  EXPECT_GT(on_decode.checks, 0);
  EXPECT_EQ(on_decode.pool_hit_blocks, 11);
  EXPECT_EQ(on_decode.remote_hit_blocks, 0);
}

// kvmesh-synth's disaggregated mode, as an operator runs it: each request of a multi-turn workload
// prefilled on the HND node, handed off to the NHD node, decoded there with every step checked.
// Later turns find their conversation's earlier blocks on the decode node already (had), so only
// the new ones move; every held block is a pool hit of the decode engine. A decode address nobody
// answers at: every handoff fails and says so (exit 1), the decode node computes the prompts
// itself and its checks still pass.
TEST(HandoffTest, KvmeshSynthPrefillsHandsOffAndDecodesEachRequest) {
  ScratchDir dir;
  auto prefill = node_test::StartPeerProcess(dir.path() / "p", "prefill-1", "HND");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto decode = node_test::StartPeerProcess(dir.path() / "d", "decode-1", "NHD");
  ASSERT_TRUE(decode.ok()) << decode.status();
  const auto args = [&](const std::string& decode_address, const std::string& seed) {
    return std::vector<std::string>{"--socket",
                                    (*prefill)->unix_socket(),
                                    "--secret",
                                    kTestSecret,
                                    "--decode-socket",
                                    (*decode)->unix_socket(),
                                    "--decode-node-id",
                                    "decode-1",
                                    "--decode-address",
                                    decode_address,
                                    "--handoff-deadline-ms",
                                    "3000",
                                    "--synthetic",
                                    "--seed",
                                    seed,
                                    "--conversations",
                                    "3",
                                    "--turns",
                                    "3",
                                    "--block-tokens",
                                    std::to_string(kBlockTokens),
                                    "--system-prompts",
                                    "1",
                                    "--system-prompt-blocks",
                                    "2",
                                    "--turn-blocks-max",
                                    "3",
                                    "--decode-tokens",
                                    "2",
                                    "--json"};
  };
  node_test::RunOutput ok = node_test::RunToCompletion(
      node_test::SynthPath(), args((*decode)->tcp_address(), "1"), dir.path() / "synth");
  ASSERT_TRUE(ok.status.exited) << ok.err;
  ASSERT_EQ(ok.status.code, 0) << ok.out << ok.err;
  const nlohmann::json j = nlohmann::json::parse(ok.out);
  EXPECT_EQ(j["schema"], "kvmesh.disaggregated/1");
  EXPECT_EQ(j["decode_node_id"], "decode-1");
  const nlohmann::json& h = j["handoff"];
  EXPECT_EQ(h["answered"], 9);
  EXPECT_EQ(h["failed"], 0);
  EXPECT_GT(h["moved_blocks"].get<std::int64_t>(), 0);
  EXPECT_GT(h["had_blocks"].get<std::int64_t>(), 0);  // later turns: earlier blocks there already
  EXPECT_EQ(h["had_blocks"].get<std::int64_t>() + h["moved_blocks"].get<std::int64_t>(),
            h["wanted_blocks"].get<std::int64_t>());
  EXPECT_EQ(h["held_blocks"], h["wanted_blocks"]);
  const nlohmann::json& d = j["decode"];
  EXPECT_EQ(d["requests"], 9);
  EXPECT_EQ(d["failed_requests"], 0);
  EXPECT_EQ(d["hits"]["pool"], h["held_blocks"]);  // every handed-off block, and only those
  EXPECT_EQ(d["hits"]["remote"], 0);
  EXPECT_GT(d["checks"].get<std::int64_t>(), 0);
  EXPECT_EQ(d["check_failures"], 0) << d["first_error"];
  EXPECT_EQ(j["prefill"]["decode_tokens"], 0);

  // Nobody at the decode address (and other prompts): the handoffs fail, the decode node computes
  // and checks.
  node_test::RunOutput lost = node_test::RunToCompletion(
      node_test::SynthPath(),
      args("127.0.0.1:" + std::to_string(node_test::FreeLoopbackPort()), "2"),
      dir.path() / "synth-lost");
  ASSERT_TRUE(lost.status.exited) << lost.err;
  EXPECT_EQ(lost.status.code, 1) << lost.out << lost.err;
  const nlohmann::json l = nlohmann::json::parse(lost.out);
  EXPECT_EQ(l["handoff"]["answered"], 0);
  EXPECT_EQ(l["handoff"]["failed"], 9);
  EXPECT_NE(l["handoff"]["first_error"].get<std::string>(), "");
  EXPECT_EQ(l["decode"]["check_failures"], 0) << l["decode"]["first_error"];
  EXPECT_GT(l["decode"]["checks"].get<std::int64_t>(), 0);
}

}  // namespace
}  // namespace kvmesh
