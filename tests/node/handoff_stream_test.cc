// Prefill -> decode handoff streamed layer by layer (node/handoff.h "Streaming"), between nodes
// on loopback, UCX over tcp/lo:
//   - a running sequence's blocks streamed as its layers are announced: the decode node verifies
//     layer 0 of every block before the rest is announced and publishes nothing until the last
//     layer arrived; then every block is a pool hit with the dense-reference checks passing —
//     HND -> HND (in place), HND -> NHD (converted per range), and with device pools (emulated;
//     a device-pool decode node too gets layer 0 early, each range through staging);
//   - a sender whose ranges are corrupted or of another block: refused, nothing published, no
//     pin or reservation left, the decode side computes and its checks pass;
//   - a prefill engine that stops announcing: at the deadline nothing is published and no pin
//     or reservation is left on either node;
//   - kvmesh-synth --stream-layers over two kvnode processes (HND prefill, NHD decode).
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
#include "node/handoff.h"
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

std::int64_t PrivateBlocks(Node& node) {
  std::int64_t n = 0;
  for (const PoolStats& p : node.cache().manager().GetStats().pools) n += p.private_blocks;
  return n;
}

std::int64_t PublishedBlocks(Node& node, const std::vector<Token>& tokens) {
  Result<RestorePlan> plan = node.cache().manager().PlanRestore(tokens, SequenceOptions{});
  return plan.ok() ? plan->pool_blocks : -1;
}

// Waits up to `limit` for `done()`.
template <typename F>
bool WaitFor(F done, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// What a stream's observer saw: the layers verified per pool after each range.
struct Observed {
  std::mutex mu;
  std::vector<std::vector<std::int32_t>> ranges;
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return ranges.size();
  }
  std::vector<std::int32_t> at(std::size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return ranges.at(i);
  }
  StreamObserver observer() {
    return [this](std::uint64_t, std::span<const std::int32_t> layers) {
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(layers.begin(), layers.end());
    };
  }
};

// A sequence on A holding the prompt's blocks, computed by the synthetic engine first (as a
// prefill engine's running request holds them): what HandOffStream streams.
constexpr RequestId kStreamed{4242};

void ExpectStreamedLayerByLayer(const std::string& from, const std::string& to,
                                const std::string& device_a = "cpu",
                                const std::string& device_b = "cpu") {
  Observed seen;  // outlives the nodes, whose pullers call it
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a", from, device_a);
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b", to, device_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(9000, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});
  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  ASSERT_TRUE(a->cache().manager().AddSequence(kStreamed, tokens).ok());
  b->handoff_receiver()->SetStreamObserver(seen.observer());

  Result<HandoffResult> r = a->handoff_sender()->HandOffStream(
      "node-b", tokens, SequenceOptions{}, kStreamed, std::chrono::milliseconds(10000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->streaming);
  EXPECT_NE(r->handoff_id, 0u);
  EXPECT_EQ(r->wanted_blocks, 7);
  EXPECT_EQ(r->pinned_blocks, 7);
  EXPECT_EQ(r->had_blocks, 0);
  // The engine's sequence goes (its blocks stay pinned by the stream).
  ASSERT_TRUE(a->cache().manager().RemoveSequence(kStreamed).ok());
  EXPECT_GT(PinnedBlocks(*a), 0);
  const std::vector<std::int32_t> layers = a->handoff_sender()->PoolLayers();
  std::vector<std::int32_t> one(layers.size(), 1), half(layers.size());
  for (std::size_t p = 0; p < layers.size(); ++p) half[p] = std::max(1, layers[p] / 2);
  ASSERT_TRUE(a->handoff_sender()->LayersReady(r->handoff_id, one).ok());
  // Layer 0 of every block verified in B's pool (device pools: in the device block) while the rest
  // is not even written...
  ASSERT_TRUE(WaitFor([&] { return seen.size() > 0; }));
  EXPECT_EQ(seen.at(0), one);
  // ...and nothing published before the last layer.
  EXPECT_EQ(PublishedBlocks(*b, tokens), 0);
  EXPECT_EQ(PrivateBlocks(*b), 7 * static_cast<std::int64_t>(layers.size()));  // reserved
  ASSERT_TRUE(a->handoff_sender()->LayersReady(r->handoff_id, half).ok());
  ASSERT_TRUE(a->handoff_sender()->LayersReady(r->handoff_id, layers).ok());
  Result<HandoffResult> done = a->handoff_sender()->AwaitStream(r->handoff_id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->wanted_blocks, 7);
  EXPECT_EQ(done->had_blocks, 0);
  EXPECT_EQ(done->moved_blocks, 7);
  EXPECT_EQ(done->held_blocks, 7);
  ASSERT_GT(seen.size(), 0u);
  EXPECT_EQ(seen.at(seen.size() - 1), layers);
  const StreamReceiverStats st = b->handoff_receiver()->stats().streams;
  EXPECT_EQ(st.streams, 1);
  EXPECT_EQ(st.completed, 1);
  EXPECT_EQ(st.failed, 0);
  EXPECT_EQ(st.moved_blocks, 7);
  EXPECT_EQ(st.ranges, static_cast<std::int64_t>(seen.size()));
  if (from == to) {
    EXPECT_EQ(st.converted, 0);
  } else {
    EXPECT_EQ(st.converted, 7 * static_cast<std::int64_t>(layers.size() * seen.size()));
  }
  EXPECT_TRUE(WaitFor([&] { return PinnedBlocks(*a) == 0; }));  // the answer took the pins
  EXPECT_EQ(PinnedBlocks(*b), 0);
  EXPECT_EQ(PrivateBlocks(*b), 0);
  EXPECT_EQ(a->handoff_sender()->stream_stats().streams_answered, 1);
  // The same on /metrics: B received one streamed handoff of 7 blocks, A's stream was answered.
  const auto on_b = node_test::ScrapeMetrics(*b);
  ASSERT_TRUE(on_b.has_value());
  EXPECT_EQ(node_test::MetricValue(
                *on_b, "kvmesh_handoffs_received_total{mode=\"streamed\",outcome=\"completed\"}"),
            1);
  EXPECT_EQ(
      node_test::MetricValue(*on_b, "kvmesh_handoff_received_blocks_total{mode=\"streamed\"}"), 7);
  const auto on_a = node_test::ScrapeMetrics(*a);
  ASSERT_TRUE(on_a.has_value());
  EXPECT_EQ(
      node_test::MetricValue(*on_a, "kvmesh_handoff_streams_sent_total{outcome=\"answered\"}"), 1);
  EXPECT_EQ(node_test::MetricValue(*on_a, "kvmesh_handoff_streamed_bytes_total"),
            a->handoff_sender()->stream_stats().bytes_served);
  EXPECT_GT(a->handoff_sender()->stream_stats().bytes_served, 0);

  const SyntheticWorkloadStats decode = RunOn(b->unix_socket(), requests);
  EXPECT_EQ(decode.failed_requests, 0) << decode.first_error;
  EXPECT_EQ(decode.check_failures, 0) << decode.first_error;
  EXPECT_GT(decode.checks, 0);
  EXPECT_EQ(decode.pool_hit_blocks, 7);
  EXPECT_EQ(decode.remote_hit_blocks, 0);
  b->Shutdown();
  a->Shutdown();
}

TEST(HandoffStreamTest, LayersStreamHndToHndInPlace) { ExpectStreamedLayerByLayer("HND", "HND"); }

TEST(HandoffStreamTest, LayersStreamHndToNhdConvertedPerRange) {
  ExpectStreamedLayerByLayer("HND", "NHD");
}

TEST(HandoffStreamTest, LayersStreamBetweenDevicePools) {
  ExpectStreamedLayerByLayer("HND", "HND", "emulated", "emulated");
  ExpectStreamedLayerByLayer("HND", "NHD", "emulated", "cpu");
  ExpectStreamedLayerByLayer("NHD", "HND", "cpu", "emulated");
}

// A stream from a sender that lies (a HandoffSender over A's engine and sessions behind its own
// server, whose ranges are corrupted or of another block): B refuses the range, publishes nothing
// and keeps nothing pinned or reserved; its engine computes the prompt, checks passing.
void ExpectStreamRefusesLies(const std::string& to, int corrupt_at, int foreign_at) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a", "HND");
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b", to);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(7000, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  std::vector<LayerRangeCodec> codecs;
  for (const KvPoolView& v : a->pools().views()) {
    codecs.push_back(LayerRangeCodec::Create(v.layout, v.pool_scale).value());
  }
  PoolLayerRangeSource truth(&a->cache().engine(), codecs);
  node_test::LyingLayerSource liar(&truth, codecs, corrupt_at, foreign_at);
  auto lying = std::make_unique<HandoffSender>(&a->cache(), a->peer_sessions(), "", &liar);
  PeerService hello(PeerServiceOptions{}, a->peer_sessions(), a->block_source(),
                    a->peer_service()->codecs());
  node_test::PeerOnlyHandler handler(&hello, lying.get());
  auto server = node_test::StartPeerOnlyServer("node-a", kTestSecret, &handler);
  ASSERT_TRUE(server.ok()) << server.status();
  b->peers()->Upsert({.node_id = "node-a", .control_address = (*server)->tcp_address()});
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});
  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  ASSERT_TRUE(a->cache().manager().AddSequence(kStreamed, tokens).ok());

  Result<HandoffResult> r = lying->HandOffStream("node-b", tokens, SequenceOptions{}, kStreamed,
                                                 std::chrono::milliseconds(10000));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->streaming);
  ASSERT_TRUE(a->cache().manager().RemoveSequence(kStreamed).ok());
  ASSERT_TRUE(lying->LayersReady(r->handoff_id, lying->PoolLayers()).ok());
  Result<HandoffResult> done = lying->AwaitStream(r->handoff_id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->wanted_blocks, 7);
  EXPECT_EQ(done->moved_blocks, 0);
  EXPECT_EQ(done->held_blocks, 0);
  EXPECT_GT(lying->stream_stats().ranges_served, 0);  // the lies did travel
  const StreamReceiverStats st = b->handoff_receiver()->stats().streams;
  EXPECT_EQ(st.refused, 1);
  EXPECT_EQ(st.failed, 1);
  EXPECT_EQ(st.completed, 0);
  const auto on_b = node_test::ScrapeMetrics(*b);
  ASSERT_TRUE(on_b.has_value());
  EXPECT_EQ(node_test::MetricValue(*on_b, "kvmesh_handoff_streams_refused_total"), 1);
  EXPECT_EQ(node_test::MetricValue(
                *on_b, "kvmesh_handoffs_received_total{mode=\"streamed\",outcome=\"failed\"}"),
            1);
  EXPECT_EQ(PublishedBlocks(*b, tokens), 0);
  EXPECT_EQ(PinnedBlocks(*b), 0);
  EXPECT_EQ(PrivateBlocks(*b), 0);
  EXPECT_TRUE(WaitFor([&] { return PinnedBlocks(*a) == 0; }));
  const SyntheticWorkloadStats decode = RunOn(b->unix_socket(), requests);
  EXPECT_EQ(decode.failed_requests, 0) << decode.first_error;
  EXPECT_EQ(decode.check_failures, 0) << decode.first_error;
  EXPECT_GT(decode.checks, 0);
  EXPECT_EQ(decode.pool_hit_blocks, 0);
  b->Shutdown();
  (*server)->Stop();
  lying.reset();
  a->Shutdown();
}

TEST(HandoffStreamTest, ACorruptedRangeIsRefusedInPlace) { ExpectStreamRefusesLies("HND", 2, -1); }

TEST(HandoffStreamTest, AnotherBlocksRangeIsRefusedInPlace) {
  ExpectStreamRefusesLies("HND", -1, 0);
}

TEST(HandoffStreamTest, ACorruptedRangeIsRefusedBeforeItsConversion) {
  ExpectStreamRefusesLies("NHD", 3, -1);
}

// The prefill engine announces one layer and then nothing (it died, or hangs): at the deadline
// the decode node frees its reservation unpublished and the sender's pins go.
// The decode node stores the prompt's first blocks itself (an admission of the same prefix) just
// after the stream planned: the stream plans again and pulls only the blocks after them.
TEST(HandoffStreamTest, BlocksStoredOnTheDecodeNodeAfterThePlanAreNotPulled) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a");
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(9000, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});
  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  ASSERT_TRUE(a->cache().manager().AddSequence(kStreamed, tokens).ok());
  std::atomic<bool> stored = false;
  b->cache().SetAfterPlanForTesting([&] {
    if (!stored) stored = node_test::StoreFirstBlocks(*b, tokens, 2);
  });
  Result<HandoffResult> r = a->handoff_sender()->HandOffStream(
      "node-b", tokens, SequenceOptions{}, kStreamed, std::chrono::milliseconds(10000));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(stored);
  EXPECT_TRUE(r->streaming);
  EXPECT_EQ(r->wanted_blocks, 7);
  EXPECT_EQ(r->had_blocks, 2);
  ASSERT_TRUE(a->cache().manager().RemoveSequence(kStreamed).ok());
  EXPECT_EQ(PrivateBlocks(*b),
            5 * static_cast<std::int64_t>(a->handoff_sender()->PoolLayers().size()));
  ASSERT_TRUE(
      a->handoff_sender()->LayersReady(r->handoff_id, a->handoff_sender()->PoolLayers()).ok());
  Result<HandoffResult> done = a->handoff_sender()->AwaitStream(r->handoff_id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->had_blocks, 2);
  EXPECT_EQ(done->moved_blocks, 5);
  EXPECT_EQ(done->held_blocks, 7);
  b->cache().SetAfterPlanForTesting({});
  EXPECT_EQ(b->handoff_receiver()->stats().streams.moved_blocks, 5);
  EXPECT_EQ(b->cache().stats().restore_duplicates, 0);
  EXPECT_TRUE(WaitFor([&] { return PinnedBlocks(*a) == 0; }));
  EXPECT_EQ(PinnedBlocks(*b), 0);
  EXPECT_EQ(PrivateBlocks(*b), 0);
  b->Shutdown();
  a->Shutdown();
}

TEST(HandoffStreamTest, AnEngineThatStopsAnnouncingLeavesNothingAtTheDeadline) {
  Observed seen;  // outlives the nodes, whose pullers call it
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a");
  std::unique_ptr<Node> b = StartPeerNode(dir.path() / "b", "node-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto requests = Prompt(8000, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  a->peers()->Upsert({.node_id = "node-b", .control_address = b->tcp_address()});
  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  ASSERT_TRUE(a->cache().manager().AddSequence(kStreamed, tokens).ok());
  b->handoff_receiver()->SetStreamObserver(seen.observer());
  const auto start = std::chrono::steady_clock::now();
  Result<HandoffResult> r = a->handoff_sender()->HandOffStream(
      "node-b", tokens, SequenceOptions{}, kStreamed, std::chrono::milliseconds(1500));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->streaming);
  ASSERT_TRUE(a->cache().manager().RemoveSequence(kStreamed).ok());
  const std::vector<std::int32_t> one(a->handoff_sender()->PoolLayers().size(), 1);
  ASSERT_TRUE(a->handoff_sender()->LayersReady(r->handoff_id, one).ok());
  ASSERT_TRUE(WaitFor([&] { return seen.size() > 0; }));
  EXPECT_GT(PinnedBlocks(*a), 0);   // the stream holds the blocks
  EXPECT_GT(PrivateBlocks(*b), 0);  // reserved, hidden
  EXPECT_EQ(PublishedBlocks(*b, tokens), 0);

  // No more layers come.
  ASSERT_TRUE(WaitFor(
      [&] { return PinnedBlocks(*a) == 0 && b->handoff_receiver()->stats().streams.failed == 1; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1400));
  EXPECT_TRUE(WaitFor([&] { return PrivateBlocks(*b) == 0; }));
  EXPECT_EQ(PinnedBlocks(*b), 0);
  EXPECT_EQ(PublishedBlocks(*b, tokens), 0);
  const StreamReceiverStats st = b->handoff_receiver()->stats().streams;
  EXPECT_EQ(st.completed, 0);
  EXPECT_EQ(st.moved_blocks, 0);
  Result<HandoffResult> done = a->handoff_sender()->AwaitStream(r->handoff_id);
  if (done.ok()) {
    EXPECT_EQ(done->moved_blocks, 0);  // the decode node's answer came first: nothing moved
  } else {
    EXPECT_TRUE(done.status().code() == StatusCode::kTimedOut) << done.status();
  }
  const SyntheticWorkloadStats decode = RunOn(b->unix_socket(), requests);
  EXPECT_EQ(decode.check_failures, 0) << decode.first_error;
  EXPECT_EQ(decode.pool_hit_blocks, 0);
  b->Shutdown();
  a->Shutdown();
}

// Remote prefix fetch at admission does not convert: a peer in the other order is not asked.
// The decode node stops (SIGSTOP) after it pulled layer 0: no answer comes, and the sender's pins
// go at the stream's deadline; its engine's next announcement learns that the stream failed.
TEST(HandoffStreamTest, SourceBlocksAreUnpinnedAtTheDeadlineWhenTheDecodeNodeStops) {
  ScratchDir dir;
  std::unique_ptr<Node> a = StartPeerNode(dir.path() / "a", "node-a");
  ASSERT_NE(a, nullptr);
  std::filesystem::create_directories(dir.path() / "b");
  auto b = KvnodeProcess::Start(dir.path() / "b", PeerConfig(dir.path() / "b", "node-b"));
  ASSERT_TRUE(b.ok()) << b.status();
  const auto requests = Prompt(8500, 8);
  ASSERT_EQ(RunOn(a->unix_socket(), requests).check_failures, 0);
  a->peers()->Upsert({.node_id = "node-b", .control_address = (*b)->tcp_address()});
  const std::vector<Token> tokens = TraceTokens(requests[0], kBlockTokens);
  ASSERT_TRUE(a->cache().manager().AddSequence(kStreamed, tokens).ok());
  const auto start = std::chrono::steady_clock::now();
  Result<HandoffResult> r = a->handoff_sender()->HandOffStream(
      "node-b", tokens, SequenceOptions{}, kStreamed, std::chrono::milliseconds(1500));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->streaming);
  ASSERT_TRUE(a->cache().manager().RemoveSequence(kStreamed).ok());
  const std::vector<std::int32_t> layers = a->handoff_sender()->PoolLayers();
  const std::vector<std::int32_t> one(layers.size(), 1);
  ASSERT_TRUE(a->handoff_sender()->LayersReady(r->handoff_id, one).ok());
  ASSERT_TRUE(WaitFor([&] {
    return a->handoff_sender()->stream_stats().ranges_served ==
           7 * static_cast<std::int64_t>(layers.size());
  }));
  const pid_t pid = (*b)->process().pid();
  ASSERT_TRUE(node_test::StopProcess(pid));
  EXPECT_GT(PinnedBlocks(*a), 0);
  const bool unpinned = WaitFor([&] { return PinnedBlocks(*a) == 0; });
  const auto took = std::chrono::steady_clock::now() - start;
  ::kill(pid, SIGCONT);
  ASSERT_TRUE(unpinned);
  EXPECT_GE(took, std::chrono::milliseconds(1400));  // held until the deadline...
  EXPECT_LT(took, std::chrono::milliseconds(3000));  // ...and let go within a second of it
  EXPECT_EQ(a->handoff_sender()->stream_stats().streams_failed, 1);
  const Status late = a->handoff_sender()->LayersReady(r->handoff_id, layers);
  EXPECT_EQ(late.code(), StatusCode::kTimedOut) << late;
  Result<HandoffResult> done = a->handoff_sender()->AwaitStream(r->handoff_id);
  EXPECT_EQ(done.status().code(), StatusCode::kTimedOut) << done.status();
  a->Shutdown();
}

// kvmesh-synth --stream-layers: each request's prefill streams its layers to the decode node (NHD,
// converted per range) as they are written; every decode step there checked.
TEST(HandoffStreamTest, KvmeshSynthStreamsLayersAsPrefillWritesThem) {
  ScratchDir dir;
  auto prefill = node_test::StartPeerProcess(dir.path() / "p", "prefill-1", "HND");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto decode = node_test::StartPeerProcess(dir.path() / "d", "decode-1", "NHD");
  ASSERT_TRUE(decode.ok()) << decode.status();
  const std::vector<std::string> args = {"--socket",
                                         (*prefill)->unix_socket(),
                                         "--secret",
                                         kTestSecret,
                                         "--decode-socket",
                                         (*decode)->unix_socket(),
                                         "--decode-node-id",
                                         "decode-1",
                                         "--decode-address",
                                         (*decode)->tcp_address(),
                                         "--stream-layers",
                                         "--layer-group",
                                         "5",
                                         "--synthetic",
                                         "--seed",
                                         "3",
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
                                         "--check-all-layers",
                                         "--json"};
  node_test::RunOutput ok =
      node_test::RunToCompletion(node_test::SynthPath(), args, dir.path() / "synth");
  ASSERT_TRUE(ok.status.exited) << ok.err;
  ASSERT_EQ(ok.status.code, 0) << ok.out << ok.err;
  const nlohmann::json j = nlohmann::json::parse(ok.out);
  const nlohmann::json& h = j["handoff"];
  EXPECT_EQ(h["streamed"], true);
  EXPECT_EQ(h["answered"], 9);
  EXPECT_EQ(h["failed"], 0);
  EXPECT_GT(h["announcements"].get<std::int64_t>(), 0);
  EXPECT_GT(h["moved_blocks"].get<std::int64_t>(), 0);
  EXPECT_EQ(h["had_blocks"].get<std::int64_t>() + h["moved_blocks"].get<std::int64_t>(),
            h["wanted_blocks"].get<std::int64_t>());
  EXPECT_EQ(h["held_blocks"], h["wanted_blocks"]);
  const nlohmann::json& d = j["decode"];
  EXPECT_EQ(d["requests"], 9);
  EXPECT_EQ(d["failed_requests"], 0);
  EXPECT_EQ(d["hits"]["pool"], h["held_blocks"]);
  EXPECT_EQ(d["hits"]["remote"], 0);
  EXPECT_GT(d["checks"].get<std::int64_t>(), 0);
  EXPECT_EQ(d["check_failures"], 0) << d["first_error"];
  EXPECT_EQ(j["prefill"]["failed_requests"], 0) << j["prefill"]["first_error"];
}

}  // namespace
}  // namespace kvmesh
