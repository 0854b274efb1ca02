// Helpers shared by the block manager tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "common/clock.h"
#include "pool/block_manager.h"

namespace kvmesh::testing {

// n tokens: first, first+1, ...
inline std::vector<Token> Tokens(int n, Token first = 1) {
  std::vector<Token> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline std::vector<Token> Concat(std::vector<Token> a, const std::vector<Token>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline BlockManagerConfig OnePoolConfig(
    std::int64_t num_blocks, std::int32_t tokens_per_block = 4,
    EvictionPolicyKind policy = EvictionPolicyKind::kPriorityLru) {
  BlockManagerConfig c;
  c.tokens_per_block = tokens_per_block;
  c.pools.push_back(BlockPoolConfig{"full", num_blocks, 0});
  c.key_namespace.model_id = "test-model";
  c.eviction_policy = policy;
  return c;
}

// Records what the eviction hook is told.
class RecordingListener : public EvictionListener {
 public:
  void OnEvict(const EvictedBlock& b) override { evicted.push_back(b); }
  std::vector<EvictedBlock> evicted;
};

inline std::unique_ptr<BlockManager> MakeManager(const BlockManagerConfig& config,
                                                 BlockManagerEnv env = {}) {
  auto m = BlockManager::Create(config, std::move(env));
  KVMESH_CHECK(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

// Adds, stores and removes a prompt; returns the tokens it reused.
inline std::int64_t AddStoreRemove(BlockManager& m, std::uint64_t id,
                                   const std::vector<Token>& prompt,
                                   const SequenceOptions& options = {}) {
  auto r = m.AddSequence(RequestId{id}, prompt, options);
  KVMESH_CHECK(r.ok()) << r.status().ToString();
  KVMESH_CHECK(m.StoreFullBlocks(RequestId{id}).ok());
  KVMESH_CHECK(m.RemoveSequence(RequestId{id}).ok());
  return r->reused_tokens;
}

#define EXPECT_CONSISTENT(m)                           \
  do {                                                 \
    const ::kvmesh::Status s_ = (m).CheckInvariants(); \
    EXPECT_TRUE(s_.ok()) << s_.ToString();             \
  } while (0)

}  // namespace kvmesh::testing
