// AddSequence with a path hint (RestorePlan::path): the same match as without, whatever the hint —
// current, stale after evictions, or made for another prompt.
#include <gtest/gtest.h>

#include "pool/block_manager.h"
#include "tests/pool/block_manager_test_util.h"

namespace kvmesh {
namespace {

using testing::AddStoreRemove;
using testing::Concat;
using testing::MakeManager;
using testing::OnePoolConfig;
using testing::Tokens;

TEST(BlockManagerHintTest, CurrentHintGivesTheSameMatch) {
  auto m = MakeManager(OnePoolConfig(64));
  const auto p = Tokens(4 * 10 + 1);
  AddStoreRemove(*m, 1, p);
  auto plan = m->PlanRestore(p);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->path.size(), 10u);
  auto hinted = m->AddSequence(RequestId{2}, p, {}, plan->path);
  ASSERT_TRUE(hinted.ok());
  EXPECT_EQ(hinted->reused_tokens, 40);
  const auto tables = hinted->tables;
  ASSERT_TRUE(m->RemoveSequence(RequestId{2}).ok());
  auto plain = m->AddSequence(RequestId{3}, p);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->reused_tokens, 40);
  EXPECT_EQ(plain->tables[0].block_ids, tables[0].block_ids);
  ASSERT_TRUE(m->RemoveSequence(RequestId{3}).ok());
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(BlockManagerHintTest, StaleHintAfterEvictionsFallsBackToLookups) {
  auto m = MakeManager(OnePoolConfig(12));
  const auto p = Tokens(4 * 6 + 1);
  AddStoreRemove(*m, 1, p);
  auto plan = m->PlanRestore(p);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->path.size(), 6u);
  // Other prompts evict p's nodes; their slots are reused by nodes with other tokens.
  AddStoreRemove(*m, 2, Tokens(4 * 11 + 1, 1000));
  auto hinted = m->AddSequence(RequestId{3}, p, {}, plan->path);
  ASSERT_TRUE(hinted.ok());
  EXPECT_LT(hinted->reused_tokens, 24);  // not what the stale hint promised
  ASSERT_TRUE(m->RemoveSequence(RequestId{3}).ok());
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(BlockManagerHintTest, HintOfAnotherPromptNeverMatchesWrongly) {
  auto m = MakeManager(OnePoolConfig(64));
  const auto a = Tokens(4 * 8 + 1);
  const auto b = Concat(Tokens(4 * 3), Tokens(4 * 5 + 1, 500));  // shares 3 blocks with a
  AddStoreRemove(*m, 1, a);
  AddStoreRemove(*m, 2, b);
  auto plan_a = m->PlanRestore(a);
  ASSERT_TRUE(plan_a.ok());
  ASSERT_EQ(plan_a->path.size(), 8u);
  auto r = m->AddSequence(RequestId{3}, b, {}, plan_a->path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reused_tokens, 32);  // b's own 8 blocks, not a's
  auto plain = m->PlanRestore(b);
  ASSERT_TRUE(plain.ok());
  for (std::size_t i = 0; i < 8; ++i) {
    auto info = m->FindBlock(plain->content_ids[i]);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->block_ids[0], r->tables[0].block_ids[i]) << "block " << i;
  }
  ASSERT_TRUE(m->RemoveSequence(RequestId{3}).ok());
}

}  // namespace
}  // namespace kvmesh
