// Offsets of PagedTensorLayout against an independent element-by-element walk, for every component
// of small pools in both orders, plus the HND <-> NHD permutation round trip.
#include "kernels/paged_kv_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace kvmesh {
namespace {

// Visits every element of a 6-D component in memory order (the order the shape is written in),
// handing out consecutive offsets: the walk knows nothing of strides.
template <typename Fn>
void WalkInMemoryOrder(const PagedTensorLayout& t, int blocks, Fn fn) {
  std::int64_t next = 0;
  for (int b = 0; b < blocks; ++b)
    for (int l = 0; l < t.num_layers; ++l)
      for (int kv = 0; kv < t.kv_factor; ++kv)
        if (t.order == KvLayout::kHND) {
          for (int h = 0; h < t.num_heads; ++h)
            for (int tok = 0; tok < t.tokens_per_block; ++tok)
              for (int d = 0; d < t.inner; ++d) fn(b, l, kv, h, tok, d, next++);
        } else {
          for (int tok = 0; tok < t.tokens_per_block; ++tok)
            for (int h = 0; h < t.num_heads; ++h)
              for (int d = 0; d < t.inner; ++d) fn(b, l, kv, h, tok, d, next++);
        }
}

std::vector<KvPoolGeometry> SmallGeometries() {
  std::vector<KvPoolGeometry> out;
  for (KvLayout order : {KvLayout::kHND, KvLayout::kNHD}) {
    for (KvDtype dtype :
         {KvDtype::kBF16, KvDtype::kFP8, KvDtype::kFP8PerTensor, KvDtype::kINT8, KvDtype::kNVFP4}) {
      KvPoolGeometry g;
      g.dtype = dtype;
      g.layout = order;
      g.num_layers = 3;
      g.kv_factor = 2;
      g.num_kv_heads = 3;
      g.tokens_per_block = 4;
      g.head_dim = 32;
      out.push_back(g);
      // MLA-like: kv_factor 1, one head, with an indexer on 2 of the layers.
      g.kv_factor = 1;
      g.num_kv_heads = 1;
      g.head_dim = 48;
      g.index_layers = 2;
      g.index_head_dim = 16;
      g.index_quant_block = 8;
      g.index_fp4 = (dtype == KvDtype::kNVFP4);
      out.push_back(g);
    }
  }
  return out;
}

TEST(PagedKvLayoutTest, OffsetsMatchAnIndependentWalk) {
  for (const KvPoolGeometry& g : SmallGeometries()) {
    auto layout = MakeKvPoolLayout(g);
    ASSERT_TRUE(layout.ok()) << layout.status();
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& t = layout->components[c];
      if (!t.present()) continue;
      std::int64_t count = 0;
      WalkInMemoryOrder(
          t, 3, [&](int b, int l, int kv, int h, int tok, int d, std::int64_t expected) {
            ASSERT_EQ(t.ElementOffset(b, l, kv, h, tok, d), expected)
                << "component " << KvComponentName(static_cast<KvComponent>(c)) << " order "
                << KvLayoutName(t.order) << " dtype " << KvDtypeName(g.dtype);
            ASSERT_EQ(t.ByteOffset(b, l, kv, h, tok, d), expected * t.bits / 8);
            ++count;
          });
      EXPECT_EQ(count, 3 * t.BlockStride());
      EXPECT_EQ(t.BytesPerBlock() * 8, t.BlockStride() * t.bits);
    }
  }
}

TEST(PagedKvLayoutTest, StridesAsDocumented) {
  KvPoolGeometry g;
  g.num_layers = 32;
  g.num_kv_heads = 8;
  g.tokens_per_block = 64;
  g.head_dim = 128;
  auto hnd = MakeKvPoolLayout(g);
  ASSERT_TRUE(hnd.ok());
  EXPECT_EQ(hnd->data().TokenStride(), 128);
  EXPECT_EQ(hnd->data().HeadStride(), 64 * 128);
  g.layout = KvLayout::kNHD;
  auto nhd = MakeKvPoolLayout(g);
  ASSERT_TRUE(nhd.ok());
  EXPECT_EQ(nhd->data().TokenStride(), 8 * 128);
  EXPECT_EQ(nhd->data().HeadStride(), 128);
  // Next block is the same in both orders; Llama-3-8B BF16 at 64 tokens is 8 MiB a block.
  EXPECT_EQ(hnd->data().BlockStride(), 32LL * 2 * 8 * 64 * 128);
  EXPECT_EQ(nhd->data().BlockStride(), hnd->data().BlockStride());
  EXPECT_EQ(hnd->BytesPerBlock(), 8LL << 20);
}

TEST(PagedKvLayoutTest, Nvfp4HeadIs64BytesPlus8Scales) {
  KvPoolGeometry g;
  g.dtype = KvDtype::kNVFP4;
  g.num_layers = 1;
  g.kv_factor = 1;
  g.num_kv_heads = 1;
  g.tokens_per_block = 2;
  g.head_dim = 128;
  auto l = MakeKvPoolLayout(g);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->data().RowBytes(), 64);
  EXPECT_EQ(l->scale().inner, 8);
  EXPECT_EQ(l->scale().RowBytes(), 8);
  // Element 1 of a row is the high nibble of byte 0; element 2 starts byte 1.
  EXPECT_EQ(l->data().ElementOffset(0, 0, 0, 0, 1, 1), 129);
  EXPECT_EQ(l->data().ByteOffset(0, 0, 0, 0, 1, 1), 64);
  EXPECT_EQ(l->data().ByteOffset(0, 0, 0, 0, 1, 2), 65);
}

TEST(PagedKvLayoutTest, PermutationRoundTripEveryComponent) {
  for (const KvPoolGeometry& g : SmallGeometries()) {
    if (g.layout != KvLayout::kHND) continue;
    auto hnd = MakeKvPoolLayout(g);
    ASSERT_TRUE(hnd.ok());
    const KvPoolLayout nhd = WithOrder(*hnd, KvLayout::kNHD);
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& a = hnd->components[c];
      const PagedTensorLayout& b = nhd.components[c];
      if (!a.present()) continue;
      const int blocks = 2;
      const std::int64_t n = blocks * a.BlockStride();
      std::vector<std::uint32_t> src(n), mid(n, 0xFFFFFFFF), back(n, 0xFFFFFFFF);
      for (std::int64_t i = 0; i < n; ++i) src[i] = static_cast<std::uint32_t>(i * 2654435761u);
      // HND -> NHD through the offsets of both, then back.
      WalkInMemoryOrder(a, blocks, [&](int bl, int l, int kv, int h, int t, int d, std::int64_t) {
        mid[b.ElementOffset(bl, l, kv, h, t, d)] = src[a.ElementOffset(bl, l, kv, h, t, d)];
      });
      WalkInMemoryOrder(b, blocks, [&](int bl, int l, int kv, int h, int t, int d, std::int64_t) {
        back[a.ElementOffset(bl, l, kv, h, t, d)] = mid[b.ElementOffset(bl, l, kv, h, t, d)];
      });
      EXPECT_EQ(back, src);
      // The permutation is not the identity whenever there is more than one head and one token.
      if (a.num_heads > 1) {
        EXPECT_NE(mid, src);
      }
    }
  }
}

TEST(PagedKvLayoutTest, WithOrderEqualsBuildingInThatOrder) {
  for (KvPoolGeometry g : SmallGeometries()) {
    auto built = MakeKvPoolLayout(g);
    ASSERT_TRUE(built.ok());
    g.layout = g.layout == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
    auto other = MakeKvPoolLayout(g);
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(WithOrder(*built, g.layout), *other) << KvDtypeName(g.dtype);
  }
}

TEST(PagedKvLayoutTest, RejectsBadGeometry) {
  KvPoolGeometry g;
  g.num_layers = 2;
  g.num_kv_heads = 2;
  g.head_dim = 64;
  for (int tpb : {0, 1, 3, 6, 100}) {
    g.tokens_per_block = tpb;
    auto r = MakeKvPoolLayout(g);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << tpb;
    EXPECT_NE(r.status().message().find("tokens_per_block"), std::string::npos);
  }
  g.tokens_per_block = 16;
  g.dtype = KvDtype::kNVFP4;
  g.head_dim = 40;
  EXPECT_NE(MakeKvPoolLayout(g).status().message().find("multiple of 16"), std::string::npos);
  g.head_dim = 64;
  g.kv_factor = 3;
  EXPECT_NE(MakeKvPoolLayout(g).status().message().find("kv_factor"), std::string::npos);
  g.kv_factor = 2;
  g.index_layers = 1;
  g.index_head_dim = 100;
  EXPECT_NE(MakeKvPoolLayout(g).status().message().find("index_head_dim"), std::string::npos);
}

TEST(PagedKvLayoutTest, ComponentsPerDtype) {
  KvPoolGeometry g;
  g.num_layers = 2;
  g.num_kv_heads = 2;
  g.tokens_per_block = 16;
  g.head_dim = 64;
  const std::tuple<KvDtype, bool, int> cases[] = {
      {KvDtype::kBF16, false, 0}, {KvDtype::kFP16, false, 0},         {KvDtype::kFP8, true, 32},
      {KvDtype::kINT8, true, 32}, {KvDtype::kFP8PerTensor, false, 0}, {KvDtype::kNVFP4, true, 8}};
  for (auto [dtype, has_scale, scale_bits] : cases) {
    g.dtype = dtype;
    auto l = MakeKvPoolLayout(g);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->scale().present(), has_scale) << KvDtypeName(dtype);
    if (has_scale) {
      EXPECT_EQ(l->scale().bits, scale_bits);
    }
    EXPECT_FALSE(l->index_k().present());
  }
}

}  // namespace
}  // namespace kvmesh
