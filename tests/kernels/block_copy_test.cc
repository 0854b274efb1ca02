// cpu::BlockCopy against an element-by-element check through the layout offsets: every dtype, both
// orders on each side, whole and partial blocks, MLA with an indexer; and its argument checks.
#include "kernels/block_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.h"

namespace kvmesh {
namespace {

// Owns the memory of a small pool.
struct TestPool {
  TestPool(const KvPoolLayout& layout, std::int64_t blocks, std::uint32_t seed) {
    view.layout = layout;
    view.num_blocks = blocks;
    view.pool_scale = 0.5f;
    std::mt19937 rng(seed);
    for (int c = 0; c < kNumKvComponents; ++c) {
      const auto& t = layout.components[c];
      if (!t.present()) continue;
      storage[c].resize(t.BytesPerBlock() * blocks);
      for (auto& b : storage[c]) b = static_cast<std::uint8_t>(rng());
      view.base[c] = storage[c].data();
    }
  }
  std::vector<std::uint8_t> storage[kNumKvComponents];
  KvPoolView view;
};

// Element (as an integer of up to 32 bits) at the given index of a component.
std::uint32_t ElementAt(const KvPoolView& v, int c, std::int64_t block, int l, int kv, int h, int t,
                        int d) {
  const auto& lay = v.layout.components[c];
  const auto* base = static_cast<const std::uint8_t*>(v.base[c]);
  const std::int64_t e = lay.ElementOffset(block, l, kv, h, t, d);
  if (lay.bits == 4) {
    const std::uint8_t byte = base[e / 2];
    return (e % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  }
  std::uint32_t out = 0;
  std::memcpy(&out, base + e * lay.bits / 8, lay.bits / 8);
  return out;
}

// Checks dst block `db` equals src block `sb` for tokens < n and equals `before` (a snapshot of the
// destination) for tokens >= n, element by element.
void ExpectCopied(const KvPoolView& src, std::int64_t sb, const KvPoolView& dst, std::int64_t db,
                  const KvPoolView& before, int n) {
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = src.layout.components[c];
    if (!t.present()) continue;
    for (int l = 0; l < t.num_layers; ++l)
      for (int kv = 0; kv < t.kv_factor; ++kv)
        for (int h = 0; h < t.num_heads; ++h)
          for (int tok = 0; tok < t.tokens_per_block; ++tok)
            for (int d = 0; d < t.inner; ++d) {
              const std::uint32_t want = tok < n ? ElementAt(src, c, sb, l, kv, h, tok, d)
                                                 : ElementAt(before, c, db, l, kv, h, tok, d);
              ASSERT_EQ(ElementAt(dst, c, db, l, kv, h, tok, d), want)
                  << "component " << c << " layer " << l << " kv " << kv << " head " << h
                  << " token " << tok << " dim " << d;
            }
  }
}

std::vector<KvPoolGeometry> Geometries() {
  std::vector<KvPoolGeometry> out;
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kFP16, KvDtype::kFP8, KvDtype::kFP8PerTensor,
                        KvDtype::kINT8, KvDtype::kNVFP4}) {
    KvPoolGeometry g;
    g.dtype = dtype;
    g.num_layers = 2;
    g.kv_factor = 2;
    g.num_kv_heads = 3;
    g.tokens_per_block = 16;
    g.head_dim = 32;
    out.push_back(g);
  }
  KvPoolGeometry mla;  // DeepSeek-V3.2-like, shrunk: latent + rope, indexer on one of two layers
  mla.dtype = KvDtype::kFP8;
  mla.num_layers = 2;
  mla.kv_factor = 1;
  mla.num_kv_heads = 1;
  mla.tokens_per_block = 32;
  mla.head_dim = 576;
  mla.index_layers = 1;
  mla.index_head_dim = 128;
  mla.index_quant_block = 128;
  out.push_back(mla);
  mla.index_fp4 = true;
  out.push_back(mla);
  return out;
}

TEST(BlockCopyTest, EveryDtypeBothOrdersWholeAndPartial) {
  ThreadPool executor(2);
  for (const KvPoolGeometry& g : Geometries()) {
    auto base_layout = MakeKvPoolLayout(g);
    ASSERT_TRUE(base_layout.ok()) << base_layout.status();
    for (KvLayout so : {KvLayout::kHND, KvLayout::kNHD}) {
      for (KvLayout dor : {KvLayout::kHND, KvLayout::kNHD}) {
        for (int n : {1, 3, 7, 17, -1}) {
          if (n > g.tokens_per_block) continue;
          TestPool src(WithOrder(*base_layout, so), 5, 1);
          TestPool dst(WithOrder(*base_layout, dor), 6, 2);
          TestPool before(WithOrder(*base_layout, dor), 6, 2);
          const std::vector<BlockCopyPair> pairs = {{4, 0}, {0, 5}, {2, 3}};
          BlockCopyArgs args{src.view, dst.view, pairs.data(),
                             static_cast<std::int64_t>(pairs.size()), n};
          ASSERT_TRUE(cpu::BlockCopy(args, n == 3 ? nullptr : &executor).ok());
          const int copied = n < 0 ? g.tokens_per_block : n;
          SCOPED_TRACE(testing::Message()
                       << KvDtypeName(g.dtype) << " " << KvLayoutName(so) << "->"
                       << KvLayoutName(dor) << " n " << n << " head_dim " << g.head_dim);
          for (const auto& p : pairs)
            ExpectCopied(src.view, p.src_block, dst.view, p.dst_block, before.view, copied);
          // Blocks not named are untouched.
          for (std::int64_t b : {1, 2, 4})
            ExpectCopied(before.view, b, dst.view, b, before.view, 0);
        }
      }
    }
  }
}

TEST(BlockCopyTest, CopyWithinOnePool) {
  auto layout = MakeKvPoolLayout(Geometries()[0]);
  ASSERT_TRUE(layout.ok());
  TestPool pool(*layout, 4, 3);
  TestPool before(*layout, 4, 3);
  const BlockCopyPair pair{1, 2};
  BlockCopyArgs args{pool.view, pool.view, &pair, 1, 5};
  ASSERT_TRUE(cpu::BlockCopy(args, nullptr).ok());
  ExpectCopied(before.view, 1, pool.view, 2, before.view, 5);
}

// cpu::CopyBlock: one whole block, converting across orders, with BlockCopy's checks.
TEST(BlockCopyTest, CopyBlockCopiesOneWholeBlockAcrossOrders) {
  auto layout = MakeKvPoolLayout(Geometries()[2]);  // fp8 per token-head: data and scales
  ASSERT_TRUE(layout.ok());
  TestPool src(*layout, 3, 1);
  TestPool dst(WithOrder(*layout, KvLayout::kNHD), 3, 2);
  TestPool before(WithOrder(*layout, KvLayout::kNHD), 3, 2);
  ASSERT_TRUE(cpu::CopyBlock(src.view, 2, dst.view, 0).ok());
  ExpectCopied(src.view, 2, dst.view, 0, before.view, layout->tokens_per_block());
  ExpectCopied(before.view, 1, dst.view, 1, before.view, layout->tokens_per_block());  // untouched
  EXPECT_NE(cpu::CopyBlock(src.view, 0, dst.view, 3).message().find("out of range"),
            std::string::npos);
}

TEST(BlockCopyTest, RejectsWhatItCannotDo) {
  auto layout = MakeKvPoolLayout(Geometries()[2]);  // fp8 per token-head
  ASSERT_TRUE(layout.ok());
  TestPool a(*layout, 4, 1);
  TestPool b(*layout, 4, 2);
  BlockCopyPair pair{0, 1};
  auto status_of = [&](BlockCopyArgs args) { return CanImplementBlockCopy(args); };

  BlockCopyArgs ok{a.view, b.view, &pair, 1, -1};
  EXPECT_TRUE(status_of(ok).ok());

  BlockCopyArgs bad = ok;
  BlockCopyPair far{0, 4};
  bad.pairs = &far;
  EXPECT_NE(status_of(bad).message().find("out of range"), std::string::npos);

  bad = ok;
  bad.num_tokens = 17;
  EXPECT_NE(status_of(bad).message().find("num_tokens"), std::string::npos);

  bad = ok;
  bad.dst.base[1] = nullptr;  // scales missing
  EXPECT_NE(status_of(bad).message().find("scale"), std::string::npos);

  auto other = Geometries()[0];
  other.head_dim = 64;
  auto other_layout = MakeKvPoolLayout(other);
  ASSERT_TRUE(other_layout.ok());
  TestPool c(*other_layout, 4, 3);
  bad = ok;
  bad.dst = c.view;
  EXPECT_TRUE(status_of(bad).IsInvalidArgument());

  const BlockCopyPair twice[] = {{0, 1}, {2, 1}};
  bad = ok;
  bad.pairs = twice;
  bad.num_pairs = 2;
  EXPECT_NE(status_of(bad).message().find("twice"), std::string::npos);

  bad = ok;
  bad.dst = a.view;
  const BlockCopyPair self{3, 3};
  bad.pairs = &self;
  EXPECT_NE(status_of(bad).message().find("onto itself"), std::string::npos);
  EXPECT_FALSE(cpu::BlockCopy(bad, nullptr).ok());
}

TEST(BlockCopyTest, PoolScalesMustAgree) {
  auto g = Geometries()[5];  // nvfp4
  ASSERT_EQ(g.dtype, KvDtype::kNVFP4);
  auto layout = MakeKvPoolLayout(g);
  ASSERT_TRUE(layout.ok());
  TestPool a(*layout, 2, 1);
  TestPool b(*layout, 2, 2);
  b.view.pool_scale = 2.0f;
  const BlockCopyPair pair{0, 1};
  EXPECT_NE(CanImplementBlockCopy({a.view, b.view, &pair, 1, -1}).message().find("pool scale"),
            std::string::npos);
}

}  // namespace
}  // namespace kvmesh
