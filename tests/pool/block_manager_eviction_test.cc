// BlockManager eviction: priorities, LRU within a priority, plain LRU, retention ranges and
// durations (injected clock), decode priority, pins versus eviction, the tree rule (leaves first,
// no unreachable block), the eviction hook, events and their overflow, unlimited pools.
#include <gtest/gtest.h>

#include "block_manager_test_util.h"
#include "pool/block_manager.h"

namespace kvmesh {
namespace {

using testing::AddStoreRemove;
using testing::Concat;
using testing::MakeManager;
using testing::OnePoolConfig;
using testing::RecordingListener;
using testing::Tokens;

constexpr RequestId R(std::uint64_t v) { return RequestId{v}; }

SequenceOptions Priority(int priority, std::int64_t begin = 0, std::int64_t end = 1 << 20,
                         std::optional<Nanos> duration = {}) {
  SequenceOptions o;
  o.retention = {{begin, end, priority, duration}};
  return o;
}

// The block id each one-block prompt was given, by storing it alone.
std::int32_t StoreOneBlock(BlockManager& m, std::uint64_t id, Token first,
                           const SequenceOptions& o = {}) {
  auto r = m.AddSequence(R(id), Tokens(4, first), o);
  KVMESH_CHECK(r.ok()) << r.status().ToString();
  KVMESH_CHECK(m.StoreFullBlocks(R(id)).ok());
  KVMESH_CHECK(m.RemoveSequence(R(id)).ok());
  return r->tables[0].block_ids[0];
}

std::vector<std::int32_t> EvictedIds(const RecordingListener& l) {
  std::vector<std::int32_t> out;
  for (const EvictedBlock& b : l.evicted) out.push_back(b.block.value);
  return out;
}

TEST(BlockManagerEvictionTest, LowestPriorityFirstThenLeastRecentlyUsed) {
  RecordingListener listener;
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(4), env);
  const std::int32_t a = StoreOneBlock(*m, 1, 100, Priority(50));
  const std::int32_t b = StoreOneBlock(*m, 2, 200, Priority(10));
  const std::int32_t c = StoreOneBlock(*m, 3, 300);  // default 35
  const std::int32_t d = StoreOneBlock(*m, 4, 400, Priority(10));
  const BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].cached_by_priority[10], 2);
  EXPECT_EQ(s.pools[0].cached_by_priority[35], 1);
  EXPECT_EQ(s.pools[0].cached_by_priority[50], 1);
  ASSERT_TRUE(m->AddSequence(R(9), Tokens(16, 1000)).ok());
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{b, d, c, a}));
  EXPECT_EQ(listener.evicted[0].priority, 10);
  EXPECT_EQ(listener.evicted[0].reason, EvictionReason::kEvicted);
  EXPECT_EQ(listener.evicted[3].priority, 50);
  EXPECT_EQ(m->GetStats().pools[0].evicted_blocks, 4u);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerEvictionTest, ReuseRefreshesRecency) {
  RecordingListener listener;
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(3), env);
  const std::int32_t a = StoreOneBlock(*m, 1, 100);
  const std::int32_t b = StoreOneBlock(*m, 2, 200);
  SequenceOptions whole;
  whole.reuse_last_token = true;
  AddStoreRemove(*m, 3, Tokens(4, 100), whole);             // uses a again: b is now the oldest
  ASSERT_TRUE(m->AddSequence(R(9), Tokens(8, 1000)).ok());  // 1 free + 1 eviction
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{b}));
  ASSERT_TRUE(m->AppendTokens(R(9), Tokens(4, 2000)).ok());
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{b, a}));
}

TEST(BlockManagerEvictionTest, PlainLruIgnoresPriorities) {
  RecordingListener listener;
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(4, 4, EvictionPolicyKind::kLru), env);
  const std::int32_t a = StoreOneBlock(*m, 1, 100, Priority(50));
  const std::int32_t b = StoreOneBlock(*m, 2, 200, Priority(10));
  const std::int32_t c = StoreOneBlock(*m, 3, 300);
  const std::int32_t d = StoreOneBlock(*m, 4, 400, Priority(90));
  ASSERT_TRUE(m->AddSequence(R(9), Tokens(16, 1000)).ok());
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{a, b, c, d}));
}

TEST(BlockManagerEvictionTest, DurationsExpireExactlyBackToTheDefault) {
  ManualClock clock;
  RecordingListener listener;
  BlockManagerEnv env;
  env.clock = &clock;
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(3), env);
  const std::int32_t a = StoreOneBlock(*m, 1, 100, Priority(80, 0, 4, std::chrono::seconds(10)));
  const std::int32_t b = StoreOneBlock(*m, 2, 200);
  const std::int32_t c = StoreOneBlock(*m, 3, 300);
  const ContentId a_id = m->PollEvents(1).events[0].content_id;
  auto info = m->FindBlock(a_id);
  EXPECT_EQ(info->priority, 80);
  ASSERT_TRUE(info->priority_expiry.has_value());
  EXPECT_EQ(*info->priority_expiry, clock.Now() + std::chrono::seconds(10));

  clock.Advance(std::chrono::seconds(10) - Nanos(1));
  EXPECT_EQ(m->FindBlock(a_id)->priority, 80);
  ASSERT_TRUE(m->AddSequence(R(10), Tokens(4, 1000)).ok());
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{b}));  // a still 80

  clock.Advance(Nanos(1));  // exactly at the expiry
  EXPECT_EQ(m->FindBlock(a_id)->priority, kDefaultPriority);
  EXPECT_EQ(m->GetStats().pools[0].cached_by_priority[80], 0);
  ASSERT_TRUE(m->AddSequence(R(11), Tokens(4, 2000)).ok());
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{b, a}));  // a is older than c
  (void)c;
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerEvictionTest, RetentionRangesSetBlockPrioritiesAndReuseUpdatesCoveredOnes) {
  auto m = MakeManager(OnePoolConfig(16));
  SequenceOptions o;
  o.retention = {{0, 4, 70, {}}, {6, 7, 20, {}}, {7, 9, 60, {}}};  // block 1 overlaps 20 and 60
  AddStoreRemove(*m, 1, Tokens(12), o);
  const auto events = m->PollEvents(1).events;
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].priority, 70);
  EXPECT_EQ(events[1].priority, 60);  // the highest overlapping range
  EXPECT_EQ(events[2].priority, 60);  // tokens 8..11 overlap [7, 9)
  // Reuse with a range over block 1 only: block 1 takes it, block 0 keeps 70.
  AddStoreRemove(*m, 2, Tokens(12), Priority(5, 4, 8));
  EXPECT_EQ(m->FindBlock(events[0].content_id)->priority, 70);
  EXPECT_EQ(m->FindBlock(events[1].content_id)->priority, 5);
  EXPECT_EQ(m->FindBlock(events[2].content_id)->priority, 60);  // not reused (last token rule)
}

TEST(BlockManagerEvictionTest, DecodeBlocksTakeTheDecodePriority) {
  ManualClock clock;
  BlockManagerEnv env;
  env.clock = &clock;
  auto m = MakeManager(OnePoolConfig(16), env);
  SequenceOptions o;
  o.decode_priority = 90;
  o.decode_duration = std::chrono::seconds(5);
  ASSERT_TRUE(m->AddSequence(R(1), Tokens(3), o).ok());
  auto app = m->AppendTokens(R(1), Tokens(6, 50));
  ASSERT_TRUE(app.ok());
  EXPECT_EQ(app->num_tokens, 9);
  EXPECT_EQ(app->new_blocks[0].size(), 2u);
  EXPECT_EQ(*m->StoreFullBlocks(R(1)), 2);
  const auto events = m->PollEvents(1).events;
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].priority, kDefaultPriority);  // the prompt's block
  EXPECT_EQ(events[1].priority, 90);
  clock.Advance(std::chrono::seconds(5));
  EXPECT_EQ(m->FindBlock(events[1].content_id)->priority, kDefaultPriority);
}

TEST(BlockManagerEvictionTest, PinnedBlocksAreNeverEvicted) {
  auto m = MakeManager(OnePoolConfig(2));
  StoreOneBlock(*m, 1, 100);
  const std::int32_t b = StoreOneBlock(*m, 2, 200);
  const ContentId a_id = m->PollEvents(1).events[0].content_id;
  {
    auto pin = m->PinByContentId(a_id);
    ASSERT_TRUE(pin.ok());
    ASSERT_EQ(pin->size(), 1u);
    const Status s = m->AddSequence(R(3), Tokens(8, 1000)).status();
    EXPECT_TRUE(s.IsResourceExhausted()) << s;
    EXPECT_NE(s.message().find("needs 2 blocks, 0 free, 1 evictable"), std::string::npos) << s;
    auto r = m->AddSequence(R(4), Tokens(4, 2000));  // one block: b goes, a stays
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->tables[0].block_ids[0], b);
    EXPECT_TRUE(m->FindBlock(a_id).ok());
    ASSERT_TRUE(m->RemoveSequence(R(4)).ok());
    EXPECT_CONSISTENT(*m);
  }  // unpinned here
  EXPECT_TRUE(m->AddSequence(R(3), Tokens(8, 1000)).ok());
  EXPECT_TRUE(m->FindBlock(a_id).status().IsNotFound());
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerEvictionTest, SequencePinsOutliveTheSequence) {
  auto m = MakeManager(OnePoolConfig(4));
  ASSERT_TRUE(m->AddSequence(R(1), Tokens(6)).ok());
  auto pins = m->PinSequenceBlocks(R(1));
  ASSERT_TRUE(pins.ok());
  EXPECT_EQ(pins->size(), 2u);
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());
  EXPECT_EQ(m->GetStats().pools[0].free_blocks, 2);  // still held by the transfer
  EXPECT_EQ(m->GetStats().pools[0].private_blocks, 2);
  EXPECT_TRUE(m->AddSequence(R(2), Tokens(12, 100)).status().IsResourceExhausted());
  EXPECT_CONSISTENT(*m);
  pins->Release();
  EXPECT_TRUE(pins->empty());
  EXPECT_EQ(m->GetStats().pools[0].free_blocks, 4);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerEvictionTest, ParentsOutliveTheirChildrenWhateverTheirPriority) {
  RecordingListener listener;
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(4), env);
  SequenceOptions o;
  o.retention = {{0, 8, 10, {}}, {8, 12, 90, {}}};
  auto chain = m->AddSequence(R(1), Tokens(12), o);  // blocks 10 -> 10 -> 90
  ASSERT_TRUE(m->StoreFullBlocks(R(1)).ok());
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());
  const std::int32_t other = StoreOneBlock(*m, 2, 500);  // priority 35, a leaf
  // One block is needed: the only leaves are the 90 block and `other` (35): `other` goes.
  ASSERT_TRUE(m->AddSequence(R(3), Tokens(4, 1000)).ok());
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{other}));
  // Next: the chain's leaf (90) must go before its parents (10): a child without its parent
  // could never be reused, so the priority inversion is by design.
  ASSERT_TRUE(m->AppendTokens(R(3), Tokens(12, 2000)).ok());
  const auto& t = chain->tables[0].block_ids;
  EXPECT_EQ(EvictedIds(listener), (std::vector<std::int32_t>{other, t[2], t[1], t[0]}));
  EXPECT_EQ(m->GetStats().tree_nodes, 0u);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerEvictionTest, EventsFollowTheCacheInOrder) {
  auto m = MakeManager(OnePoolConfig(2));
  AddStoreRemove(*m, 1, Tokens(8));
  ASSERT_TRUE(m->AddSequence(R(2), Tokens(8, 100)).ok());  // evicts both, leaf first
  m->ReportTierChange(PoolId{0}, ContentId{}, KvTier::kPrimary, KvTier::kHost);
  const KvEventBatch batch = m->PollEvents(1);
  EXPECT_FALSE(batch.lost.has_value());
  ASSERT_EQ(batch.events.size(), 5u);
  const auto& e = batch.events;
  for (std::size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i].seq, i + 1);
  EXPECT_EQ(e[0].type, KvEventType::kStored);
  EXPECT_EQ(e[1].type, KvEventType::kStored);
  EXPECT_EQ(e[1].parent_id, e[0].content_id);  // chained
  EXPECT_EQ(e[0].tier, KvTier::kPrimary);
  EXPECT_EQ(e[0].num_tokens, 4);
  EXPECT_EQ(e[2].type, KvEventType::kRemoved);
  EXPECT_EQ(e[2].content_id, e[1].content_id);  // the leaf goes first
  EXPECT_EQ(e[3].content_id, e[0].content_id);
  EXPECT_EQ(e[3].parent_id, e[0].parent_id);
  EXPECT_EQ(e[4].type, KvEventType::kTierChanged);
  EXPECT_EQ(e[4].tier, KvTier::kHost);
  EXPECT_EQ(e[4].previous_tier, KvTier::kPrimary);
  EXPECT_EQ(m->PollEvents(batch.next_seq).events.size(), 0u);
}

TEST(BlockManagerEvictionTest, EventOverflowIsSignalled) {
  BlockManagerConfig c = OnePoolConfig(32);
  c.event_capacity = 4;
  auto m = MakeManager(c);
  AddStoreRemove(*m, 1, Tokens(24));  // 6 stored events
  const KvEventBatch batch = m->PollEvents(1);
  ASSERT_TRUE(batch.lost.has_value());
  EXPECT_EQ(batch.lost->first, 1u);
  EXPECT_EQ(batch.lost->last, 2u);
  ASSERT_EQ(batch.events.size(), 4u);
  EXPECT_EQ(batch.events[0].seq, 3u);
  EXPECT_EQ(m->GetStats().events_overwritten, 2u);
}

TEST(BlockManagerEvictionTest, UnlimitedPoolsNeverEvict) {
  auto m = MakeManager(OnePoolConfig(kUnlimitedBlocks));
  for (std::uint64_t i = 0; i < 200; ++i) AddStoreRemove(*m, i, Tokens(16, 1000 * i));
  const BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].num_blocks, kUnlimitedBlocks);
  EXPECT_EQ(s.pools[0].cached_blocks, 800);
  EXPECT_EQ(s.pools[0].evicted_blocks, 0u);
  SequenceOptions whole;
  whole.reuse_last_token = true;
  EXPECT_EQ(AddStoreRemove(*m, 999, Tokens(16, 1000 * 7), whole), 16);
  EXPECT_CONSISTENT(*m);
}

}  // namespace
}  // namespace kvmesh
