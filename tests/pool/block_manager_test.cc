// BlockManager: reuse (full, last token, early, partial by copy and by claim), isolation of salts,
// LoRA adapters, namespaces and multimodal items, and errors that leave nothing behind.
#include "pool/block_manager.h"

#include <gtest/gtest.h>

#include <cstring>

#include "block_manager_test_util.h"
#include "pool/pool_storage.h"

namespace kvmesh {
namespace {

using testing::AddStoreRemove;
using testing::Concat;
using testing::MakeManager;
using testing::OnePoolConfig;
using testing::Tokens;

constexpr RequestId R(std::uint64_t v) { return RequestId{v}; }

std::vector<ContentId> StoredIds(const BlockManager& m) {
  std::vector<ContentId> out;
  for (const KvEvent& e : m.PollEvents(1, 1 << 20).events) {
    if (e.type == KvEventType::kStored) out.push_back(e.content_id);
  }
  return out;
}

TEST(BlockManagerTest, ReusesStoredPrefix) {
  auto m = MakeManager(OnePoolConfig(16));
  auto r1 = m->AddSequence(R(1), Tokens(10));
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->reused_tokens, 0);
  ASSERT_EQ(r1->tables.size(), 1u);
  ASSERT_EQ(r1->tables[0].block_ids.size(), 3u);
  EXPECT_EQ(*m->StoreFullBlocks(R(1)), 2);  // 10 tokens: two full blocks
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());

  auto r2 = m->AddSequence(R(2), Concat(Tokens(8), Tokens(5, 100)));
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->reused_tokens, 8);
  EXPECT_EQ(r2->reused_blocks, 2);
  EXPECT_EQ(r2->tables[0].block_ids[0], r1->tables[0].block_ids[0]);
  EXPECT_EQ(r2->tables[0].block_ids[1], r1->tables[0].block_ids[1]);
  EXPECT_EQ(r2->tables[0].block_ids.size(), 4u);
  const BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].input_blocks, 7u);
  EXPECT_EQ(s.pools[0].reused_blocks, 2u);
  EXPECT_DOUBLE_EQ(s.pools[0].hit_rate(), 2.0 / 7.0);
  EXPECT_EQ(s.counters.reused_tokens, 8u);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, LastPromptTokenIsRecomputedUnlessBlockGranular) {
  auto m = MakeManager(OnePoolConfig(16));
  AddStoreRemove(*m, 1, Tokens(8));
  EXPECT_EQ(m->LookupPrefix(Tokens(8))->cached_tokens, 4);
  auto r2 = m->AddSequence(R(2), Tokens(8));  // metadata-only: no partial reuse
  EXPECT_EQ(r2->reused_tokens, 4);
  EXPECT_EQ(r2->partial, PartialReuse::kNone);
  SequenceOptions whole;
  whole.reuse_last_token = true;
  EXPECT_EQ(m->LookupPrefix(Tokens(8), whole)->cached_tokens, 8);
  auto r3 = m->AddSequence(R(3), Tokens(8), whole);
  EXPECT_EQ(r3->reused_tokens, 8);
  EXPECT_EQ(r3->reused_blocks, 2);
  // One token: nothing can be reused.
  EXPECT_EQ(m->LookupPrefix(Tokens(1))->cached_tokens, 0);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, BlocksAreReusableOnceStoredWhileTheirRequestRuns) {
  auto m = MakeManager(OnePoolConfig(16));
  auto r1 = m->AddSequence(R(1), Tokens(12));
  ASSERT_TRUE(r1.ok());
  // Not yet computed: nothing to reuse.
  EXPECT_EQ(m->LookupPrefix(Tokens(12))->cached_tokens, 0);
  EXPECT_EQ(*m->StoreFullBlocks(R(1), 8), 2);  // the first 8 tokens are computed
  auto r2 = m->AddSequence(R(2), Tokens(12));
  EXPECT_EQ(r2->reused_tokens, 8);
  EXPECT_EQ(r2->tables[0].block_ids[1], r1->tables[0].block_ids[1]);
  const auto info = m->FindBlock(StoredIds(*m)[1]);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->pins[0], 2u);             // both running requests
  EXPECT_EQ(*m->StoreFullBlocks(R(1)), 1);  // block 2 of request 1
  // Request 2 computed the same block 2; the tree already has it, so its copy stays private.
  EXPECT_EQ(*m->StoreFullBlocks(R(2)), 0);
  ASSERT_TRUE(m->RemoveSequence(R(2)).ok());
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());
  const BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].cached_blocks, 3);
  EXPECT_EQ(s.pools[0].free_blocks, 13);
  EXPECT_CONSISTENT(*m);
}

// A small bf16 pool in host memory: 1 layer, K and V, 1 head, 4 tokens, head_dim 8.
struct MemoryFixture {
  explicit MemoryFixture(std::int64_t blocks) {
    KvPoolGeometry g;
    g.num_layers = 1;
    g.num_kv_heads = 1;
    g.tokens_per_block = 4;
    g.head_dim = 8;
    layout = *MakeKvPoolLayout(g);
    std::vector<PoolMemorySpec> specs{{layout, blocks, 1.0f}};
    storage = std::move(PoolStorage::Allocate(specs)).value();
  }
  // Fills every token of a block with `value` bytes.
  void Fill(std::int32_t block, std::uint8_t value) {
    std::memset(storage.view(0).BlockBytes(KvComponent::kData, block), value,
                layout.data().BytesPerBlock());
  }
  // The first byte of token t (K, head 0) of a block.
  std::uint8_t TokenByte(std::int32_t block, int kv, int t) const {
    return storage.view(0).BlockBytes(KvComponent::kData,
                                      0)[layout.data().ByteOffset(block, 0, kv, 0, t, 0)];
  }
  BlockManagerEnv Env() const {
    BlockManagerEnv env;
    env.pool_memory = storage.views();
    return env;
  }
  KvPoolLayout layout;
  PoolStorage storage;
};

TEST(BlockManagerTest, PartlyMatchingBlockInUseIsCopied) {
  MemoryFixture mem(8);
  auto m = MakeManager(OnePoolConfig(8), mem.Env());
  auto r1 = m->AddSequence(R(1), Tokens(8));
  ASSERT_TRUE(m->StoreFullBlocks(R(1)).ok());
  const std::int32_t src = r1->tables[0].block_ids[1];
  mem.Fill(src, 0x5A);
  // Tokens 5, 6 match the cached block [5, 6, 7, 8]; request 1 still uses it.
  const auto prompt = Concat(Tokens(6), {999, 998});
  EXPECT_EQ(m->LookupPrefix(prompt)->cached_tokens, 6);
  auto r2 = m->AddSequence(R(2), prompt);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->reused_tokens, 6);
  EXPECT_EQ(r2->partial_tokens, 2);
  EXPECT_EQ(r2->partial, PartialReuse::kCopied);
  const std::int32_t dst = r2->tables[0].block_ids[1];
  EXPECT_NE(dst, src);
  for (int kv = 0; kv < 2; ++kv) {
    EXPECT_EQ(mem.TokenByte(dst, kv, 0), 0x5A);
    EXPECT_EQ(mem.TokenByte(dst, kv, 1), 0x5A);
    EXPECT_EQ(mem.TokenByte(dst, kv, 2), 0);  // not copied
    EXPECT_EQ(mem.TokenByte(dst, kv, 3), 0);
  }
  EXPECT_EQ(m->GetStats().pools[0].partial_reused_blocks, 1u);
  EXPECT_CONSISTENT(*m);  // the copy's pins are gone
}

// Pools the host cannot address (device memory) pass their own copy: the manager calls it, not
// cpu::BlockCopy, for copy-on-partial-reuse; a copy that fails leaves the tokens to recompute.
TEST(BlockManagerTest, PartialReuseCopiesThroughTheEnvironmentsBlockCopy) {
  for (const bool fail : {false, true}) {
    MemoryFixture mem(8);
    BlockManagerEnv env = mem.Env();
    std::vector<BlockCopyArgs> calls;
    env.block_copy = [&](const BlockCopyArgs& a) {
      calls.push_back(a);
      if (fail) return Status::CudaError("injected copy failure");
      return cpu::BlockCopy(a, nullptr);
    };
    auto m = MakeManager(OnePoolConfig(8), env);
    auto r1 = m->AddSequence(R(1), Tokens(8));
    ASSERT_TRUE(m->StoreFullBlocks(R(1)).ok());
    const std::int32_t src = r1->tables[0].block_ids[1];
    mem.Fill(src, 0x5A);
    auto r2 = m->AddSequence(R(2), Concat(Tokens(6), {999, 998}));
    ASSERT_TRUE(r2.ok()) << r2.status();
    ASSERT_EQ(calls.size(), 1u) << "fail " << fail;
    EXPECT_EQ(calls[0].num_pairs, 1);
    EXPECT_EQ(calls[0].num_tokens, 2);
    EXPECT_EQ(calls[0].src.base[0], mem.storage.view(0).base[0]);
    const std::int32_t dst = r2->tables[0].block_ids[1];
    if (fail) {
      EXPECT_EQ(r2->reused_tokens, 4);
      EXPECT_EQ(r2->partial, PartialReuse::kNone);
      EXPECT_EQ(mem.TokenByte(dst, 0, 0), 0);
    } else {
      EXPECT_EQ(r2->reused_tokens, 6);
      EXPECT_EQ(r2->partial, PartialReuse::kCopied);
      EXPECT_EQ(mem.TokenByte(dst, 0, 0), 0x5A);
    }
    EXPECT_CONSISTENT(*m);
  }
}

TEST(BlockManagerTest, PartlyMatchingUnusedLeafIsClaimed) {
  MemoryFixture mem(8);
  auto m = MakeManager(OnePoolConfig(8), mem.Env());
  auto r1 = m->AddSequence(R(1), Tokens(8));
  ASSERT_TRUE(m->StoreFullBlocks(R(1)).ok());
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());
  const std::vector<ContentId> ids = StoredIds(*m);
  auto r2 = m->AddSequence(R(2), Concat(Tokens(6), {999, 998}));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->partial, PartialReuse::kClaimed);
  EXPECT_EQ(r2->reused_tokens, 6);
  EXPECT_EQ(r2->tables[0].block_ids[1], r1->tables[0].block_ids[1]);  // the same block, no copy
  EXPECT_TRUE(m->FindBlock(ids[1]).status().IsNotFound());
  const auto events = m->PollEvents(1).events;
  ASSERT_EQ(events.back().type, KvEventType::kRemoved);
  EXPECT_EQ(events.back().content_id, ids[1]);
  EXPECT_EQ(m->GetStats().pools[0].claimed_blocks, 1u);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, FullyCachedPromptReusesAllButTheLastTokenWithMemory) {
  MemoryFixture mem(8);
  auto m = MakeManager(OnePoolConfig(8), mem.Env());
  AddStoreRemove(*m, 1, Tokens(8));
  const std::vector<ContentId> before = StoredIds(*m);
  auto r2 = m->AddSequence(R(2), Tokens(8));
  EXPECT_EQ(r2->reused_tokens, 7);
  EXPECT_EQ(r2->partial, PartialReuse::kClaimed);
  // Recomputing the last token and storing gives back the same block identity.
  EXPECT_EQ(*m->StoreFullBlocks(R(2)), 1);
  const std::vector<ContentId> after = StoredIds(*m);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[2], before[1]);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, PartlyMatchingBlockWithChildrenIsCopied) {
  MemoryFixture mem(8);
  auto m = MakeManager(OnePoolConfig(8), mem.Env());
  AddStoreRemove(*m, 1, Tokens(12));  // blocks 0 -> 1 -> 2, none in use
  auto r2 = m->AddSequence(R(2), Concat(Tokens(6), {999, 998}));
  EXPECT_EQ(r2->partial, PartialReuse::kCopied);  // block 1 has a child: not claimable
  EXPECT_EQ(r2->reused_tokens, 6);
  SequenceOptions no_partial;
  no_partial.allow_partial_reuse = false;
  auto r3 = m->AddSequence(R(3), Concat(Tokens(6), {999, 998}), no_partial);
  EXPECT_EQ(r3->reused_tokens, 4);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, BlockTablesGiveKernelOffsets) {
  MemoryFixture mem(8);
  auto m = MakeManager(OnePoolConfig(8), mem.Env());
  auto r = m->AddSequence(R(1), Tokens(10));
  ASSERT_TRUE(r.ok());
  BlockTable table = r->tables[0];
  table.block_ids.push_back(-1);
  const auto offsets = BlockByteOffsets(table, mem.layout, KvComponent::kData);
  ASSERT_EQ(offsets.size(), 4u);
  const auto* base = static_cast<const std::uint8_t*>(mem.storage.view(0).base[0]);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(base + offsets[i],
              mem.storage.view(0).BlockBytes(KvComponent::kData, table.block_ids[i]));
  }
  EXPECT_EQ(offsets[3], -1);
}

TEST(BlockManagerTest, SaltsAdaptersAndNamespacesNeverShare) {
  auto m = MakeManager(OnePoolConfig(32));
  SequenceOptions a;
  a.domain.salt = "tenant-a";
  AddStoreRemove(*m, 1, Tokens(12), a);
  SequenceOptions b;
  b.domain.salt = "tenant-b";
  EXPECT_EQ(AddStoreRemove(*m, 2, Tokens(12), b), 0);
  SequenceOptions lora = a;
  lora.domain.lora_id = 5;
  EXPECT_EQ(AddStoreRemove(*m, 3, Tokens(12), lora), 0);
  EXPECT_EQ(AddStoreRemove(*m, 4, Tokens(12)), 0);  // no salt
  EXPECT_EQ(AddStoreRemove(*m, 5, Tokens(12), a), 8);
  EXPECT_EQ(AddStoreRemove(*m, 6, Tokens(12), lora), 8);

  // Content ids: equal for equal namespaces (another process), different otherwise.
  auto same = MakeManager(OnePoolConfig(32));
  BlockManagerConfig other_config = OnePoolConfig(32);
  other_config.key_namespace.revision = "v2";
  auto other = MakeManager(other_config);
  AddStoreRemove(*same, 1, Tokens(12), a);
  AddStoreRemove(*other, 1, Tokens(12), a);
  EXPECT_EQ(StoredIds(*same)[0], StoredIds(*m)[0]);
  EXPECT_NE(StoredIds(*other)[0], StoredIds(*m)[0]);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, MultimodalItemsArePartOfTheKey) {
  auto m = MakeManager(OnePoolConfig(32));
  ContentId cat, dog;
  cat.bytes[0] = 1;
  dog.bytes[0] = 2;
  std::vector<Token> prompt(12, 0);  // placeholder tokens
  SequenceOptions with_cat;
  with_cat.multimodal = {{cat, 2, 5}};
  SequenceOptions with_dog;
  with_dog.multimodal = {{dog, 2, 5}};
  SequenceOptions shifted;
  shifted.multimodal = {{cat, 3, 5}};
  AddStoreRemove(*m, 1, prompt, with_cat);
  EXPECT_EQ(AddStoreRemove(*m, 2, prompt, with_dog), 0);
  EXPECT_EQ(AddStoreRemove(*m, 3, prompt, shifted), 0);
  EXPECT_EQ(AddStoreRemove(*m, 4, prompt), 0);
  EXPECT_EQ(AddStoreRemove(*m, 5, prompt, with_cat), 8);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, BadInputIsRejected) {
  auto m = MakeManager(OnePoolConfig(8));
  EXPECT_TRUE(m->AddSequence(R(1), {}).status().IsInvalidArgument());
  SequenceOptions o;
  o.retention = {{0, 4, 101, {}}};
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  o.retention = {{4, 8, 50, {}}, {0, 4, 50, {}}};  // out of order
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  o.retention = {{0, 5, 50, {}}, {4, 8, 50, {}}};  // overlapping
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  o.retention = {{3, 3, 50, {}}};  // empty
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  o.retention = {{0, 4, 50, Nanos(-1)}};
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  // Past kMaxRetentionDuration, clock + duration would overflow the expiry's int64.
  o.retention = {{0, 4, 50, kMaxRetentionDuration + Nanos(1)}};
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  o.retention.clear();
  o.decode_duration = Nanos::max();
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  o.decode_duration.reset();
  o.decode_priority = -1;
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());
  o.decode_priority = kDefaultPriority;
  o.multimodal = {{ContentId{}, 6, 4}};  // past the prompt
  EXPECT_TRUE(m->AddSequence(R(1), Tokens(8), o).status().IsInvalidArgument());

  ASSERT_TRUE(m->AddSequence(R(1), Tokens(8)).ok());
  const Status dup = m->AddSequence(R(1), Tokens(4)).status();
  EXPECT_TRUE(dup.IsInvalidArgument()) << dup;
  EXPECT_NE(dup.message().find("already running"), std::string::npos);
  EXPECT_TRUE(m->StoreFullBlocks(R(1), 9).status().IsInvalidArgument());
  EXPECT_TRUE(m->AppendTokens(R(1), {}).status().IsInvalidArgument());
  EXPECT_TRUE(m->AppendTokens(R(9), Tokens(1)).status().IsNotFound());
  EXPECT_TRUE(m->StoreFullBlocks(R(9)).status().IsNotFound());
  EXPECT_TRUE(m->RemoveSequence(R(9)).IsNotFound());
  EXPECT_TRUE(m->GetBlockTables(R(9)).status().IsNotFound());
  EXPECT_TRUE(m->PinSequenceBlocks(R(9)).status().IsNotFound());
  EXPECT_TRUE(m->PinByContentId(ContentId{}).status().IsNotFound());
  EXPECT_EQ(m->num_sequences(), 1);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerTest, CreateValidatesConfig) {
  BlockManagerConfig c = OnePoolConfig(8, 3);
  EXPECT_TRUE(BlockManager::Create(c).status().IsInvalidArgument());
  c = OnePoolConfig(0);
  EXPECT_TRUE(BlockManager::Create(c).status().IsInvalidArgument());
  c = OnePoolConfig(8);
  c.pools.clear();
  EXPECT_TRUE(BlockManager::Create(c).status().IsInvalidArgument());
  c = OnePoolConfig(8);
  c.key_namespace.tokens_per_block = 8;
  EXPECT_TRUE(BlockManager::Create(c).status().IsInvalidArgument());
  c = OnePoolConfig(kUnlimitedBlocks);
  MemoryFixture mem(8);
  EXPECT_TRUE(BlockManager::Create(c, mem.Env()).status().IsInvalidArgument());
  c = OnePoolConfig(16);  // more blocks than the memory holds
  EXPECT_TRUE(BlockManager::Create(c, mem.Env()).status().IsInvalidArgument());
  c = OnePoolConfig(8, 8);  // tokens_per_block differs from the memory's 4
  EXPECT_TRUE(BlockManager::Create(c, mem.Env()).status().IsInvalidArgument());
}

// A snapshot of everything observable that a failed call must not change.
struct Snapshot {
  explicit Snapshot(const BlockManager& m) : stats(m.GetStats()) {}
  bool operator==(const Snapshot& o) const {
    for (std::size_t p = 0; p < stats.pools.size(); ++p) {
      const PoolStats& a = stats.pools[p];
      const PoolStats& b = o.stats.pools[p];
      if (a.free_blocks != b.free_blocks || a.cached_blocks != b.cached_blocks ||
          a.pinned_blocks != b.pinned_blocks || a.evictable_blocks != b.evictable_blocks ||
          a.cached_by_priority != b.cached_by_priority || a.evicted_blocks != b.evicted_blocks ||
          a.input_blocks != b.input_blocks || a.reused_blocks != b.reused_blocks) {
        return false;
      }
    }
    return stats.running_sequences == o.stats.running_sequences &&
           stats.tree_nodes == o.stats.tree_nodes && stats.last_event_seq == o.stats.last_event_seq;
  }
  BlockManagerStats stats;
};

TEST(BlockManagerTest, ExhaustionGivesNumbersAndLeavesEverythingAsBefore) {
  // Two managers see the same calls, except that `m` also gets the failing ones; afterwards both
  // must evict the same blocks in the same order.
  auto m = MakeManager(OnePoolConfig(6));
  auto twin = MakeManager(OnePoolConfig(6));
  for (BlockManager* x : {m.get(), twin.get()}) {
    AddStoreRemove(*x, 1, Tokens(8));                       // 2 cached blocks
    AddStoreRemove(*x, 2, Tokens(8, 50));                   // 2 more
    ASSERT_TRUE(x->AddSequence(R(3), Tokens(6, 90)).ok());  // 2 private, running
  }
  const Snapshot before(*m);
  SequenceOptions salted;
  salted.domain.salt = "new-domain";  // a root that must not survive the failure
  const Status s = m->AddSequence(R(4), Concat(Tokens(8), Tokens(16, 200)), salted).status();
  EXPECT_TRUE(s.IsResourceExhausted()) << s;
  // Shares the two blocks of the first prompt (pinned first, so no longer evictable) and needs 4
  // more: none free, 2 evictable (the second prompt's).
  const Status shared = m->AddSequence(R(4), Concat(Tokens(8), Tokens(16, 200))).status();
  ASSERT_TRUE(shared.IsResourceExhausted()) << shared;
  EXPECT_NE(shared.message().find("pool 0 (full) needs 4 blocks, 0 free, 2 evictable"),
            std::string::npos)
      << shared;
  EXPECT_TRUE(m->AppendTokens(R(3), Tokens(40)).status().IsResourceExhausted());
  EXPECT_EQ(*m->SequenceLength(R(3)), 6);
  EXPECT_TRUE(Snapshot(*m) == before);
  EXPECT_EQ(m->GetStats().counters.admissions_failed, 2u);
  EXPECT_CONSISTENT(*m);

  for (BlockManager* x : {m.get(), twin.get()}) {
    ASSERT_TRUE(x->AddSequence(R(5), Tokens(16, 300)).ok());  // evicts all four cached blocks
  }
  const auto em = m->PollEvents(1).events;
  const auto et = twin->PollEvents(1).events;
  ASSERT_EQ(em.size(), et.size());
  for (std::size_t i = 0; i < em.size(); ++i) {
    EXPECT_EQ(em[i].type, et[i].type);
    EXPECT_EQ(em[i].content_id, et[i].content_id);
  }
}

}  // namespace
}  // namespace kvmesh
