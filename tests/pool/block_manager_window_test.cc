// BlockManager with several pools: sliding-window release, window-aware matching, window-only
// models, and the pool-plan adapter (a real plan, with host pool memory).
#include <gtest/gtest.h>

#include "block_manager_test_util.h"
#include "pool/block_manager.h"
#include "pool/block_manager_plan.h"
#include "pool/model_presets.h"
#include "pool/pool_storage.h"

namespace kvmesh {
namespace {

using testing::AddStoreRemove;
using testing::Concat;
using testing::MakeManager;
using testing::Tokens;

constexpr RequestId R(std::uint64_t v) { return RequestId{v}; }

BlockManagerConfig TwoPools(std::int64_t full_blocks, std::int64_t window_blocks,
                            std::int32_t window_tokens) {
  BlockManagerConfig c;
  c.tokens_per_block = 4;
  c.pools = {{"full", full_blocks, 0}, {"sliding", window_blocks, window_tokens}};
  return c;
}

TEST(BlockManagerWindowTest, BlocksLeavingTheWindowAreReleased) {
  auto m = MakeManager(TwoPools(32, 32, 8));
  auto r = m->AddSequence(R(1), Tokens(16));
  ASSERT_TRUE(r.ok());
  for (const auto& t : r->tables) {
    for (std::int32_t b : t.block_ids) EXPECT_GE(b, 0);  // prefill writes every block
  }
  ASSERT_EQ(*m->StoreFullBlocks(R(1)), 4);
  // 16 tokens, window 8: positions 0 and 1 (tokens 0..7) are out of the window.
  auto tables = *m->GetBlockTables(R(1));
  EXPECT_EQ(tables[1].block_ids, (std::vector<std::int32_t>{-1, -1, r->tables[1].block_ids[2],
                                                            r->tables[1].block_ids[3]}));
  EXPECT_EQ(tables[0].block_ids, r->tables[0].block_ids);  // the full pool keeps everything
  BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[1].pinned_blocks, 2);
  EXPECT_EQ(s.pools[1].cached_blocks, 4);
  EXPECT_EQ(s.pools[1].evictable_blocks, 2);  // released but still cached
  EXPECT_EQ(s.pools[0].evictable_blocks, 0);

  auto app = m->AppendTokens(R(1), Tokens(4, 100));  // 20 tokens: position 2 leaves too
  ASSERT_TRUE(app.ok());
  EXPECT_EQ(app->new_blocks[0].size(), 1u);
  EXPECT_EQ(app->new_blocks[1].size(), 1u);
  EXPECT_EQ(app->released_positions[0].size(), 0u);
  EXPECT_EQ(app->released_positions[1], (std::vector<std::int64_t>{2}));
  EXPECT_CONSISTENT(*m);
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());

  // Matching: the full pool reuses blocks 0..2, the window pool only those overlapping the
  // window of the first recomputed token: L = 12, tokens [5, 12) -> positions 1 and 2.
  auto r2 = m->AddSequence(R(2), Tokens(16));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->reused_tokens, 12);
  EXPECT_EQ(r2->tables[0].block_ids[0], r->tables[0].block_ids[0]);
  EXPECT_EQ(r2->tables[1].block_ids[0], -1);
  EXPECT_EQ(r2->tables[1].block_ids[1], r->tables[1].block_ids[1]);
  EXPECT_EQ(r2->tables[1].block_ids[2], r->tables[1].block_ids[2]);
  s = m->GetStats();
  EXPECT_EQ(s.pools[0].reused_blocks, 3u);
  EXPECT_EQ(s.pools[1].reused_blocks, 2u);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerWindowTest, MatchStopsWhereAWindowBlockIsMissing) {
  // Window of 4 tokens (one block), a window pool of 4 blocks.
  auto m = MakeManager(TwoPools(64, 4, 4));
  // Request 1's window blocks: positions 0 and 1 released at store, 2 at removal (in that
  // order of use), and one block still free.
  AddStoreRemove(*m, 1, Tokens(12));
  // A fresh request needs 3 window blocks: the free one, then positions 0 and 1 are evicted.
  ASSERT_TRUE(m->AddSequence(R(2), Tokens(12, 500)).ok());
  EXPECT_EQ(m->GetStats().pools[1].evicted_blocks, 2u);
  EXPECT_EQ(m->GetStats().pools[0].evicted_blocks, 0u);
  ASSERT_TRUE(m->RemoveSequence(R(2)).ok());  // never stored: its blocks are freed
  EXPECT_CONSISTENT(*m);
  // Request 1's positions 0 and 1 lost their window blocks, position 2 kept its own.
  // L = 8 needs position 1's window block (missing), L = 4 needs position 0's: nothing reused.
  EXPECT_EQ(m->LookupPrefix(Tokens(12))->cached_tokens, 0);
  // Block-granular: L = 12 needs only position 2's window block.
  SequenceOptions whole;
  whole.reuse_last_token = true;
  EXPECT_EQ(m->LookupPrefix(Tokens(12), whole)->cached_tokens, 12);
  auto r = m->AddSequence(R(4), Tokens(12), whole);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_tokens, 12);
  EXPECT_EQ(r->tables[1].block_ids[0], -1);
  EXPECT_EQ(r->tables[1].block_ids[1], -1);
  EXPECT_GE(r->tables[1].block_ids[2], 0);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerWindowTest, WindowOnlyModelKeepsInteriorNodesWithoutBlocks) {
  BlockManagerConfig c;
  c.tokens_per_block = 4;
  c.pools = {{"sliding", 6, 4}};
  auto m = MakeManager(c);
  AddStoreRemove(*m, 1, Tokens(16));               // 4 cached window blocks
  auto x = m->AddSequence(R(2), Tokens(16, 500));  // needs 4: 2 free, evicts positions 0 and 1
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(m->GetStats().pools[0].evicted_blocks, 2u);
  EXPECT_EQ(m->GetStats().tree_nodes, 4u);  // nodes 0 and 1 stay as the path to 2 and 3
  EXPECT_CONSISTENT(*m);
  SequenceOptions whole;
  whole.reuse_last_token = true;
  EXPECT_EQ(m->LookupPrefix(Tokens(16), whole)->cached_tokens, 16);
  ASSERT_TRUE(m->RemoveSequence(R(2)).ok());
  // Evicting the rest prunes the blockless path too.
  ASSERT_TRUE(m->AddSequence(R(3), Tokens(24, 900)).ok());
  EXPECT_EQ(m->GetStats().tree_nodes, 0u);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerWindowTest, ConfigFromPoolPlanDrivesAManagerWithHostMemory) {
  auto model = ModelPreset("gpt-oss-20b");  // sliding (128) and full layers
  ASSERT_TRUE(model.ok()) << model.status();
  CacheConfig cache;
  cache.tokens_per_block = 16;
  cache.max_tokens = 256;
  auto plan = BuildPoolPlan(*model, cache, std::int64_t{1} << 30);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const BlockManagerConfig config = FromPoolPlan(*plan);
  ASSERT_EQ(config.pools.size(), plan->pools.size());
  ASSERT_EQ(config.pools.size(), 2u);
  EXPECT_EQ(config.tokens_per_block, 16);
  for (std::size_t p = 0; p < plan->pools.size(); ++p) {
    EXPECT_EQ(config.pools[p].num_blocks, plan->pools[p].num_blocks);
    EXPECT_EQ(config.pools[p].window_tokens, plan->pools[p].key.window);
    EXPECT_EQ(config.pools[p].name, PoolKeyString(plan->pools[p].key));
  }
  EXPECT_EQ(config.key_namespace.model_id, plan->model_name);
  EXPECT_NE(config.key_namespace.pool_group.find('+'), std::string::npos);

  auto storage = PoolStorage::Allocate(PoolMemorySpecs(*plan));
  ASSERT_TRUE(storage.ok()) << storage.status();
  BlockManagerEnv env;
  env.pool_memory = storage->views();
  auto m = MakeManager(config, env);
  ASSERT_TRUE(m->has_pool_memory());
  AddStoreRemove(*m, 1, Tokens(64));
  auto r = m->AddSequence(R(2), Tokens(64));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reused_tokens, 63);  // 3 full blocks + 15 tokens of the claimed last block
  EXPECT_EQ(r->partial, PartialReuse::kClaimed);
  EXPECT_CONSISTENT(*m);
}

}  // namespace
}  // namespace kvmesh
