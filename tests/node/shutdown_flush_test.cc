// The shutdown flush against a disk tier smaller than what the pool holds: the tier fills (its
// puts are refused at the on-disk write limit), the flush stops there and says how many blocks it
// left, and that is not a failure — kvnode still exits 0 (node/flush.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/check.h"
#include "node/client.h"
#include "node/node.h"
#include "node/node_config.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

// One node: fourteen distinct 256-token prompts stored and released (the pool fills with cached
// blocks), then Shutdown with flush_to_disk.
ShutdownReport FillAndShutDown(const ScratchDir& dir) {
  // 4096 tokens of 12 KiB: a 48 MiB pool, of which 42 MiB are flushed, into a 16 MiB disk tier
  // that takes puts up to 80% of that on disk: more than three times what it can hold, so that
  // compactions keeping up with the flush rarely make room for all of it.
  auto config = ParseNodeConfig(TestConfig(dir.path(), 4096, "", "16MiB"), "test");
  KVMESH_CHECK(config.ok()) << config.status().ToString();
  auto node = Node::Start(*config);
  KVMESH_CHECK(node.ok()) << node.status().ToString();
  NodeClientOptions o;
  o.address = (*node)->unix_socket();
  o.secret = kTestSecret;
  auto c = NodeClient::Connect(o);
  KVMESH_CHECK(c.ok()) << c.status().ToString();
  for (std::uint32_t i = 0; i < 14; ++i) {
    std::vector<Token> p(256);
    for (std::size_t k = 0; k < p.size(); ++k)
      p[k] = static_cast<Token>((i * 7919 + k * 31) % 30000);
    KVMESH_CHECK((*c)->Admit(i + 1, p).ok());
    KVMESH_CHECK((*c)->StoreFullBlocks(i + 1).ok());
    KVMESH_CHECK((*c)->Release(i + 1).ok());
  }
  c->reset();
  return (*node)->Shutdown();
}

TEST(ShutdownFlushTest, AFullDiskTierEndsTheFlushWithoutAFailure) {
  // The tier refuses puts only while the files on disk are at its write limit, that is while
  // RocksDB's compactions lag behind the flush's puts (evicted bundles are reclaimed by them). On a
  // loaded machine the flush can be slow enough for them to keep up, and all its blocks then fit
  // through eviction (seen in 1 run of 8 with a build running beside it). So the scenario is run
  // again, in a fresh folder, until the tier was filled (at most 15 times: under ASan 5 runs in a
  // row once all fit, in a clean-clone CI run on the 2-core VM); every run must end without a
  // failure.
  int runs = 0;
  ShutdownReport r;
  while (runs < 15) {
    ScratchDir dir;
    r = FillAndShutDown(dir);
    ++runs;
    EXPECT_GT(r.flushed_blocks, 0) << "run " << runs;
    EXPECT_EQ(r.flush_failures, 0) << "run " << runs;
    if (r.flush_skipped_full > 0) break;
  }
  EXPECT_GT(r.flush_skipped_full, 0) << "in " << runs << " runs the pool's " << r.flushed_blocks
                                     << " flushed blocks all fit: the tier was never filled";
}

}  // namespace
}  // namespace kvmesh::node_test
