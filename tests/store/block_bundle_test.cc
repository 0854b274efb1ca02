// Block bundles: round trips for every dtype × both layouts × model shapes (Llama, MLA 576,
// DeepSeek-V3.2-like indexer in FP8 and FP4, NVFP4 block scales and global scale); the documented
// byte layout; fingerprints; and every malformation — truncation at every boundary, each length
// and shape field wrong (with the checksum recomputed, so the structural check must catch it),
// another fingerprint, every single flipped bit, another content id, another pool scale — each
// kCorruption with the destination block untouched. DecodeOnePass (copy while checksumming, for
// restore destinations) rejects every one of them too: structural failures before a byte is
// copied, a flipped payload or checksum byte — in any chunk of any component, the last included —
// at the end. DecodeOnePassConverting (the same into a pool in the other order: a handoff between
// HND and NHD nodes) equals the converting block copy for every shape and rejects every
// malformation the same way.
#include "store/block_bundle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/block_copy.h"
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

std::vector<std::byte> EncodeBlock(const BundleCodec& codec, const TestPool& pool,
                                   std::int64_t block, const ContentId& id) {
  std::vector<std::byte> out(codec.bundle_bytes());
  const Status st = codec.Encode(pool.view(), block, id, out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

KvLayout OtherOrder(KvLayout order) {
  return order == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
}

// What the converting block copy (kernels/block_copy.h) writes for block `from` of `src` into
// block `to` of `dst` (a pool in the other order).
void ConvertingCopy(const TestPool& src, std::int64_t from, const TestPool& dst, std::int64_t to) {
  const Status st = cpu::CopyBlock(src.view(), from, dst.view(), to);
  ASSERT_TRUE(st.ok()) << st;
}

class BundleRoundTrip : public ::testing::TestWithParam<Shape> {};

TEST_P(BundleRoundTrip, EncodeDecodeEveryComponent) {
  const Shape& shape = GetParam();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  auto codec = BundleCodec::Create(layout, shape.pool_scale);
  ASSERT_TRUE(codec.ok()) << codec.status();
  TestPool src(layout, 3, shape.pool_scale);
  TestPool dst(layout, 3, shape.pool_scale);
  for (int b = 0; b < 3; ++b) {
    src.Fill(b, 100 + b);
    dst.FillByte(b, 0xA5);
  }
  const ContentId id = IdFor(7);
  const auto bundle = EncodeBlock(*codec, src, 1, id);
  ASSERT_EQ(static_cast<std::int64_t>(bundle.size()), codec->bundle_bytes());
  EXPECT_GE(codec->bundle_bytes(), layout.BytesPerBlock() + kBundleFixedHeaderBytes + 16);
  ASSERT_TRUE(codec->Verify(bundle, id).ok());

  const auto untouched = dst.Snapshot(0);
  ASSERT_TRUE(codec->Decode(bundle, id, dst.view(), 2).ok());
  EXPECT_EQ(dst.Snapshot(2), src.Snapshot(1));  // every component, byte for byte
  EXPECT_EQ(dst.Snapshot(0), untouched);
  EXPECT_EQ(dst.Snapshot(1), untouched);

  // The gathered form is the same bytes.
  BundlePieces pieces;
  ASSERT_TRUE(codec->EncodePieces(src.view(), 1, id, &pieces).ok());
  std::vector<std::byte> joined;
  for (int i = 0; i < pieces.count; ++i) {
    joined.insert(joined.end(), pieces.pieces[i].begin(), pieces.pieces[i].end());
  }
  EXPECT_EQ(joined, bundle);
}

// Into a pool in the other order, in one pass: the same bytes as the converting block copy, only
// the destination block written; a pool in the same order is refused (nothing written).
TEST_P(BundleRoundTrip, OnePassConvertingEqualsTheConvertingBlockCopy) {
  const Shape& shape = GetParam();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  const KvPoolLayout other = WithOrder(layout, OtherOrder(layout.order()));
  auto codec = BundleCodec::Create(layout, shape.pool_scale);
  ASSERT_TRUE(codec.ok()) << codec.status();
  TestPool src(layout, 2, shape.pool_scale);
  TestPool dst(other, 3, shape.pool_scale);
  TestPool expected(other, 3, shape.pool_scale);
  src.Fill(1, 321);
  for (int b = 0; b < 3; ++b) {
    dst.FillByte(b, 0xA5);
    expected.FillByte(b, 0xA5);
  }
  ConvertingCopy(src, 1, expected, 2);
  const ContentId id = IdFor(8);
  const auto bundle = EncodeBlock(*codec, src, 1, id);
  const Status st = codec->DecodeOnePassConverting(bundle, id, dst.view(), 2);
  ASSERT_TRUE(st.ok()) << st;
  for (int b = 0; b < 3; ++b) EXPECT_EQ(dst.Snapshot(b), expected.Snapshot(b)) << "block " << b;
  if (layout.data().num_heads > 1) {  // with one head both orders are the same bytes
    EXPECT_NE(dst.Snapshot(2), src.Snapshot(1)) << "copied without converting";
  }

  TestPool same(layout, 1, shape.pool_scale);
  same.FillByte(0, 0x11);
  const auto before = same.Snapshot(0);
  EXPECT_TRUE(codec->DecodeOnePassConverting(bundle, id, same.view(), 0).IsInvalidArgument());
  EXPECT_EQ(same.Snapshot(0), before);
  EXPECT_TRUE(codec->DecodeOnePassConverting(bundle, id, dst.view(), 3).IsInvalidArgument());
}

// Range by range (remote fetch): the seal (header and checksum) from EncodeSeal, each component
// range copied from the pool block, the padding zeroed in a buffer full of garbage — the same
// bytes as Encode; the data ranges cover every byte but the padding, in order, without overlap.
TEST_P(BundleRoundTrip, SealAndDataRangesRebuildTheBundle) {
  const Shape& shape = GetParam();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  auto codec = BundleCodec::Create(layout, shape.pool_scale);
  ASSERT_TRUE(codec.ok()) << codec.status();
  TestPool src(layout, 2, shape.pool_scale);
  src.Fill(0, 31);
  src.Fill(1, 32);
  const ContentId id = IdFor(9);
  const auto bundle = EncodeBlock(*codec, src, 1, id);
  const std::vector<BundleRange>& ranges = codec->data_ranges();
  ASSERT_GE(ranges.size(), 3u);
  EXPECT_EQ(ranges.front().offset, 0);
  EXPECT_EQ(ranges.front().component, -1);
  EXPECT_EQ(ranges.back().offset + ranges.back().length, codec->bundle_bytes());
  EXPECT_EQ(ranges.back().length, kBundleChecksumBytes);
  std::int64_t end = 0, payload = 0;
  for (const BundleRange& r : ranges) {
    EXPECT_GE(r.offset, end);
    EXPECT_GT(r.length, 0);
    end = r.offset + r.length;
    if (r.component >= 0) payload += r.length;
  }
  EXPECT_EQ(payload, layout.BytesPerBlock());
  std::vector<std::byte> rebuilt(codec->bundle_bytes(), std::byte{0x5C});
  ASSERT_TRUE(codec->EncodeSeal(src.view(), 1, id, rebuilt).ok());
  for (const BundleRange& r : ranges) {
    if (r.component < 0) continue;
    std::memcpy(rebuilt.data() + r.offset,
                src.view().BlockBytes(static_cast<KvComponent>(r.component), 1), r.length);
  }
  codec->ZeroPadding(rebuilt);
  EXPECT_EQ(rebuilt, bundle);
  ASSERT_TRUE(codec->Verify(rebuilt, id).ok());
  // The seal is bound to the block: another block's payload in the same seal fails the checksum.
  for (const BundleRange& r : ranges) {
    if (r.component < 0) continue;
    std::memcpy(rebuilt.data() + r.offset,
                src.view().BlockBytes(static_cast<KvComponent>(r.component), 0), r.length);
  }
  EXPECT_EQ(codec->Verify(rebuilt, id).code(), StatusCode::kCorruption);
  std::vector<std::byte> small(codec->bundle_bytes() - 1);
  EXPECT_EQ(codec->EncodeSeal(src.view(), 1, id, small).code(), StatusCode::kInvalidArgument);
}

// In place: the seal received into a buffer (its payload garbage, never read), the block into
// the destination pool — verified there; a flipped byte in any component, in the header or in the
// checksum, another content id or another block's seal is kCorruption.
TEST_P(BundleRoundTrip, VerifyInPlaceChecksTheSealAgainstTheBlock) {
  const Shape& shape = GetParam();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  auto codec = BundleCodec::Create(layout, shape.pool_scale);
  ASSERT_TRUE(codec.ok()) << codec.status();
  TestPool src(layout, 2, shape.pool_scale), dst(layout, 2, shape.pool_scale);
  src.Fill(0, 41);
  src.Fill(1, 42);
  const ContentId id = IdFor(11);
  std::vector<std::byte> seal(codec->bundle_bytes(), std::byte{0x77});
  ASSERT_TRUE(codec->EncodeSeal(src.view(), 1, id, seal).ok());
  const auto receive = [&] {  // the component ranges, into block 0 of dst
    for (const BundleRange& r : codec->data_ranges()) {
      if (r.component < 0) continue;
      const auto c = static_cast<KvComponent>(r.component);
      std::memcpy(dst.view().BlockBytes(c, 0), src.view().BlockBytes(c, 1), r.length);
    }
  };
  receive();
  EXPECT_TRUE(codec->VerifyInPlace(seal, id, dst.view(), 0).ok());
  EXPECT_EQ(dst.Snapshot(0), src.Snapshot(1));
  EXPECT_EQ(codec->VerifyInPlace(seal, IdFor(12), dst.view(), 0).code(), StatusCode::kCorruption);
  for (const BundleRange& r : codec->data_ranges()) {
    for (const std::int64_t at : {std::int64_t{0}, r.length / 2, r.length - 1}) {
      if (r.component >= 0) {
        auto* byte = dst.view().BlockBytes(static_cast<KvComponent>(r.component), 0) + at;
        *byte ^= 0x10;
        EXPECT_EQ(codec->VerifyInPlace(seal, id, dst.view(), 0).code(), StatusCode::kCorruption)
            << "component " << r.component << " byte " << at;
        *byte ^= 0x10;
      } else {
        seal[static_cast<std::size_t>(r.offset + at)] ^= std::byte{0x10};
        EXPECT_EQ(codec->VerifyInPlace(seal, id, dst.view(), 0).code(), StatusCode::kCorruption)
            << "seal byte " << r.offset + at;
        seal[static_cast<std::size_t>(r.offset + at)] ^= std::byte{0x10};
      }
    }
  }
  EXPECT_TRUE(codec->VerifyInPlace(seal, id, dst.view(), 0).ok());
  std::vector<std::byte> other(codec->bundle_bytes());
  ASSERT_TRUE(codec->EncodeSeal(src.view(), 0, id, other).ok());
  EXPECT_EQ(codec->VerifyInPlace(other, id, dst.view(), 0).code(), StatusCode::kCorruption);
  EXPECT_EQ(codec->VerifyInPlace(std::span(seal).first(seal.size() - 1), id, dst.view(), 0).code(),
            StatusCode::kCorruption);
}

// The byte layout of docs/bundle-format.md.
TEST_P(BundleRoundTrip, DocumentedLayout) {
  const Shape& shape = GetParam();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  auto codec = BundleCodec::Create(layout, shape.pool_scale);
  ASSERT_TRUE(codec.ok());
  TestPool src(layout, 1, shape.pool_scale);
  src.Fill(0, 5);
  const ContentId id = IdFor(9);
  const auto b = EncodeBlock(*codec, src, 0, id);
  EXPECT_EQ(FieldAt<std::uint32_t>(b, 0), 0x424D564Bu);
  EXPECT_EQ(std::memcmp(b.data(), "KVMB", 4), 0);
  EXPECT_EQ(FieldAt<std::uint16_t>(b, 4), 1);
  const auto payload = FieldAt<std::uint16_t>(b, 6);
  EXPECT_EQ(payload % 64, 0);
  EXPECT_EQ(FieldAt<std::uint64_t>(b, 8), b.size());
  EXPECT_EQ(std::memcmp(b.data() + 16, id.bytes.data(), 16), 0);
  EXPECT_EQ(std::memcmp(b.data() + 32, codec->fingerprint().bytes.data(), 16), 0);
  EXPECT_EQ(FieldAt<float>(b, 48), HasPoolScale(layout.dtype) ? shape.pool_scale : 1.0f);
  EXPECT_EQ(FieldAt<std::uint8_t>(b, 52), static_cast<std::uint8_t>(layout.dtype));
  EXPECT_EQ(FieldAt<std::uint8_t>(b, 53), static_cast<std::uint8_t>(shape.geometry.layout));
  int present = 0;
  for (const auto& c : layout.components) present += c.present() ? 1 : 0;
  ASSERT_EQ(FieldAt<std::uint8_t>(b, 54), present);
  const auto snapshot = src.Snapshot(0);
  std::size_t consumed = 0;
  for (int i = 0; i < present; ++i) {
    const std::size_t e = 64 + 40 * i;
    const int kind = FieldAt<std::uint8_t>(b, e);
    const auto& t = layout.components[kind];
    ASSERT_TRUE(t.present());
    EXPECT_EQ(FieldAt<std::uint8_t>(b, e + 1), t.bits);
    EXPECT_EQ(FieldAt<std::uint8_t>(b, e + 2), static_cast<std::uint8_t>(t.order));
    EXPECT_EQ(FieldAt<std::int32_t>(b, e + 4), t.num_layers);
    EXPECT_EQ(FieldAt<std::int32_t>(b, e + 8), t.kv_factor);
    EXPECT_EQ(FieldAt<std::int32_t>(b, e + 12), t.num_heads);
    EXPECT_EQ(FieldAt<std::int32_t>(b, e + 16), t.tokens_per_block);
    EXPECT_EQ(FieldAt<std::int32_t>(b, e + 20), t.inner);
    const auto off = FieldAt<std::uint64_t>(b, e + 24);
    const auto bytes = FieldAt<std::uint64_t>(b, e + 32);
    EXPECT_EQ(off % 64, 0u);
    EXPECT_GE(off, payload);
    ASSERT_EQ(static_cast<std::int64_t>(bytes), t.BytesPerBlock());
    ASSERT_LE(off + bytes, b.size() - 16);
    EXPECT_EQ(std::memcmp(b.data() + off, snapshot.data() + consumed, bytes), 0) << "kind " << kind;
    consumed += bytes;
  }
  EXPECT_EQ(consumed, snapshot.size());
  // The checksum is libxxhash's XXH3-128 of everything before it (the codec computes it with its
  // own loop, store/xxh3_stream.h): resealing with the library changes nothing.
  std::vector<std::byte> resealed = b;
  store_test::Reseal(resealed);
  EXPECT_EQ(resealed, b);
}

INSTANTIATE_TEST_SUITE_P(AllShapes, BundleRoundTrip, ::testing::ValuesIn(store_test::AllShapes()),
                         ShapeName);

TEST(GeometryFingerprint, ChangesWithEveryParameter) {
  KvPoolGeometry base;
  base.dtype = KvDtype::kNVFP4;
  base.layout = KvLayout::kHND;
  base.num_layers = 4;
  base.kv_factor = 2;
  base.num_kv_heads = 8;
  base.tokens_per_block = 16;
  base.head_dim = 128;
  const auto fp0 = FingerprintOf(LayoutOf(base), 2.0f);
  EXPECT_EQ(fp0, FingerprintOf(LayoutOf(base), 2.0f));
  EXPECT_NE(fp0, FingerprintOf(LayoutOf(base), 3.0f)) << "global scale";
  std::vector<KvPoolGeometry> variants(10, base);
  variants[0].dtype = KvDtype::kFP8;
  variants[1].layout = KvLayout::kNHD;
  variants[2].num_layers = 5;
  variants[3].kv_factor = 1;
  variants[4].num_kv_heads = 4;
  variants[5].tokens_per_block = 32;
  variants[6].head_dim = 64;
  variants[7].index_layers = 2;
  variants[7].index_head_dim = 128;
  variants[8] = variants[7];
  variants[8].index_fp4 = true;
  variants[9].dtype = KvDtype::kFP8PerTensor;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(fp0, FingerprintOf(LayoutOf(variants[i]), 2.0f)) << "variant " << i;
  }
  // A dtype without a pool scale ignores it.
  KvPoolGeometry bf16 = base;
  bf16.dtype = KvDtype::kBF16;
  EXPECT_EQ(FingerprintOf(LayoutOf(bf16), 2.0f), FingerprintOf(LayoutOf(bf16), 1.0f));
}

TEST(BundleCodec, RejectsBadCodecsAndViews) {
  KvPoolGeometry g;
  g.dtype = KvDtype::kNVFP4;
  g.num_layers = 2;
  g.num_kv_heads = 2;
  g.tokens_per_block = 16;
  g.head_dim = 64;
  const KvPoolLayout layout = LayoutOf(g);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_TRUE(BundleCodec::Create(layout, bad).status().IsInvalidArgument()) << bad;
  }
  EXPECT_TRUE(BundleCodec::Create(KvPoolLayout{}, 1.0f).status().IsInvalidArgument());
  auto codec = BundleCodec::Create(layout, 2.0f);
  ASSERT_TRUE(codec.ok());
  TestPool pool(layout, 2, 2.0f);
  std::vector<std::byte> out(codec->bundle_bytes());
  EXPECT_TRUE(codec->Encode(pool.view(), 2, IdFor(1), out).IsInvalidArgument()) << "block range";
  EXPECT_TRUE(codec->Encode(pool.view(), -1, IdFor(1), out).IsInvalidArgument());
  std::vector<std::byte> small(codec->bundle_bytes() - 1);
  EXPECT_TRUE(codec->Encode(pool.view(), 0, IdFor(1), small).IsInvalidArgument());
  TestPool other_scale(layout, 2, 3.0f);
  EXPECT_TRUE(codec->Encode(other_scale.view(), 0, IdFor(1), out).IsInvalidArgument());
  TestPool other_order(WithOrder(layout, KvLayout::kNHD), 2, 2.0f);
  EXPECT_TRUE(codec->Encode(other_order.view(), 0, IdFor(1), out).IsInvalidArgument());
  KvPoolView no_scales = pool.view();
  no_scales.base[static_cast<int>(KvComponent::kScale)] = nullptr;
  EXPECT_TRUE(codec->Encode(no_scales, 0, IdFor(1), out).IsInvalidArgument());
  ASSERT_TRUE(codec->Encode(pool.view(), 0, IdFor(1), out).ok());
  EXPECT_TRUE(codec->Decode(out, IdFor(1), other_order.view(), 0).IsInvalidArgument());
}

// Malformed bundles: each is kCorruption from Verify and from Decode, and the destination block
// keeps its bytes.
class BundleMalformed : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    const Shape& shape = GetParam();
    layout_ = LayoutOf(shape.geometry);
    auto codec = BundleCodec::Create(layout_, shape.pool_scale);
    ASSERT_TRUE(codec.ok());
    codec_ = std::make_unique<BundleCodec>(std::move(*codec));
    src_ = std::make_unique<TestPool>(layout_, 1, shape.pool_scale);
    dst_ = std::make_unique<TestPool>(layout_, 1, shape.pool_scale);
    other_ = std::make_unique<TestPool>(WithOrder(layout_, OtherOrder(layout_.order())), 1,
                                        shape.pool_scale);
    src_->Fill(0, 42);
    dst_->FillByte(0, 0x5A);
    other_->FillByte(0, 0x5A);
    before_ = dst_->Snapshot(0);
    good_ = EncodeBlock(*codec_, *src_, 0, id_);
  }
  void ExpectRejected(const std::vector<std::byte>& bundle, const std::string& what,
                      const ContentId* id = nullptr, const BundleCodec* codec = nullptr) {
    const BundleCodec& c = codec != nullptr ? *codec : *codec_;
    const ContentId& want = id != nullptr ? *id : id_;
    const Status v = c.Verify(bundle, want);
    EXPECT_TRUE(v.IsCorruption()) << what << ": " << v;
    const Status d = c.Decode(bundle, want, dst_->view(), 0);
    EXPECT_TRUE(d.IsCorruption()) << what << ": " << d;
    ASSERT_EQ(dst_->Snapshot(0), before_) << what << ": destination written";
    ExpectOnePassRejected(bundle, what, /*structural=*/true, id, codec);
  }
  // DecodeOnePass rejects it too; a structural failure (header, table, id, fingerprint, length)
  // is found before any byte is copied, so the destination is untouched then.
  void ExpectOnePassRejected(const std::vector<std::byte>& bundle, const std::string& what,
                             bool structural, const ContentId* id = nullptr,
                             const BundleCodec* codec = nullptr) {
    const BundleCodec& c = codec != nullptr ? *codec : *codec_;
    const ContentId& want = id != nullptr ? *id : id_;
    const Status d = c.DecodeOnePass(bundle, want, dst_->view(), 0);
    EXPECT_TRUE(d.IsCorruption()) << what << " (one pass): " << d;
    if (structural) {
      ASSERT_EQ(dst_->Snapshot(0), before_) << what << ": destination written (one pass)";
    }
    dst_->FillByte(0, 0x5A);      // as before_, for the next case
    if (c.layout() == layout_) {  // the converting decode, into the pool in the other order
      const auto other_before = other_->Snapshot(0);
      const Status k = c.DecodeOnePassConverting(bundle, want, other_->view(), 0);
      EXPECT_TRUE(k.IsCorruption()) << what << " (one pass, converting): " << k;
      if (structural) {
        ASSERT_EQ(other_->Snapshot(0), other_before)
            << what << ": destination written (one pass, converting)";
      }
      other_->FillByte(0, 0x5A);
    }
  }
  // Payload offset and the boundaries of every field and component.
  std::vector<std::size_t> Boundaries() const {
    std::vector<std::size_t> out = {0, 1, 4, 6, 8, 16, 32, 48, 52, 53, 54, 55, 56, 63, 64};
    const auto payload = FieldAt<std::uint16_t>(good_, 6);
    const int present = FieldAt<std::uint8_t>(good_, 54);
    for (int i = 0; i < present; ++i) {
      const std::size_t e = 64 + 40 * i;
      for (std::size_t f : {0, 1, 2, 4, 8, 12, 16, 20, 24, 32, 40}) out.push_back(e + f);
      const auto off = FieldAt<std::uint64_t>(good_, e + 24);
      const auto bytes = FieldAt<std::uint64_t>(good_, e + 32);
      for (std::uint64_t x : {off - 1, off, off + 1, off + bytes / 2, off + bytes - 1, off + bytes})
        out.push_back(x);
    }
    out.push_back(payload);
    for (std::size_t x : {good_.size() - 17, good_.size() - 16, good_.size() - 8, good_.size() - 1})
      out.push_back(x);
    return out;
  }

  KvPoolLayout layout_;
  std::unique_ptr<BundleCodec> codec_;
  std::unique_ptr<TestPool> src_, dst_, other_;  // other_: the layout in the other order
  std::vector<std::byte> before_, good_;
  ContentId id_ = IdFor(1234);
};

TEST_P(BundleMalformed, GoodBundleDecodes) {
  ASSERT_TRUE(codec_->Decode(good_, id_, dst_->view(), 0).ok());
  EXPECT_EQ(dst_->Snapshot(0), src_->Snapshot(0));
}

TEST_P(BundleMalformed, TruncatedAtEveryBoundary) {
  for (std::size_t len : Boundaries()) {
    if (len >= good_.size()) continue;
    ExpectRejected({good_.begin(), good_.begin() + len}, "truncated to " + std::to_string(len));
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 50; ++i) {
    const std::size_t len = rng() % good_.size();
    ExpectRejected({good_.begin(), good_.begin() + len}, "truncated to " + std::to_string(len));
  }
  auto longer = good_;
  longer.push_back(std::byte{0});
  ExpectRejected(longer, "one trailing byte");
}

TEST_P(BundleMalformed, EachFieldWrongEvenWithAValidChecksum) {
  // (offset, width) of every header field and every table entry field.
  std::vector<std::pair<std::size_t, int>> fields = {{0, 4},   {4, 2},  {6, 2},  {8, 8},
                                                     {32, 16}, {48, 4}, {52, 1}, {53, 1},
                                                     {54, 1},  {55, 1}, {56, 8}};
  const int present = FieldAt<std::uint8_t>(good_, 54);
  for (int i = 0; i < present; ++i) {
    const std::size_t e = 64 + 40 * i;
    for (auto [f, w] : std::vector<std::pair<std::size_t, int>>{{0, 1},
                                                                {1, 1},
                                                                {2, 1},
                                                                {3, 1},
                                                                {4, 4},
                                                                {8, 4},
                                                                {12, 4},
                                                                {16, 4},
                                                                {20, 4},
                                                                {24, 8},
                                                                {32, 8}}) {
      fields.push_back({e + f, w});
    }
  }
  const auto payload = FieldAt<std::uint16_t>(good_, 6);
  if (payload > 64 + 40 * present) fields.push_back({payload - 1, 1});  // header padding
  for (auto [off, width] : fields) {
    for (int delta : {1, -1, 0x40}) {
      auto b = good_;
      // Add `delta` to the field's lowest byte (a length one too long or too short, or off by 64).
      b[off] = static_cast<std::byte>(static_cast<int>(b[off]) + delta);
      Reseal(b);
      ExpectRejected(b, "field at " + std::to_string(off) + " width " + std::to_string(width) +
                            " delta " + std::to_string(delta));
    }
  }
}

TEST_P(BundleMalformed, EveryFlippedBit) {
  // Every bit for small bundles; for large ones every bit of the header and the checksum and a
  // sample of the payload.
  const std::size_t bits = good_.size() * 8;
  const bool all = good_.size() <= 4096;
  std::vector<std::size_t> which;
  if (all) {
    for (std::size_t i = 0; i < bits; ++i) which.push_back(i);
  } else {
    const auto payload = FieldAt<std::uint16_t>(good_, 6);
    for (std::size_t i = 0; i < payload * 8u; ++i) which.push_back(i);
    for (std::size_t i = bits - 128; i < bits; ++i) which.push_back(i);
    std::mt19937_64 rng(3);
    for (int i = 0; i < 300; ++i) which.push_back(rng() % bits);
  }
  auto b = good_;
  for (std::size_t bit : which) {
    b[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    const Status v = codec_->Verify(b, id_);
    ASSERT_TRUE(v.IsCorruption()) << "bit " << bit << ": " << v;
    b[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  }
  // Decode checks through the same Verify; a few flips through Decode as well (a header bit is a
  // structural failure for DecodeOnePass too; a payload or checksum bit is found at the end).
  {
    auto f = good_;
    f[0] ^= std::byte{1};
    ExpectRejected(f, "flipped bit 0");
  }
  for (std::size_t bit : {bits / 2, bits - 1}) {
    auto f = good_;
    f[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    const Status d = codec_->Decode(f, id_, dst_->view(), 0);
    EXPECT_TRUE(d.IsCorruption()) << bit << ": " << d;
    ASSERT_EQ(dst_->Snapshot(0), before_) << bit << ": destination written";
    ExpectOnePassRejected(f, "flipped bit " + std::to_string(bit), /*structural=*/false);
  }
}

TEST_P(BundleMalformed, OnePassGoodBundleDecodes) {
  ASSERT_TRUE(codec_->DecodeOnePass(good_, id_, dst_->view(), 0).ok());
  EXPECT_EQ(dst_->Snapshot(0), src_->Snapshot(0));
  TestPool expected(other_->view().layout, 1, GetParam().pool_scale);
  ConvertingCopy(*src_, 0, expected, 0);
  ASSERT_TRUE(codec_->DecodeOnePassConverting(good_, id_, other_->view(), 0).ok());
  EXPECT_EQ(other_->Snapshot(0), expected.Snapshot(0));
}

TEST_P(BundleMalformed, OnePassFindsAFlippedByteInEveryComponentAndChunk) {
  // A byte flipped at each chunk boundary of each component (the copy is done in 16 KiB chunks),
  // its first and last byte, the padding after it, and the checksum trailer: kCorruption from the
  // one-pass decode, which copied (some of) the payload; then the good bundle decodes over it.
  constexpr std::size_t kChunk = 16 * 1024;
  std::vector<std::size_t> where;
  const int present = FieldAt<std::uint8_t>(good_, 54);
  for (int i = 0; i < present; ++i) {
    const std::size_t e = 64 + 40 * i;
    const auto off = FieldAt<std::uint64_t>(good_, e + 24);
    const auto bytes = FieldAt<std::uint64_t>(good_, e + 32);
    where.push_back(off);
    for (std::size_t c = kChunk; c < bytes; c += kChunk) {
      where.push_back(off + c - 1);
      where.push_back(off + c);
    }
    where.push_back(off + bytes - 1);  // the last chunk of the component
    if (off + bytes < good_.size() - 16) where.push_back(off + bytes);  // padding after it
  }
  for (std::size_t x = good_.size() - 16; x < good_.size(); x += 5) where.push_back(x);
  for (std::size_t x : where) {
    auto f = good_;
    f[x] ^= std::byte{0x20};
    const Status v = codec_->Verify(f, id_);
    EXPECT_TRUE(v.IsCorruption()) << "byte " << x << ": " << v;
    ExpectOnePassRejected(f, "flipped byte " + std::to_string(x), /*structural=*/false);
  }
  ASSERT_TRUE(codec_->DecodeOnePass(good_, id_, dst_->view(), 0).ok());
  EXPECT_EQ(dst_->Snapshot(0), src_->Snapshot(0));
}

TEST_P(BundleMalformed, WrongIdFingerprintOrPoolScale) {
  const ContentId other = IdFor(99);
  ExpectRejected(good_, "another content id expected", &other);

  // Another fingerprint, resealed: the fingerprint check catches it.
  auto fp = good_;
  fp[40] ^= std::byte{0x01};
  Reseal(fp);
  ExpectRejected(fp, "fingerprint changed");

  // A codec of another geometry (the other order) rejects the bundle.
  const KvPoolLayout other_layout =
      WithOrder(layout_, layout_.order() == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND);
  auto other_codec = BundleCodec::Create(other_layout, GetParam().pool_scale);
  ASSERT_TRUE(other_codec.ok());
  TestPool other_dst(other_layout, 1, GetParam().pool_scale);
  other_dst.FillByte(0, 0x77);
  const auto other_before = other_dst.Snapshot(0);
  EXPECT_TRUE(other_codec->Decode(good_, id_, other_dst.view(), 0).IsCorruption());
  EXPECT_EQ(other_dst.Snapshot(0), other_before);
  EXPECT_TRUE(other_codec->DecodeOnePass(good_, id_, other_dst.view(), 0).IsCorruption());
  EXPECT_EQ(other_dst.Snapshot(0), other_before) << "one pass";

  if (HasPoolScale(layout_.dtype)) {
    // The destination pool has another global scale: the bundle is not restored into it.
    auto scaled = BundleCodec::Create(layout_, GetParam().pool_scale * 2);
    ASSERT_TRUE(scaled.ok());
    TestPool scaled_dst(layout_, 1, GetParam().pool_scale * 2);
    scaled_dst.FillByte(0, 0x11);
    const auto scaled_before = scaled_dst.Snapshot(0);
    const Status st = scaled->Decode(good_, id_, scaled_dst.view(), 0);
    EXPECT_TRUE(st.IsCorruption()) << st;
    EXPECT_NE(st.message().find("pool scale"), std::string::npos) << st;
    EXPECT_EQ(scaled_dst.Snapshot(0), scaled_before);
    EXPECT_TRUE(scaled->DecodeOnePass(good_, id_, scaled_dst.view(), 0).IsCorruption());
    EXPECT_EQ(scaled_dst.Snapshot(0), scaled_before) << "one pass";
    // Even with the pool scale field rewritten and the checksum recomputed, the fingerprint (which
    // includes the scale) still differs.
    auto rewritten = good_;
    const float s2 = GetParam().pool_scale * 2;
    std::memcpy(rewritten.data() + 48, &s2, 4);
    Reseal(rewritten);
    EXPECT_TRUE(scaled->Verify(rewritten, id_).IsCorruption());
  }
}

std::vector<Shape> MalformedShapes() {
  std::vector<Shape> out;
  for (const auto& s : store_test::AllShapes()) {
    if (s.name == "small_odd_bf16_HND" || s.name == "small_odd_nvfp4_NHD" ||
        s.name == "dsv32_fp4_index_nvfp4_HND" || s.name == "dsv32_fp8_index_fp8_NHD" ||
        s.name == "mla576_fp8_per_tensor_HND" || s.name == "small_odd_int8_HND") {
      // Every component kind of the shape, with fewer layers (these tests copy the bundle often).
      Shape small = s;
      small.geometry.num_layers = std::min(small.geometry.num_layers, 2);
      small.geometry.index_layers = std::min(small.geometry.index_layers, 1);
      out.push_back(small);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BundleMalformed, ::testing::ValuesIn(MalformedShapes()),
                         ShapeName);

}  // namespace
}  // namespace kvmesh
