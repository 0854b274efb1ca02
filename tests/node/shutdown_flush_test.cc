// The shutdown flush against a disk tier smaller than what the pool holds: the tier fills (its
// puts are refused at the on-disk write limit), the flush stops there and says how many blocks it
// left, and that is not a failure — kvnode still exits 0 (node/flush.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "node/client.h"
#include "node/node.h"
#include "node/node_config.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

TEST(ShutdownFlushTest, AFullDiskTierEndsTheFlushWithoutAFailure) {
  ScratchDir dir;
  // 2048 tokens of 12 KiB: a 24 MiB pool; a 16 MiB disk tier takes puts up to 80% of that on disk.
  auto config = ParseNodeConfig(TestConfig(dir.path(), 2048, "", "16MiB"), "test");
  ASSERT_TRUE(config.ok()) << config.status();
  auto node = Node::Start(*config);
  ASSERT_TRUE(node.ok()) << node.status();
  NodeClientOptions o;
  o.address = (*node)->unix_socket();
  o.secret = kTestSecret;
  auto c = NodeClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  // Distinct 256-token prompts, stored and released: the pool fills with cached blocks.
  for (std::uint32_t i = 0; i < 7; ++i) {
    std::vector<Token> p(256);
    for (std::size_t k = 0; k < p.size(); ++k)
      p[k] = static_cast<Token>((i * 7919 + k * 31) % 30000);
    ASSERT_TRUE((*c)->Admit(i + 1, p).ok());
    ASSERT_TRUE((*c)->StoreFullBlocks(i + 1).ok());
    ASSERT_TRUE((*c)->Release(i + 1).ok());
  }
  c->reset();
  const ShutdownReport r = (*node)->Shutdown();
  EXPECT_GT(r.flushed_blocks, 0);
  EXPECT_GT(r.flush_skipped_full, 0)
      << "the pool's " << r.flushed_blocks << " flushed blocks all fit: the tier was not filled";
  EXPECT_EQ(r.flush_failures, 0);
}

}  // namespace
}  // namespace kvmesh::node_test
