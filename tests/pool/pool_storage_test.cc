// PoolStorage: one zeroed, aligned buffer per present component, views with the right bases.
#include "pool/pool_storage.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvmesh {
namespace {

TEST(PoolStorageTest, AllocatesEveryPresentComponent) {
  KvPoolGeometry g;
  g.dtype = KvDtype::kFP8;  // data + per-token-head scales
  g.num_layers = 2;
  g.num_kv_heads = 2;
  g.tokens_per_block = 8;
  g.head_dim = 16;
  auto layout = MakeKvPoolLayout(g);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<PoolMemorySpec> specs{{*layout, 5, 1.0f}, {*layout, 3, 0.5f}};
  auto storage = PoolStorage::Allocate(specs);
  ASSERT_TRUE(storage.ok()) << storage.status();
  ASSERT_EQ(storage->num_pools(), 2);
  const KvPoolView& v = storage->view(1);
  EXPECT_EQ(v.num_blocks, 3);
  EXPECT_EQ(v.pool_scale, 0.5f);
  ASSERT_NE(v.base[0], nullptr);
  ASSERT_NE(v.base[1], nullptr);
  EXPECT_EQ(v.base[2], nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.base[0]) % 4096, 0u);
  EXPECT_EQ(storage->total_bytes(), 8 * layout->BytesPerBlock());
  const std::uint8_t* last = v.BlockBytes(KvComponent::kData, 2);
  for (std::int64_t i = 0; i < layout->data().BytesPerBlock(); ++i) ASSERT_EQ(last[i], 0);
  void* const base = v.base[0];
  PoolStorage moved = std::move(storage).value();
  EXPECT_EQ(moved.view(1).base[0], base);  // views survive a move
}

TEST(PoolStorageTest, RejectsEmptyPools) {
  KvPoolGeometry g;
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.tokens_per_block = 4;
  g.head_dim = 8;
  std::vector<PoolMemorySpec> specs{{*MakeKvPoolLayout(g), 0, 1.0f}};
  EXPECT_TRUE(PoolStorage::Allocate(specs).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvmesh
