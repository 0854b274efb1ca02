// In-process kvnodes for the peer tests (peer fetch, handoff): a Node started from PeerConfig, and
// what its block manager says about pins.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "node/node.h"
#include "node/node_config.h"
#include "tests/node/node_process.h"
#include "tests/node/peer_test_util.h"

namespace kvmesh::node_test {

// A Node with PeerConfig(dir, id, kv_layout, device); null (and a test failure) when it cannot
// start.
inline std::unique_ptr<Node> StartPeerNode(const std::filesystem::path& dir, const std::string& id,
                                           const std::string& kv_layout = "HND",
                                           const std::string& device = "cpu") {
  Result<NodeConfig> config = ParseNodeConfig(PeerConfig(dir, id, kv_layout, device), "test");
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  Result<std::unique_ptr<Node>> node = Node::Start(*config);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(node).value() : nullptr;
}

// The node's /metrics, scraped over HTTP as Prometheus would; nullopt when it does not answer.
inline std::optional<std::string> ScrapeMetrics(Node& node) {
  const std::string& address = node.metrics_address();
  if (address.empty()) return std::nullopt;
  return HttpGet(std::stoi(address.substr(address.rfind(':') + 1)), "/metrics");
}

// Pinned blocks of every pool of the node (0 once every transfer and sequence let go).
inline std::int64_t PinnedBlocks(Node& node) {
  std::int64_t pinned = 0;
  for (const PoolStats& p : node.cache().manager().GetStats().pools) pinned += p.pinned_blocks;
  return pinned;
}

// Stores the prompt's first `blocks` full blocks in the node's pool, as an admission of that prefix
// would (their bytes are not written: for tests of what is planned and moved, not of content).
inline bool StoreFirstBlocks(Node& node, const std::vector<Token>& tokens, int blocks) {
  BlockManager& m = node.cache().manager();
  const RequestId request{77};
  const std::span<const Token> first(tokens.data(),
                                     static_cast<std::size_t>(blocks) * kPeerBlockTokens + 1);
  return m.AddSequence(request, first).ok() && m.StoreFullBlocks(request).ok() &&
         m.RemoveSequence(request).ok();
}

}  // namespace kvmesh::node_test
