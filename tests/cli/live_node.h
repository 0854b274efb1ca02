// For the tests of kvctl's live commands: a real kvnode (tests/node/node_process.h), the kvctl
// connection flags for it, and an engine that writes real K/V into its pools through the engine
// API, AttachedPools and the append kernel (any pool: K/V, quantised, MLA latent).
//
// Not thread-safe, except LiveEngine objects used from one thread each.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/attached_pools.h"
#include "node/client.h"
#include "tests/node/node_process.h"

namespace kvmesh::cli_test {

// --node (TCP) and --secret of the node.
std::vector<std::string> NodeFlags(const node_test::KvnodeProcess& node);
// `args` followed by NodeFlags(node).
std::vector<std::string> Kvctl(const node_test::KvnodeProcess& node, std::vector<std::string> args);

std::vector<Token> TestPrompt(std::uint32_t seed, std::size_t n);

// An attached engine: Admit, K/V of every new position of every layer of every pool written with
// the append kernel (values a pure function of the sequence's seed, position, layer, head, dim),
// StoreFullBlocks, Release.
class LiveEngine {
 public:
  static Result<std::unique_ptr<LiveEngine>> Attach(const node_test::KvnodeProcess& node,
                                                    const std::string& name = "live-engine");
  // Returns the reused tokens.
  Result<std::int64_t> Run(std::uint64_t request_id, const std::vector<Token>& prompt,
                           const SequenceOptions& options = {});
  NodeClient& client() { return *client_; }
  const AttachedPools& pools() const { return pools_; }

 private:
  LiveEngine(std::unique_ptr<NodeClient> c, AttachedPools p)
      : client_(std::move(c)), pools_(std::move(p)) {}
  Status Write(const std::vector<BlockTable>& tables, std::int64_t begin, std::int64_t end,
               std::uint64_t seed);

  std::unique_ptr<NodeClient> client_;
  AttachedPools pools_;
};

}  // namespace kvmesh::cli_test
