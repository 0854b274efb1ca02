// The shutdown flush against a disk tier smaller than what the pool holds: the flush writes the
// most valuable blocks that fit, says how many it left, and that is not a failure — kvnode still
// exits 0 (node/flush.h).
#include <gtest/gtest.h>

#include <algorithm>
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

  // A node started on the same folder finds on disk the blocks of the prompts used last, each a
  // prefix from its first block: the last prompt whole, and so on back until the flushed blocks
  // run out; the first prompt has none.
  auto node = Node::Start(*config);
  ASSERT_TRUE(node.ok()) << node.status();
  std::unique_ptr<NodeClient> c = Connect(**node);
  // The pool matched 255 tokens of the last prompt (its last block in part); a tier restores whole
  // blocks before a prompt's last token, which is always computed: at most 15 blocks of 16.
  EXPECT_EQ(cached_tokens, 255);
  std::int64_t left = r.flushed_blocks;
  for (std::uint32_t i = kPrompts; i-- > 0;) {
    const std::int64_t kept = std::min<std::int64_t>(left, 16);
    left -= kept;
    auto found = c->Lookup(Prompt(i));
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->disk_tokens(), std::min<std::int64_t>(kept, 15) * 16)
        << "prompt " << i << " of " << kPrompts << " (used in that order), " << r.flushed_blocks
        << " blocks flushed";
  }
  c.reset();
  (*node)->Shutdown();
}

}  // namespace
}  // namespace kvmesh::node_test
