// Layer ranges (the streaming handoff's wire form, store/layer_range_codec.h): for every shape,
// ranges that cover a block rebuild it byte for byte, whole or verified in place from their seals;
// the documented byte layout; a range is refused for another content id, another layer range of
// the same size, another geometry, a wrong size, any flipped byte, and a destination changed after
// its arrival.
#include "store/layer_range_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::FieldAt;
using store_test::IdFor;
using store_test::LayoutOf;
using store_test::Reseal;
using store_test::Shape;
using store_test::ShapeName;
using store_test::TestPool;

// Ranges that cover [0, layers): [0, 1), [1, L/2), [L/2, L) without the empty ones.
std::vector<LayerSpan> Cover(std::int32_t layers) {
  std::vector<LayerSpan> out;
  std::int32_t at = 0;
  for (std::int32_t end : {1, layers / 2, layers}) {
    if (end > at) out.push_back({at, end});
    at = std::max(at, end);
  }
  return out;
}

class LayerRangeRoundTrip : public ::testing::TestWithParam<Shape> {};

TEST_P(LayerRangeRoundTrip, RangesRebuildTheBlockWholeAndInPlace) {
  const Shape& shape = GetParam();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  auto codec = LayerRangeCodec::Create(layout, shape.pool_scale);
  ASSERT_TRUE(codec.ok()) << codec.status();
  TestPool src(layout, 2, shape.pool_scale);
  TestPool whole(layout, 3, shape.pool_scale);
  TestPool in_place(layout, 3, shape.pool_scale);
  src.Fill(1, 77);
  whole.FillByte(2, 0xA5);
  in_place.FillByte(2, 0x5A);
  const ContentId id = IdFor(9);
  for (const LayerSpan r : Cover(codec->num_layers())) {
    ASSERT_TRUE(codec->CheckRange(r).ok());
    std::vector<std::byte> piece(static_cast<std::size_t>(codec->Bytes(r)));
    ASSERT_TRUE(codec->Encode(src.view(), 1, id, r, piece).ok());
    ASSERT_TRUE(codec->Verify(piece, id, r).ok()) << r.begin << ".." << r.end;
    // Whole: one copy of the verified payload into the block's layers.
    const KvPoolView from = codec->PayloadView(piece, r);
    const KvPoolView to = codec->BlockView(whole.view(), 2, r);
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& l = from.layout.components[c];
      ASSERT_EQ(l.present(), to.layout.components[c].present());
      if (l.present()) std::memcpy(to.base[c], from.base[c], l.BytesPerBlock());
    }
    // In place: the components land in the block, the seal elsewhere.
    std::array<std::byte, kLayerRangeSealBytes> seal;
    ASSERT_TRUE(codec->EncodeSeal(src.view(), 1, id, r, seal).ok());
    EXPECT_TRUE(std::equal(seal.begin(), seal.begin() + kLayerRangeHeaderBytes, piece.begin()));
    EXPECT_TRUE(std::equal(seal.begin() + kLayerRangeHeaderBytes, seal.end(),
                           piece.end() - kBundleChecksumBytes));
    const LayerRangeParts parts = codec->Parts(r);
    const KvPoolView into = codec->BlockView(in_place.view(), 2, r);
    for (const BundleRange& part : parts.all()) {
      if (part.component < 0) continue;
      std::memcpy(into.base[part.component], piece.data() + part.offset, part.length);
    }
    EXPECT_TRUE(codec->VerifyInPlace(seal, id, r, in_place.view(), 2).ok());
    // The parts rebuild the wire form: every other byte is zero.
    std::vector<std::byte> rebuilt(piece.size(), std::byte{0x33});
    codec->ZeroPadding(rebuilt, r);
    for (const BundleRange& part : parts.all()) {
      std::memcpy(rebuilt.data() + part.offset, piece.data() + part.offset, part.length);
    }
    EXPECT_EQ(rebuilt, piece);
  }
  EXPECT_EQ(whole.Snapshot(2), src.Snapshot(1));  // every component, byte for byte
  EXPECT_EQ(in_place.Snapshot(2), src.Snapshot(1));
}

TEST_P(LayerRangeRoundTrip, DocumentedLayout) {
  const Shape& shape = GetParam();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  auto codec = LayerRangeCodec::Create(layout, shape.pool_scale);
  auto bundle = BundleCodec::Create(layout, shape.pool_scale);
  ASSERT_TRUE(codec.ok() && bundle.ok());
  TestPool src(layout, 1, shape.pool_scale);
  src.Fill(0, 5);
  const ContentId id = IdFor(3);
  const std::int32_t layers = codec->num_layers();
  const LayerSpan r{layers / 2, layers};
  std::vector<std::byte> b(static_cast<std::size_t>(codec->Bytes(r)));
  ASSERT_TRUE(codec->Encode(src.view(), 0, id, r, b).ok());
  EXPECT_EQ(FieldAt<std::uint32_t>(b, 0), 0x4C4D564Bu);  // "KVML"
  EXPECT_EQ(std::memcmp(b.data(), "KVML", 4), 0);
  EXPECT_EQ(FieldAt<std::uint16_t>(b, 4), 1);
  EXPECT_EQ(FieldAt<std::uint16_t>(b, 6), 64);
  EXPECT_EQ(FieldAt<std::uint64_t>(b, 8), b.size());
  EXPECT_EQ(std::memcmp(b.data() + 16, id.bytes.data(), 16), 0);
  EXPECT_EQ(std::memcmp(b.data() + 32, bundle->fingerprint().bytes.data(), 16), 0);
  EXPECT_EQ(FieldAt<std::uint32_t>(b, 48), static_cast<std::uint32_t>(r.begin));
  EXPECT_EQ(FieldAt<std::uint32_t>(b, 52), static_cast<std::uint32_t>(r.end));
  EXPECT_EQ(FieldAt<std::uint32_t>(b, 56), static_cast<std::uint32_t>(layers));
  int present = 0;
  std::int64_t at = 64;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const PagedTensorLayout& l = layout.components[c];
    if (!l.present()) continue;
    ++present;
    // Cut to the range when the component has the pool's layers, else whole (the last range).
    const std::int64_t bytes = l.num_layers == layers
                                   ? l.BytesPerBlock() / l.num_layers * (r.end - r.begin)
                                   : l.BytesPerBlock();
    const std::int64_t first =
        l.num_layers == layers ? l.BytesPerBlock() / l.num_layers * r.begin : 0;
    const auto* block =
        reinterpret_cast<const std::byte*>(src.view().BlockBytes(static_cast<KvComponent>(c), 0));
    EXPECT_EQ(std::memcmp(b.data() + at, block + first, static_cast<std::size_t>(bytes)), 0)
        << "component " << c;
    at = (at + bytes + 63) / 64 * 64;
  }
  EXPECT_EQ(FieldAt<std::uint8_t>(b, 60), present);
  EXPECT_EQ(FieldAt<std::uint8_t>(b, 61), static_cast<std::uint8_t>(layout.order()));
  EXPECT_EQ(FieldAt<std::uint8_t>(b, 62), static_cast<std::uint8_t>(layout.dtype));
  EXPECT_EQ(FieldAt<std::uint8_t>(b, 63), 0);
  EXPECT_EQ(static_cast<std::int64_t>(b.size()), at + 16);
  std::vector<std::byte> resealed = b;
  store_test::Reseal(resealed);  // XXH3-128 of everything before the trailer, canonical
  EXPECT_EQ(resealed, b);
}

INSTANTIATE_TEST_SUITE_P(AllShapes, LayerRangeRoundTrip,
                         ::testing::ValuesIn(store_test::AllShapes()), ShapeName);

// A small pool with scales (fp8: a second component) and an indexer on fewer layers.
KvPoolLayout SmallRangeLayout(KvLayout order) {
  KvPoolGeometry g;
  g.dtype = KvDtype::kFP8;
  g.layout = order;
  g.num_layers = 4;
  g.num_kv_heads = 2;
  g.tokens_per_block = 4;
  g.head_dim = 16;
  g.index_layers = 2;
  g.index_head_dim = 32;
  g.index_quant_block = 16;
  return LayoutOf(g);
}

TEST(LayerRangeCodec, RefusesEveryLie) {
  const KvPoolLayout layout = SmallRangeLayout(KvLayout::kHND);
  auto codec = LayerRangeCodec::Create(layout, 1.0f);
  ASSERT_TRUE(codec.ok()) << codec.status();
  TestPool src(layout, 2, 1.0f);
  src.Fill(0, 1);
  src.Fill(1, 2);
  const ContentId id = IdFor(5);
  const LayerSpan r{1, 2};
  std::vector<std::byte> good(static_cast<std::size_t>(codec->Bytes(r)));
  ASSERT_TRUE(codec->Encode(src.view(), 0, id, r, good).ok());
  ASSERT_TRUE(codec->Verify(good, id, r).ok());
  // The indexer (2 of 4 layers) travels whole with the last range only.
  EXPECT_EQ(codec->Parts({0, 3}).count, 4);  // header, data, scale, checksum
  EXPECT_EQ(codec->Parts({3, 4}).count, 6);  // + index_k, index_scale

  EXPECT_TRUE(codec->Verify(good, IdFor(6), r).IsCorruption());  // another block's id
  EXPECT_TRUE(codec->Verify(good, id, {2, 3}).IsCorruption());   // same size, other layers
  std::vector<std::byte> other(good.size());
  ASSERT_TRUE(codec->Encode(src.view(), 1, IdFor(6), r, other).ok());
  EXPECT_TRUE(codec->Verify(other, id, r).IsCorruption());  // another block's range, valid
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  EXPECT_TRUE(codec->Verify(longer, id, r).IsCorruption());
  EXPECT_TRUE(codec->Verify(std::span(good).first(good.size() - 1), id, r).IsCorruption());
  EXPECT_TRUE(codec->Verify(good, id, {0, 0}).IsInvalidArgument());
  EXPECT_TRUE(codec->Verify(good, id, {3, 5}).IsInvalidArgument());
  EXPECT_TRUE(codec->Verify(good, id, {-1, 1}).IsInvalidArgument());
  // Another order (same shape), another dtype: another fingerprint.
  auto nhd = LayerRangeCodec::Create(SmallRangeLayout(KvLayout::kNHD), 1.0f);
  ASSERT_TRUE(nhd.ok());
  EXPECT_TRUE(nhd->Verify(good, id, r).IsCorruption());
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::vector<std::byte> bad = good;
    bad[i] ^= std::byte{0x01};
    EXPECT_TRUE(codec->Verify(bad, id, r).IsCorruption()) << "byte " << i;
    if (i < static_cast<std::size_t>(kLayerRangeHeaderBytes)) {
      store_test::Reseal(bad);  // the header check, not the checksum, must catch it
      EXPECT_TRUE(codec->Verify(bad, id, r).IsCorruption()) << "resealed byte " << i;
    }
  }
  // In place: a seal against a block that differs from what was sealed.
  std::array<std::byte, kLayerRangeSealBytes> seal;
  ASSERT_TRUE(codec->EncodeSeal(src.view(), 0, id, r, seal).ok());
  ASSERT_TRUE(codec->VerifyInPlace(seal, id, r, src.view(), 0).ok());
  EXPECT_TRUE(codec->VerifyInPlace(seal, id, r, src.view(), 1).IsCorruption());
  EXPECT_TRUE(codec->VerifyInPlace(seal, id, {0, 1}, src.view(), 0).IsCorruption());
  EXPECT_TRUE(codec->VerifyInPlace(std::span(seal).first(40), id, r, src.view(), 0).IsCorruption());
  const KvPoolView range = codec->BlockView(src.view(), 0, r);
  static_cast<std::uint8_t*>(range.base[0])[3] ^= 0x10;  // inside layer 1
  EXPECT_TRUE(codec->VerifyInPlace(seal, id, r, src.view(), 0).IsCorruption());
  static_cast<std::uint8_t*>(range.base[0])[3] ^= 0x10;
  EXPECT_TRUE(codec->VerifyInPlace(seal, id, r, src.view(), 0).ok());
  // A byte outside the range changes nothing.
  static_cast<std::uint8_t*>(src.view().BlockBytes(KvComponent::kData, 0))[0] ^= 0x10;
  EXPECT_TRUE(codec->VerifyInPlace(seal, id, r, src.view(), 0).ok());
}

}  // namespace
}  // namespace kvmesh
