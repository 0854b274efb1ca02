// PendingContentIds: the ids a sequence's unstored full blocks will be stored under, computed
// before the blocks are (the tiers look them up), and the ids StoreFullBlocks then stores them
// under.
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

// The ids PlanRestore computes for `prompt` (its own hashing, not the sequence's).
std::vector<ContentId> PlannedIds(BlockManager& m, const std::vector<Token>& prompt,
                                  const SequenceOptions& options) {
  auto plan = m.PlanRestore(prompt, options);
  KVMESH_CHECK(plan.ok()) << plan.status().ToString();
  return plan->content_ids;
}

// Checks that every id of `ids` names the cached block at position from + k of `table`.
void ExpectStoredUnder(const BlockManager& m, const std::vector<ContentId>& ids,
                       const BlockTable& table, std::size_t from) {
  for (std::size_t k = 0; k < ids.size(); ++k) {
    auto info = m.FindBlock(ids[k]);
    ASSERT_TRUE(info.ok()) << "block " << from + k << ": " << info.status().ToString();
    EXPECT_EQ(info->block_ids[0], table.block_ids[from + k]) << "block " << from + k;
  }
}

TEST(BlockManagerPendingIdsTest, IdsOfTheBlocksAfterTheReusedPrefixAreTheIdsTheyAreStoredUnder) {
  auto m = MakeManager(OnePoolConfig(64));
  const auto shared = Tokens(4 * 3);
  AddStoreRemove(*m, 1, Concat(shared, Tokens(4 * 2 + 1, 900)));
  const auto p = Concat(shared, Tokens(4 * 5 + 1, 500));  // 3 blocks reused, 5 new full blocks
  auto added = m->AddSequence(RequestId{2}, p);
  ASSERT_TRUE(added.ok());
  ASSERT_EQ(added->reused_blocks, 3);
  std::vector<ContentId> ids{ContentId{}};  // cleared by the call
  ASSERT_TRUE(m->PendingContentIds(RequestId{2}, &ids).ok());
  ASSERT_EQ(ids.size(), 5u);
  const std::vector<ContentId> planned = PlannedIds(*m, p, {});
  ASSERT_EQ(planned.size(), 8u);
  EXPECT_EQ(ids, std::vector<ContentId>(planned.begin() + 3, planned.end()));
  // A second call gives the same ids (kept, not computed again).
  std::vector<ContentId> again;
  ASSERT_TRUE(m->PendingContentIds(RequestId{2}, &again).ok());
  EXPECT_EQ(again, ids);
  ASSERT_EQ(m->StoreFullBlocks(RequestId{2}).value(), 5);
  ExpectStoredUnder(*m, ids, added->tables[0], 3);
  // Nothing is pending once every full block is stored.
  ASSERT_TRUE(m->PendingContentIds(RequestId{2}, &again).ok());
  EXPECT_TRUE(again.empty());
  ASSERT_TRUE(m->RemoveSequence(RequestId{2}).ok());
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerPendingIdsTest, PartlyStoredSequenceGivesTheRestAndStoresThemUnderTheirIds) {
  auto m = MakeManager(OnePoolConfig(64));
  const auto p = Tokens(4 * 6 + 1);
  auto added = m->AddSequence(RequestId{1}, p);
  ASSERT_TRUE(added.ok());
  std::vector<ContentId> all;
  ASSERT_TRUE(m->PendingContentIds(RequestId{1}, &all).ok());
  ASSERT_EQ(all.size(), 6u);
  ASSERT_EQ(m->StoreFullBlocks(RequestId{1}, 4 * 2).value(), 2);
  std::vector<ContentId> rest;
  ASSERT_TRUE(m->PendingContentIds(RequestId{1}, &rest).ok());
  EXPECT_EQ(rest, std::vector<ContentId>(all.begin() + 2, all.end()));
  // Appended tokens complete another block: it is pending too, after the prompt's.
  auto appended = m->AppendTokens(RequestId{1}, Tokens(3, 7000));
  ASSERT_TRUE(appended.ok());
  ASSERT_TRUE(m->PendingContentIds(RequestId{1}, &rest).ok());
  ASSERT_EQ(rest.size(), 5u);
  EXPECT_EQ(std::vector<ContentId>(rest.begin(), rest.begin() + 4),
            std::vector<ContentId>(all.begin() + 2, all.end()));
  ASSERT_EQ(m->StoreFullBlocks(RequestId{1}).value(), 5);
  auto tables = m->GetBlockTables(RequestId{1});
  ASSERT_TRUE(tables.ok());
  ExpectStoredUnder(*m, rest, (*tables)[0], 2);
  ASSERT_TRUE(m->RemoveSequence(RequestId{1}).ok());
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerPendingIdsTest, SaltAndMultimodalItemsAreInTheIds) {
  auto m = MakeManager(OnePoolConfig(64));
  const auto p = Tokens(4 * 5 + 1);
  SequenceOptions o;
  o.domain.salt = "tenant-a";
  ContentId image;
  image.bytes[0] = 7;
  o.multimodal.push_back(MultimodalItem{image, 5, 6});  // in blocks 1 and 2
  auto added = m->AddSequence(RequestId{1}, p, o);
  ASSERT_TRUE(added.ok());
  std::vector<ContentId> ids;
  ASSERT_TRUE(m->PendingContentIds(RequestId{1}, &ids).ok());
  EXPECT_EQ(ids, PlannedIds(*m, p, o));
  const std::vector<ContentId> plain = PlannedIds(*m, p, {});
  ASSERT_EQ(plain.size(), ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) EXPECT_NE(ids[k], plain[k]) << "block " << k;
  ASSERT_EQ(m->StoreFullBlocks(RequestId{1}).value(), 5);
  ExpectStoredUnder(*m, ids, added->tables[0], 0);
  ASSERT_TRUE(m->RemoveSequence(RequestId{1}).ok());
}

TEST(BlockManagerPendingIdsTest, UnknownRequestIsNotFound) {
  auto m = MakeManager(OnePoolConfig(8));
  std::vector<ContentId> ids{ContentId{}};
  EXPECT_EQ(m->PendingContentIds(RequestId{9}, &ids).code(), StatusCode::kNotFound);
  EXPECT_TRUE(ids.empty());
}

}  // namespace
}  // namespace kvmesh
