#include "store/block_bundle.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "common/strings.h"
#include "store/bundle_internal.h"
#include "store/stream_copy.h"
#include "store/xxh3_stream.h"

namespace kvmesh {
namespace {

using namespace bundle_internal;  // NOLINT(google-build-using-namespace): internal helpers

// Bundle header fields after the fingerprint (docs/bundle-format.md).
constexpr std::int64_t kOffPoolScale = 48;
constexpr std::int64_t kOffDtype = 52;
constexpr std::int64_t kOffLayout = 53;
constexpr std::int64_t kOffNumComponents = 54;
// 55: flags (0); 56..63: reserved (0).

// Component table entry fields, relative to the entry.
constexpr std::int64_t kEntKind = 0;
constexpr std::int64_t kEntBits = 1;
constexpr std::int64_t kEntOrder = 2;
// 3: reserved (0)
constexpr std::int64_t kEntLayers = 4;
constexpr std::int64_t kEntKvFactor = 8;
constexpr std::int64_t kEntHeads = 12;
constexpr std::int64_t kEntTokens = 16;
constexpr std::int64_t kEntInner = 20;
constexpr std::int64_t kEntOffset = 24;
constexpr std::int64_t kEntBytes = 32;

// The component table field holding byte `offset` of an entry.
std::string_view EntryFieldName(std::int64_t offset) {
  if (offset == kEntKind) return "kind";
  if (offset == kEntBits) return "bits";
  if (offset == kEntOrder) return "order";
  if (offset < kEntLayers) return "reserved";
  if (offset < kEntKvFactor) return "layers";
  if (offset < kEntHeads) return "kv_factor";
  if (offset < kEntTokens) return "heads";
  if (offset < kEntInner) return "tokens_per_block";
  if (offset < kEntOffset) return "inner";
  if (offset < kEntBytes) return "offset";
  return "bytes";
}

// The payload size of component c (0 when absent).
std::int64_t ComponentBytes(const KvPoolLayout& l, int c) {
  return l.components[c].present() ? l.components[c].BytesPerBlock() : 0;
}

}  // namespace

std::string GeometryFingerprint::ToHex() const { return HexEncode(bytes.data(), bytes.size()); }

GeometryFingerprint FingerprintOf(const KvPoolLayout& layout, float pool_scale) {
  // Canonical record: tag, dtype, then per component (present, order, bits, 0, layers, kv_factor,
  // heads, tokens_per_block, inner), then the pool scale bits (1.0f for dtypes without one).
  std::vector<std::byte> rec;
  constexpr std::string_view kTag = "kvmesh.geometry.v1";
  auto put = [&rec](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    rec.insert(rec.end(), b, b + n);
  };
  put(kTag.data(), kTag.size());
  const auto dtype = static_cast<std::uint8_t>(layout.dtype);
  put(&dtype, 1);
  for (const auto& c : layout.components) {
    const std::uint8_t head[4] = {static_cast<std::uint8_t>(c.present() ? 1 : 0),
                                  static_cast<std::uint8_t>(c.present() ? c.order : KvLayout{}),
                                  static_cast<std::uint8_t>(c.present() ? c.bits : 0), 0};
    put(head, 4);
    const std::int32_t shape[5] = {c.present() ? c.num_layers : 0, c.present() ? c.kv_factor : 0,
                                   c.present() ? c.num_heads : 0,
                                   c.present() ? c.tokens_per_block : 0, c.present() ? c.inner : 0};
    put(shape, sizeof(shape));
  }
  const float scale = HasPoolScale(layout.dtype) ? pool_scale : 1.0f;
  put(&scale, sizeof(scale));
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits(rec.data(), rec.size()));
  GeometryFingerprint fp;
  std::memcpy(fp.bytes.data(), canon.digest, fp.bytes.size());
  return fp;
}

Result<BundleCodec> BundleCodec::Create(const KvPoolLayout& layout, float pool_scale) {
  if (!layout.data().present()) {
    return Status::InvalidArgument("bundle codec: the layout has no data component");
  }
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = layout.components[c];
    if (!t.present()) continue;
    const auto name = KvComponentName(static_cast<KvComponent>(c));
    if (t.bits != 4 && t.bits != 8 && t.bits != 16 && t.bits != 32) {
      return Status::InvalidArgument(StrCat("bundle codec: component ", name, " bits ", t.bits));
    }
    if (t.kv_factor <= 0 || t.num_heads <= 0 || t.tokens_per_block <= 0 || t.inner <= 0 ||
        (t.bits == 4 && t.inner % 2 != 0)) {
      return Status::InvalidArgument(StrCat("bundle codec: component ", name, " has a bad shape"));
    }
  }
  const bool has_scale = HasPoolScale(layout.dtype);
  if (has_scale && !(std::isfinite(pool_scale) && pool_scale > 0.0f)) {
    return Status::InvalidArgument(StrCat("bundle codec: pool_scale ", pool_scale, " for dtype ",
                                          KvDtypeName(layout.dtype),
                                          " must be finite and positive"));
  }
  BundleCodec codec;
  codec.layout_ = layout;
  codec.pool_scale_ = has_scale ? pool_scale : 1.0f;
  codec.fingerprint_ = FingerprintOf(layout, codec.pool_scale_);
  for (const auto& t : layout.components) codec.num_components_ += t.present() ? 1 : 0;
  codec.payload_offset_ = RoundUp(
      kBundleFixedHeaderBytes + codec.num_components_ * kBundleTableEntryBytes, kBundleAlignment);
  std::int64_t offset = codec.payload_offset_;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!layout.components[c].present()) {
      codec.component_offset_[c] = -1;
      continue;
    }
    codec.component_offset_[c] = offset;
    offset = RoundUp(offset + ComponentBytes(layout, c), kBundleAlignment);
  }
  codec.bundle_bytes_ = offset + kBundleChecksumBytes;
  codec.data_ranges_.push_back({0, codec.payload_offset_, -1});
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (codec.component_offset_[c] < 0) continue;
    codec.data_ranges_.push_back({codec.component_offset_[c], ComponentBytes(layout, c), c});
  }
  codec.data_ranges_.push_back({offset, kBundleChecksumBytes, -1});

  codec.BuildHeaderTemplate();
  return codec;
}

void BundleCodec::BuildHeaderTemplate() {
  // The header of every bundle of this pool, with a zero content id.
  auto& h = header_template_;
  h.assign(payload_offset_, std::byte{0});
  Store<std::uint32_t>(&h[kOffMagic], kBundleMagic);
  Store<std::uint16_t>(&h[kOffVersion], kBundleVersion);
  Store<std::uint16_t>(&h[kOffHeaderBytes], static_cast<std::uint16_t>(payload_offset_));
  Store<std::uint64_t>(&h[kOffTotalBytes], static_cast<std::uint64_t>(bundle_bytes_));
  std::memcpy(&h[kOffFingerprint], fingerprint_.bytes.data(), 16);
  Store<float>(&h[kOffPoolScale], pool_scale_);
  h[kOffDtype] = static_cast<std::byte>(layout_.dtype);
  h[kOffLayout] = static_cast<std::byte>(layout_.order());
  h[kOffNumComponents] = static_cast<std::byte>(num_components_);
  std::int64_t e = kBundleFixedHeaderBytes;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = layout_.components[c];
    if (!t.present()) continue;
    h[e + kEntKind] = static_cast<std::byte>(c);
    h[e + kEntBits] = static_cast<std::byte>(t.bits);
    h[e + kEntOrder] = static_cast<std::byte>(t.order);
    Store<std::int32_t>(&h[e + kEntLayers], t.num_layers);
    Store<std::int32_t>(&h[e + kEntKvFactor], t.kv_factor);
    Store<std::int32_t>(&h[e + kEntHeads], t.num_heads);
    Store<std::int32_t>(&h[e + kEntTokens], t.tokens_per_block);
    Store<std::int32_t>(&h[e + kEntInner], t.inner);
    Store<std::uint64_t>(&h[e + kEntOffset], static_cast<std::uint64_t>(component_offset_[c]));
    Store<std::uint64_t>(&h[e + kEntBytes], static_cast<std::uint64_t>(ComponentBytes(layout_, c)));
    e += kBundleTableEntryBytes;
  }
}

Status BundleCodec::CheckView(const KvPoolView& view, std::int64_t block) const {
  if (!(view.layout == layout_)) {
    return Status::InvalidArgument(
        StrCat("bundle codec: the pool view's layout differs from the codec's (dtype ",
               KvDtypeName(view.layout.dtype), " vs ", KvDtypeName(layout_.dtype), ", order ",
               KvLayoutName(view.layout.order()), " vs ", KvLayoutName(layout_.order()), ")"));
  }
  if (HasPoolScale(layout_.dtype) && view.pool_scale != pool_scale_) {
    return Status::InvalidArgument(StrCat("bundle codec: the pool view's pool_scale ",
                                          view.pool_scale, " differs from the codec's ",
                                          pool_scale_));
  }
  if (block < 0 || block >= view.num_blocks) {
    return Status::InvalidArgument(
        StrCat("bundle codec: block ", block, " outside [0, ", view.num_blocks, ")"));
  }
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (layout_.components[c].present() && view.base[c] == nullptr) {
      return Status::InvalidArgument(StrCat("bundle codec: no base for component ",
                                            KvComponentName(static_cast<KvComponent>(c))));
    }
  }
  return Status::Ok();
}

Status BundleCodec::EncodePieces(const KvPoolView& src, std::int64_t block, const ContentId& id,
                                 BundlePieces* out) const {
  KVMESH_RETURN_IF_ERROR(CheckView(src, block));
  std::memcpy(out->header.data(), header_template_.data(), payload_offset_);
  std::memcpy(out->header.data() + kOffContentId, id.bytes.data(), ContentId::kBytes);
  out->count = 0;
  out->pieces[out->count++] = {out->header.data(), static_cast<std::size_t>(payload_offset_)};
  std::int64_t end = payload_offset_;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (component_offset_[c] < 0) continue;
    const auto comp = static_cast<KvComponent>(c);
    const std::int64_t n = ComponentBytes(layout_, c);
    out->pieces[out->count++] = {reinterpret_cast<const std::byte*>(src.BlockBytes(comp, block)),
                                 static_cast<std::size_t>(n)};
    end = component_offset_[c] + n;
    const std::int64_t pad = RoundUp(end, kBundleAlignment) - end;
    if (pad > 0) out->pieces[out->count++] = {kZeros, static_cast<std::size_t>(pad)};
  }
  Xxh3Stream state;
  for (int i = 0; i < out->count; ++i) state.Update(out->pieces[i].data(), out->pieces[i].size());
  out->checksum = state.Digest();
  out->pieces[out->count++] = {out->checksum.data(), out->checksum.size()};
  return Status::Ok();
}

Status BundleCodec::EncodeSeal(const KvPoolView& src, std::int64_t block, const ContentId& id,
                               std::span<std::byte> out) const {
  if (static_cast<std::int64_t>(out.size()) < bundle_bytes_) {
    return Status::InvalidArgument(
        StrCat("bundle codec: output of ", out.size(), " bytes, a bundle needs ", bundle_bytes_));
  }
  BundlePieces pieces;
  KVMESH_RETURN_IF_ERROR(EncodePieces(src, block, id, &pieces));
  std::memcpy(out.data(), pieces.header.data(), payload_offset_);
  std::memcpy(out.data() + bundle_bytes_ - kBundleChecksumBytes, pieces.checksum.data(),
              kBundleChecksumBytes);
  return Status::Ok();
}

Status BundleCodec::VerifyInPlace(std::span<const std::byte> seal, const ContentId& id,
                                  const KvPoolView& view, std::int64_t block) const {
  KVMESH_RETURN_IF_ERROR(CheckView(view, block));
  if (static_cast<std::int64_t>(seal.size()) < bundle_bytes_) {
    return Status::Corruption(
        StrCat("bundle seal of ", seal.size(), " bytes, a bundle needs ", bundle_bytes_));
  }
  const std::span<const std::byte> bundle = seal.first(static_cast<std::size_t>(bundle_bytes_));
  // Every header byte is checked here (it must equal the template with this id), so the pieces
  // EncodePieces hashes — the template's header, the block, zero padding — are the bytes received.
  KVMESH_RETURN_IF_ERROR(VerifyStructure(bundle, id));
  BundlePieces pieces;
  KVMESH_RETURN_IF_ERROR(EncodePieces(view, block, id, &pieces));
  const std::byte* sum = bundle.data() + bundle_bytes_ - kBundleChecksumBytes;
  if (std::memcmp(pieces.checksum.data(), sum, kBundleChecksumBytes) != 0) {
    return Status::Corruption(StrCat("bundle checksum ", HexOf(sum, 16), ", computed ",
                                     HexOf(pieces.checksum.data(), 16),
                                     " (the block was written: do not publish it)"));
  }
  return Status::Ok();
}

void BundleCodec::ZeroPadding(std::span<std::byte> bundle) const {
  KVMESH_CHECK_GE(static_cast<std::int64_t>(bundle.size()), bundle_bytes_);
  std::int64_t end = 0;  // of the previous range
  for (const BundleRange& r : data_ranges_) {
    if (r.offset > end) std::memset(bundle.data() + end, 0, r.offset - end);
    end = r.offset + r.length;
  }
}

Status BundleCodec::Encode(const KvPoolView& src, std::int64_t block, const ContentId& id,
                           std::span<std::byte> out) const {
  if (static_cast<std::int64_t>(out.size()) < bundle_bytes_) {
    return Status::InvalidArgument(
        StrCat("bundle codec: output of ", out.size(), " bytes, a bundle needs ", bundle_bytes_));
  }
  KVMESH_RETURN_IF_ERROR(CheckView(src, block));
  std::byte* dst = out.data();
  std::memcpy(dst, header_template_.data(), payload_offset_);
  std::memcpy(dst + kOffContentId, id.bytes.data(), ContentId::kBytes);
  Xxh3Stream state;
  state.Update(dst, payload_offset_);
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (component_offset_[c] < 0) continue;
    const auto* from =
        reinterpret_cast<const std::byte*>(src.BlockBytes(static_cast<KvComponent>(c), block));
    const std::int64_t n = ComponentBytes(layout_, c);
    // One pass over the source: each stripe is loaded once, hashed and stored (streaming stores).
    state.CopyUpdate(dst + component_offset_[c], from, static_cast<std::size_t>(n));
    const std::int64_t end = component_offset_[c] + n;
    const std::int64_t pad = RoundUp(end, kBundleAlignment) - end;
    if (pad > 0) {
      std::memset(dst + end, 0, pad);
      state.Update(dst + end, pad);
    }
  }
  StreamingFence();
  const auto sum = state.Digest();
  std::memcpy(dst + bundle_bytes_ - kBundleChecksumBytes, sum.data(), sum.size());
  return Status::Ok();
}

Status BundleCodec::VerifyStructure(std::span<const std::byte> bundle, const ContentId& id) const {
  const auto size = static_cast<std::int64_t>(bundle.size());
  const std::byte* b = bundle.data();
  if (size < kBundleFixedHeaderBytes) {
    return Status::Corruption(StrCat("bundle truncated: ", size, " bytes, the header alone is ",
                                     kBundleFixedHeaderBytes));
  }
  if (const auto magic = Load<std::uint32_t>(b + kOffMagic); magic != kBundleMagic) {
    return Status::Corruption(StrCat("bundle magic ", HexOf(b + kOffMagic, 4), " is not KVMB"));
  }
  if (const auto v = Load<std::uint16_t>(b + kOffVersion); v != kBundleVersion) {
    return Status::Corruption(StrCat("bundle version ", v, " is not ", kBundleVersion));
  }
  if (const auto hb = Load<std::uint16_t>(b + kOffHeaderBytes); hb != payload_offset_) {
    return Status::Corruption(StrCat("bundle header bytes ", hb, ", expected ", payload_offset_));
  }
  if (const auto tb = Load<std::uint64_t>(b + kOffTotalBytes);
      tb != static_cast<std::uint64_t>(bundle_bytes_)) {
    return Status::Corruption(
        StrCat("bundle total bytes field ", tb, ", expected ", bundle_bytes_));
  }
  if (size != bundle_bytes_) {
    return Status::Corruption(StrCat("bundle is ", size, " bytes, expected ", bundle_bytes_,
                                     size < bundle_bytes_ ? " (truncated)" : " (trailing bytes)"));
  }
  // From here on every offset the codec uses lies inside the bundle.
  if (Load<std::uint8_t>(b + kOffDtype) != static_cast<std::uint8_t>(layout_.dtype)) {
    return Status::Corruption(StrCat("bundle dtype ", int{Load<std::uint8_t>(b + kOffDtype)},
                                     ", expected ", KvDtypeName(layout_.dtype)));
  }
  if (Load<std::uint8_t>(b + kOffLayout) != static_cast<std::uint8_t>(layout_.order())) {
    return Status::Corruption(StrCat("bundle layout ", int{Load<std::uint8_t>(b + kOffLayout)},
                                     ", expected ", KvLayoutName(layout_.order())));
  }
  if (Load<std::uint8_t>(b + kOffNumComponents) != num_components_) {
    return Status::Corruption(StrCat("bundle has ", int{Load<std::uint8_t>(b + kOffNumComponents)},
                                     " components, expected ", num_components_));
  }
  if (std::memcmp(b + kOffPoolScale, header_template_.data() + kOffPoolScale, 4) != 0) {
    return Status::Corruption(StrCat("bundle pool scale ", Load<float>(b + kOffPoolScale),
                                     ", the pool's is ", pool_scale_));
  }
  if (std::memcmp(b + kOffFingerprint, fingerprint_.bytes.data(), 16) != 0) {
    return Status::Corruption(StrCat("bundle geometry fingerprint ", HexOf(b + kOffFingerprint, 16),
                                     ", the pool's is ", fingerprint_.ToHex()));
  }
  if (std::memcmp(b + kOffContentId, id.bytes.data(), ContentId::kBytes) != 0) {
    return Status::Corruption(
        StrCat("bundle content id ", HexOf(b + kOffContentId, 16), ", expected ", id.ToHex()));
  }
  KVMESH_RETURN_IF_ERROR(VerifyTable(b));
  // Whatever is left of the header: flags, reserved bytes, padding.
  if (std::memcmp(b, header_template_.data(), kOffContentId) != 0 ||
      std::memcmp(b + kOffFingerprint, header_template_.data() + kOffFingerprint,
                  payload_offset_ - kOffFingerprint) != 0) {
    return Status::Corruption("bundle header reserved bytes or padding are not zero");
  }
  return Status::Ok();
}

Status BundleCodec::VerifyTable(const std::byte* b) const {
  for (int i = 0; i < num_components_; ++i) {
    const std::int64_t e = kBundleFixedHeaderBytes + i * kBundleTableEntryBytes;
    for (std::int64_t f = 0; f < kBundleTableEntryBytes; ++f) {
      if (b[e + f] != header_template_[e + f]) {
        return Status::Corruption(StrCat("bundle component table entry ", i, " field ",
                                         EntryFieldName(f), " differs from the pool's"));
      }
    }
  }
  return Status::Ok();
}

Status BundleCodec::Verify(std::span<const std::byte> bundle, const ContentId& id) const {
  KVMESH_RETURN_IF_ERROR(VerifyStructure(bundle, id));
  const std::int64_t body = bundle_bytes_ - kBundleChecksumBytes;
  Xxh3Stream state;
  state.Update(bundle.data(), static_cast<std::size_t>(body));
  const auto sum = state.Digest();
  if (std::memcmp(sum.data(), bundle.data() + body, kBundleChecksumBytes) != 0) {
    return Status::Corruption(StrCat("bundle checksum ", HexOf(bundle.data() + body, 16),
                                     ", computed ", HexOf(sum.data(), 16)));
  }
  return Status::Ok();
}

template <typename CopyComponent>
Status BundleCodec::OnePass(std::span<const std::byte> bundle, const ContentId& id,
                            CopyComponent&& copy_component) const {
  KVMESH_RETURN_IF_ERROR(VerifyStructure(bundle, id));  // before any byte is copied
  const std::byte* b = bundle.data();
  Xxh3Stream state;
  std::int64_t pos = 0;  // bytes hashed so far
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (component_offset_[c] < 0) continue;
    const std::int64_t off = component_offset_[c];
    state.Update(b + pos, static_cast<std::size_t>(off - pos));  // header, table, padding
    copy_component(c, b + off, state);
    pos = off + ComponentBytes(layout_, c);
  }
  const std::int64_t body = bundle_bytes_ - kBundleChecksumBytes;
  state.Update(b + pos, static_cast<std::size_t>(body - pos));
  const auto sum = state.Digest();
  if (std::memcmp(sum.data(), b + body, kBundleChecksumBytes) != 0) {
    return Status::Corruption(StrCat("bundle checksum ", HexOf(b + body, 16), ", computed ",
                                     HexOf(sum.data(), 16),
                                     " (the destination was written: do not publish it)"));
  }
  return Status::Ok();
}

Status BundleCodec::DecodeOnePass(std::span<const std::byte> bundle, const ContentId& id,
                                  const KvPoolView& dst, std::int64_t block) const {
  KVMESH_RETURN_IF_ERROR(CheckView(dst, block));
  const Status st = OnePass(bundle, id, [&](int c, const std::byte* in, Xxh3Stream& hash) {
    auto* to = reinterpret_cast<std::byte*>(dst.BlockBytes(static_cast<KvComponent>(c), block));
    // One pass: each stripe of the bundle is loaded once, hashed and stored (streaming stores).
    hash.CopyUpdate(to, in, static_cast<std::size_t>(ComponentBytes(layout_, c)));
  });
  StreamingFence();
  return st;
}

Status BundleCodec::DecodeOnePassConverting(std::span<const std::byte> bundle, const ContentId& id,
                                            const KvPoolView& dst, std::int64_t block) const {
  const KvLayout other = layout_.order() == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
  if (!(dst.layout == WithOrder(layout_, other))) {
    return Status::InvalidArgument(
        StrCat("bundle codec: a converting decode needs the codec's layout in the other order (",
               KvLayoutName(other), "); the pool view's is ", KvLayoutName(dst.layout.order()),
               ", dtype ", KvDtypeName(dst.layout.dtype), " vs ", KvDtypeName(layout_.dtype)));
  }
  KvPoolView as_ours = dst;  // CheckView for everything but the order
  as_ours.layout = layout_;
  KVMESH_RETURN_IF_ERROR(CheckView(as_ours, block));
  const Status st = OnePass(bundle, id, [&](int c, const std::byte* in, Xxh3Stream& hash) {
    const PagedTensorLayout& from = layout_.components[c];
    const PagedTensorLayout& to = dst.layout.components[c];
    auto* out = reinterpret_cast<std::byte*>(dst.BlockBytes(static_cast<KvComponent>(c), block));
    const std::int64_t row = from.RowBytes();
    const std::int64_t bits = from.bits;
    const std::int64_t range = from.KvStride() * bits / 8;  // one (layer, K/V): both orders
    const std::int64_t ranges = std::int64_t{from.num_layers} * from.kv_factor;
    // The source's rows in their order: (head, token) from HND, (token, head) from NHD; each
    // written to its place in the other order, in the same pass as the hash.
    const bool hnd = from.order == KvLayout::kHND;
    const std::int64_t outer = hnd ? from.num_heads : from.tokens_per_block;
    const std::int64_t inner = hnd ? from.tokens_per_block : from.num_heads;
    const std::int64_t outer_stride = (hnd ? to.HeadStride() : to.TokenStride()) * bits / 8;
    const std::int64_t inner_stride = (hnd ? to.TokenStride() : to.HeadStride()) * bits / 8;
    for (std::int64_t r = 0; r < ranges; ++r, in += range, out += range) {
      hash.CopyUpdateRows(out, outer_stride, inner_stride, outer, inner, in,
                          static_cast<std::size_t>(row));
    }
  });
  StreamingFence();
  return st;
}

Status BundleCodec::Decode(std::span<const std::byte> bundle, const ContentId& id,
                           const KvPoolView& dst, std::int64_t block) const {
  KVMESH_RETURN_IF_ERROR(CheckView(dst, block));
  KVMESH_RETURN_IF_ERROR(Verify(bundle, id));
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (component_offset_[c] < 0) continue;
    // Verify just read the bundle, so the copy reads it from cache.
    CopyStreaming(dst.BlockBytes(static_cast<KvComponent>(c), block),
                  bundle.data() + component_offset_[c], ComponentBytes(layout_, c));
  }
  return Status::Ok();
}

}  // namespace kvmesh
