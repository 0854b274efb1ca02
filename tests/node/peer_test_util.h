// Helpers shared by the peer data path tests (peer_fetch_test, handoff_test): a node config with
// the peer section on (UCX over tcp/lo), a kvnode process of it, a prompt of whole blocks, and one
// synthetic-engine run
// whose dense-reference checks are the tests' proof that fetched or handed-off blocks are right.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "node/synthetic_engine.h"
#include "pool/trace.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {

inline constexpr std::int32_t kPeerBlockTokens = 16;  // TestConfig's tokens_per_block

// TestConfig with peer.enabled, node id `node_id`, pool layout `kv_layout` and the pools on
// `device` (cpu, emulated, cuda:N); KVMESH_TEST_LOG_LEVEL overrides the log level (for debugging a
// test).
inline std::string PeerConfig(const std::filesystem::path& dir, const std::string& node_id,
                              const std::string& kv_layout = "HND",
                              const std::string& device = "cpu") {
  std::string yaml = TestConfig(dir, 4096, "8MiB", "64MiB",
                                "peer:\n  enabled: true\n  ucx_tls: tcp\n  ucx_net_devices: lo\n",
                                "", "  kv_layout: " + kv_layout + "\n");
  const std::string from = "node_id: test-node";
  yaml.replace(yaml.find(from), from.size(), "node_id: " + node_id);
  const std::string cpu = "device: cpu";
  yaml.replace(yaml.find(cpu), cpu.size(), "device: " + device);
  if (const char* level = std::getenv("KVMESH_TEST_LOG_LEVEL"); level != nullptr) {
    const std::string info = "level: info";
    yaml.replace(yaml.find(info), info.size(), std::string("level: ") + level);
  }
  return yaml;
}

// One request of `blocks` whole blocks whose hash ids start at `first`.
// A kvnode process with PeerConfig(dir, node_id, kv_layout, device), in `dir` (created).
inline Result<std::unique_ptr<KvnodeProcess>> StartPeerProcess(const std::filesystem::path& dir,
                                                               const std::string& node_id,
                                                               const std::string& kv_layout,
                                                               const std::string& device = "cpu") {
  std::filesystem::create_directories(dir);
  return KvnodeProcess::Start(dir, PeerConfig(dir, node_id, kv_layout, device));
}

inline std::vector<TraceRequest> Prompt(std::uint64_t first, int blocks) {
  TraceRequest r;
  for (int i = 0; i < blocks; ++i) r.hash_ids.push_back(first + static_cast<std::uint64_t>(i));
  r.input_length = static_cast<std::int64_t>(blocks) * kPeerBlockTokens;
  r.output_length = 2;
  return {r};
}

// The synthetic engine over `requests` on the node at `socket`, every layer checked.
inline SyntheticWorkloadStats RunOn(const std::string& socket,
                                    const std::vector<TraceRequest>& requests) {
  SyntheticEngineOptions o;
  o.client.address = socket;
  o.client.secret = kTestSecret;
  o.concurrency = 1;
  o.block_tokens = kPeerBlockTokens;
  o.decode_tokens = 2;
  o.check_all_layers = true;
  o.report_to_node = false;
  Result<SyntheticWorkloadStats> s = RunSyntheticWorkload(o, requests);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : SyntheticWorkloadStats{};
}

}  // namespace kvmesh::node_test
