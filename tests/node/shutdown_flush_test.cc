// The shutdown flush against a disk tier smaller than what the pool holds: the flush writes the
// most valuable blocks that fit, says how many it left, and that is not a failure — kvnode still
// exits 0 (node/flush.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/check.h"
#include "node/client.h"
#include "node/node.h"
#include "node/node_config.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

// Prompt i of the test: 256 tokens (16 blocks), distinct from every other.
std::vector<Token> Prompt(std::uint32_t i) {
  std::vector<Token> p(256);
  for (std::size_t k = 0; k < p.size(); ++k) p[k] = static_cast<Token>((i * 7919 + k * 31) % 30000);
  return p;
}

constexpr std::uint32_t kPrompts = 14;

// A client of an in-process node, on its Unix socket.
std::unique_ptr<NodeClient> Connect(Node& node) {
  NodeClientOptions o;
  o.address = node.unix_socket();
  o.secret = kTestSecret;
  auto c = NodeClient::Connect(o);
  KVMESH_CHECK(c.ok()) << c.status().ToString();
  return std::move(*c);
}

TEST(ShutdownFlushTest, ADiskTierTooSmallKeepsTheMostRecentlyUsedBlocksWithoutAFailure) {
  // 4096 tokens of 12 KiB: a 48 MiB pool. Fourteen prompts of 256 tokens stored and released in
  // order fill 42 MiB of it with cached blocks; the 16 MiB disk tier holds a fraction of them.
  // The flush writes the most valuable that fit (the prompts used last), says how many it left,
  // and that is not a failure (node/flush.h).
  ScratchDir dir;
  const std::string text = TestConfig(dir.path(), 4096, "", "16MiB");
  auto config = ParseNodeConfig(text, "test");
  ASSERT_TRUE(config.ok()) << config.status();
  ShutdownReport r;
  std::int64_t cached_tokens = 0;  // what the pool holds of the last prompt (a lookup's view)
  {
    auto node = Node::Start(*config);
    ASSERT_TRUE(node.ok()) << node.status();
    std::unique_ptr<NodeClient> c = Connect(**node);
    for (std::uint32_t i = 0; i < kPrompts; ++i) {
      ASSERT_TRUE(c->Admit(i + 1, Prompt(i)).ok());
      ASSERT_TRUE(c->StoreFullBlocks(i + 1).ok());
      ASSERT_TRUE(c->Release(i + 1).ok());
    }
    auto cached = c->Lookup(Prompt(kPrompts - 1));
    ASSERT_TRUE(cached.ok()) << cached.status();
    cached_tokens = cached->pool_tokens();
    c.reset();
    r = (*node)->Shutdown();
  }
  EXPECT_GT(r.flushed_blocks, 0);
  EXPECT_EQ(r.flush_failures, 0);
  EXPECT_GT(r.flush_skipped_full, 0) << r.flushed_blocks << " blocks flushed, none left out";
  EXPECT_EQ(r.flushed_blocks + r.flush_skipped_full, kPrompts * 16);

  // A node started on the same folder finds the last prompt's blocks on disk, the first's not.
  auto node = Node::Start(*config);
  ASSERT_TRUE(node.ok()) << node.status();
  std::unique_ptr<NodeClient> c = Connect(**node);
  auto last = c->Lookup(Prompt(kPrompts - 1));
  ASSERT_TRUE(last.ok()) << last.status();
  // The pool matched 255 tokens (the last block in part); a tier restores whole blocks before the
  // prompt's last token, which is always computed: 15 blocks of 16.
  EXPECT_EQ(cached_tokens, 255);
  EXPECT_EQ(last->disk_tokens(), 240) << "the prompt used last was not kept";
  auto first = c->Lookup(Prompt(0));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->disk_tokens(), 0) << "the prompt used first was kept";
  c.reset();
  (*node)->Shutdown();
}

}  // namespace
}  // namespace kvmesh::node_test
