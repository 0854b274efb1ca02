// A node in this process (Node::Start, real sockets) under concurrent clients: engines admitting,
// storing and releasing overlapping prompts, lookups and status calls, an event subscriber,
// connections opened and dropped mid-request — then a shutdown while they run. Built under TSan
// (label tsan) so that the server's strands, the worker pool and the engine service are checked
// for races; every client sees answers or clean errors, and the node ends with no sequence left.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "node/node.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

std::vector<Token> Prompt(std::uint32_t family, std::uint32_t variant, std::size_t n) {
  std::vector<Token> t(n);
  for (std::size_t i = 0; i < n; ++i) {
    // The first half is shared by a family, the rest differs per variant.
    const std::uint32_t who = i < n / 2 ? family : family * 131 + variant;
    t[i] = static_cast<Token>((who * 2654435761u + i * 977u) % 30000u);
  }
  return t;
}

TEST(NodeConcurrencyTest, ManyClientsAndAShutdownUnderLoad) {
  ScratchDir dir;
  auto config = ParseNodeConfig(
      TestConfig(dir.path(), 2048, "4MiB", "128MiB", "",
                 "  worker_threads: 3\n  io_threads: 2\n  max_inflight_per_connection: 8\n"),
      "test");
  ASSERT_TRUE(config.ok()) << config.status();
  auto node = Node::Start(*config);
  ASSERT_TRUE(node.ok()) << node.status();
  NodeClientOptions o;
  o.address = (*node)->unix_socket();
  o.secret = kTestSecret;
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> ok{0};
  std::atomic<std::int64_t> refused{0};
  std::vector<std::thread> threads;
  for (int e = 0; e < 4; ++e) {
    threads.emplace_back([&, e] {
      auto c = NodeClient::Connect(o);
      if (!c.ok()) return;
      for (std::uint32_t i = 0; !stop.load(); ++i) {
        const auto p = Prompt(i % 5, static_cast<std::uint32_t>(e), 96 + 16 * (i % 4));
        auto a = (*c)->Admit(i + 1, p);
        if (!a.ok()) {
          refused.fetch_add(1);
          if (!(*c)->connected()) return;
          continue;
        }
        ok.fetch_add(1);
        // A full pool refuses some calls (resource_exhausted): the engine goes on; only a closed
        // connection (the shutdown) ends it.
        (*c)->StoreFullBlocks(i + 1).status().IgnoreError();
        const Token t = 7;
        (*c)->AppendTokens(i + 1, {&t, 1}).status().IgnoreError();
        if (i % 3 != 0) (*c)->Release(i + 1).IgnoreError();  // every third left running
        if (!(*c)->connected()) return;
      }
    });
  }
  threads.emplace_back([&] {  // lookups, prefetches and status
    auto c = NodeClient::Connect(o);
    if (!c.ok()) return;
    for (std::uint32_t i = 0; !stop.load(); ++i) {
      const auto p = Prompt(i % 5, 0, 128);
      if (!(*c)->Lookup(p).ok() || !(*c)->Prefetch(p).ok() || !(*c)->GetStatus().ok()) return;
    }
  });
  threads.emplace_back([&] {  // connections dropped with requests in flight
    while (!stop.load()) {
      auto c = NodeClient::Connect(o);
      if (!c.ok()) continue;
      const auto p = Prompt(9, 9, 200);
      rpc::Frame f;
      f.mutable_request()->set_id(1);
      auto* a = f.mutable_request()->mutable_admit();
      a->set_request_id(1);
      a->mutable_tokens()->Add(p.begin(), p.end());
      const std::string bytes = *EncodeFrame(f, 1 << 20);
      (*c)->SendRaw(std::as_bytes(std::span(bytes))).IgnoreError();
    }  // closed at once: the node releases what the admit held
  });
  threads.emplace_back([&] {  // an event subscriber
    auto c = NodeClient::Connect(o);
    if (!c.ok()) return;
    rpc::Frame f;
    f.mutable_request()->set_id(5);
    f.mutable_request()->mutable_subscribe_events()->set_from_seq(1);
    const std::string bytes = *EncodeFrame(f, 1024);
    if (!(*c)->SendRaw(std::as_bytes(std::span(bytes))).ok()) return;
    while (!stop.load()) {
      if (!(*c)->ReadFrame().ok()) return;
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const ShutdownReport r = (*node)->Shutdown();  // while every client is still sending
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_GT(ok.load(), 10);
  EXPECT_GE(r.released_sequences, 1);  // the requests left running
  EXPECT_EQ(r.flush_failures, 0);
}

}  // namespace
}  // namespace kvmesh::node_test
