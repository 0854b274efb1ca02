// LayerRangeCodec (store/layer_range_codec.h): layer ranges of one pool block, the wire form of a
// streaming handoff (docs/bundle-format.md "Layer ranges").
#include "store/layer_range_codec.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/strings.h"
#include "store/bundle_internal.h"
#include "store/xxh3_stream.h"

namespace kvmesh {

using namespace bundle_internal;  // NOLINT(google-build-using-namespace): internal helpers

namespace {

// Layer range header fields.
constexpr std::int64_t kRangeOffBegin = 48;
constexpr std::int64_t kRangeOffEnd = 52;
constexpr std::int64_t kRangeOffLayers = 56;
constexpr std::int64_t kRangeOffComponents = 60;
constexpr std::int64_t kRangeOffOrder = 61;
constexpr std::int64_t kRangeOffDtype = 62;
// 63: reserved (0)

// The header field holding byte `offset` of a layer range header.
std::string_view RangeFieldName(std::int64_t offset) {
  if (offset < kOffVersion) return "magic";
  if (offset < kOffHeaderBytes) return "version";
  if (offset < kOffTotalBytes) return "header bytes";
  if (offset < kOffContentId) return "total bytes";
  if (offset < kOffFingerprint) return "content id";
  if (offset < kRangeOffBegin) return "geometry fingerprint";
  if (offset < kRangeOffEnd) return "layer begin";
  if (offset < kRangeOffLayers) return "layer end";
  if (offset < kRangeOffComponents) return "pool layers";
  if (offset == kRangeOffComponents) return "component count";
  if (offset == kRangeOffOrder) return "order";
  if (offset == kRangeOffDtype) return "dtype";
  return "reserved";
}

}  // namespace

Result<LayerRangeCodec> LayerRangeCodec::Create(const KvPoolLayout& layout, float pool_scale) {
  KVMESH_ASSIGN_OR_RETURN(BundleCodec bundle, BundleCodec::Create(layout, pool_scale));
  return LayerRangeCodec(std::move(bundle));
}

Status LayerRangeCodec::CheckRange(LayerSpan r) const {
  if (r.begin < 0 || r.end <= r.begin || r.end > num_layers()) {
    return Status::InvalidArgument(StrCat("layer range [", r.begin, ", ", r.end,
                                          ") is not a non-empty range of the pool's ", num_layers(),
                                          " layers"));
  }
  return Status::Ok();
}

std::int64_t LayerRangeCodec::OffsetInBlock(int c, LayerSpan r) const {
  const PagedTensorLayout& t = layout().components[c];
  if (t.num_layers != num_layers()) return 0;
  return r.begin * t.LayerStride() * t.bits / 8;
}

std::int64_t LayerRangeCodec::ComponentBytes(int c, LayerSpan r) const {
  const PagedTensorLayout& t = layout().components[c];
  if (!t.present()) return 0;
  if (t.num_layers == num_layers()) return (r.end - r.begin) * t.LayerStride() * t.bits / 8;
  return r.end == num_layers() ? t.BytesPerBlock() : 0;  // whole, with the last range
}

LayerRangeParts LayerRangeCodec::Parts(LayerSpan r) const {
  LayerRangeParts out;
  out.parts[static_cast<std::size_t>(out.count++)] = {0, kLayerRangeHeaderBytes, -1};
  std::int64_t pos = kLayerRangeHeaderBytes;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const std::int64_t n = ComponentBytes(c, r);
    if (n == 0) continue;
    out.parts[static_cast<std::size_t>(out.count++)] = {pos, n, c};
    pos = RoundUp(pos + n, kBundleAlignment);
  }
  out.parts[static_cast<std::size_t>(out.count++)] = {pos, kBundleChecksumBytes, -1};
  return out;
}

std::int64_t LayerRangeCodec::Bytes(LayerSpan r) const { return Parts(r).bytes(); }

KvPoolLayout LayerRangeCodec::RangeLayout(LayerSpan r) const {
  KvPoolLayout out = layout();
  for (int c = 0; c < kNumKvComponents; ++c) {
    PagedTensorLayout& t = out.components[c];
    if (ComponentBytes(c, r) == 0) {
      t = PagedTensorLayout{};
    } else if (t.num_layers == num_layers()) {
      t.num_layers = r.end - r.begin;
    }
  }
  return out;
}

KvPoolView LayerRangeCodec::BlockView(const KvPoolView& pool, std::int64_t block,
                                      LayerSpan r) const {
  KvPoolView v;
  v.layout = RangeLayout(r);
  v.num_blocks = 1;
  v.pool_scale = pool.pool_scale;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!v.layout.components[c].present()) continue;
    v.base[c] = pool.BlockBytes(static_cast<KvComponent>(c), block) + OffsetInBlock(c, r);
  }
  return v;
}

KvPoolView LayerRangeCodec::PayloadView(std::span<std::byte> piece, LayerSpan r) const {
  KVMESH_CHECK_GE(static_cast<std::int64_t>(piece.size()), Bytes(r));
  KvPoolView v;
  v.layout = RangeLayout(r);
  v.num_blocks = 1;
  v.pool_scale = pool_scale();
  const LayerRangeParts parts = Parts(r);  // the loop must not iterate a temporary
  for (const BundleRange& d : parts.all()) {
    if (d.component >= 0) v.base[d.component] = piece.data() + d.offset;
  }
  return v;
}

void LayerRangeCodec::Header(const ContentId& id, LayerSpan r, std::byte* h) const {
  std::memset(h, 0, kLayerRangeHeaderBytes);
  Store<std::uint32_t>(h + kOffMagic, kLayerRangeMagic);
  Store<std::uint16_t>(h + kOffVersion, kLayerRangeVersion);
  Store<std::uint16_t>(h + kOffHeaderBytes, static_cast<std::uint16_t>(kLayerRangeHeaderBytes));
  Store<std::uint64_t>(h + kOffTotalBytes, static_cast<std::uint64_t>(Bytes(r)));
  std::memcpy(h + kOffContentId, id.bytes.data(), ContentId::kBytes);
  std::memcpy(h + kOffFingerprint, fingerprint().bytes.data(), 16);
  Store<std::uint32_t>(h + kRangeOffBegin, static_cast<std::uint32_t>(r.begin));
  Store<std::uint32_t>(h + kRangeOffEnd, static_cast<std::uint32_t>(r.end));
  Store<std::uint32_t>(h + kRangeOffLayers, static_cast<std::uint32_t>(num_layers()));
  h[kRangeOffComponents] = static_cast<std::byte>(Parts(r).count - 2);
  h[kRangeOffOrder] = static_cast<std::byte>(layout().order());
  h[kRangeOffDtype] = static_cast<std::byte>(layout().dtype);
}

std::array<std::byte, kBundleChecksumBytes> LayerRangeCodec::Checksum(const std::byte* header,
                                                                      const KvPoolView& view,
                                                                      std::int64_t block,
                                                                      LayerSpan r) const {
  Xxh3Stream state;
  state.Update(header, kLayerRangeHeaderBytes);
  const LayerRangeParts parts = Parts(r);  // the loop must not iterate a temporary
  for (const BundleRange& d : parts.all()) {
    if (d.component < 0) continue;
    const std::byte* from = reinterpret_cast<const std::byte*>(
                                view.BlockBytes(static_cast<KvComponent>(d.component), block)) +
                            OffsetInBlock(d.component, r);
    state.Update(from, static_cast<std::size_t>(d.length));
    const std::int64_t pad = RoundUp(d.offset + d.length, kBundleAlignment) - d.offset - d.length;
    if (pad > 0) state.Update(kZeros, static_cast<std::size_t>(pad));
  }
  return state.Digest();
}

Status LayerRangeCodec::EncodeSeal(const KvPoolView& src, std::int64_t block, const ContentId& id,
                                   LayerSpan r, std::span<std::byte> seal) const {
  KVMESH_RETURN_IF_ERROR(CheckRange(r));
  KVMESH_RETURN_IF_ERROR(bundle_.CheckView(src, block));
  if (static_cast<std::int64_t>(seal.size()) < kLayerRangeSealBytes) {
    return Status::InvalidArgument(StrCat("layer range seal of ", seal.size(), " bytes"));
  }
  Header(id, r, seal.data());
  const auto sum = Checksum(seal.data(), src, block, r);
  std::memcpy(seal.data() + kLayerRangeHeaderBytes, sum.data(), sum.size());
  return Status::Ok();
}

Status LayerRangeCodec::Encode(const KvPoolView& src, std::int64_t block, const ContentId& id,
                               LayerSpan r, std::span<std::byte> out) const {
  KVMESH_RETURN_IF_ERROR(CheckRange(r));
  KVMESH_RETURN_IF_ERROR(bundle_.CheckView(src, block));
  const std::int64_t total = Bytes(r);
  if (static_cast<std::int64_t>(out.size()) < total) {
    return Status::InvalidArgument(
        StrCat("layer range: output of ", out.size(), " bytes, the range needs ", total));
  }
  std::array<std::byte, kLayerRangeSealBytes> seal;
  KVMESH_RETURN_IF_ERROR(EncodeSeal(src, block, id, r, seal));
  std::memcpy(out.data(), seal.data(), kLayerRangeHeaderBytes);
  ZeroPadding(out, r);
  const LayerRangeParts parts = Parts(r);  // the loop must not iterate a temporary
  for (const BundleRange& d : parts.all()) {
    if (d.component < 0) continue;
    const std::byte* from = reinterpret_cast<const std::byte*>(
                                src.BlockBytes(static_cast<KvComponent>(d.component), block)) +
                            OffsetInBlock(d.component, r);
    std::memcpy(out.data() + d.offset, from, static_cast<std::size_t>(d.length));
  }
  std::memcpy(out.data() + total - kBundleChecksumBytes, seal.data() + kLayerRangeHeaderBytes,
              kBundleChecksumBytes);
  return Status::Ok();
}

Status LayerRangeCodec::CheckHeader(const std::byte* header, const ContentId& id,
                                    LayerSpan r) const {
  std::array<std::byte, kLayerRangeHeaderBytes> expected;
  Header(id, r, expected.data());
  for (std::int64_t i = 0; i < kLayerRangeHeaderBytes; ++i) {
    if (header[i] == expected[static_cast<std::size_t>(i)]) continue;
    return Status::Corruption(
        StrCat("layer range [", r.begin, ", ", r.end, ") header field ", RangeFieldName(i),
               " differs from the expected one",
               i >= kOffContentId && i < kOffFingerprint
                   ? StrCat(" (", HexOf(header + kOffContentId, 16), ", expected ", id.ToHex(), ")")
                   : std::string()));
  }
  return Status::Ok();
}

Status LayerRangeCodec::Verify(std::span<const std::byte> piece, const ContentId& id,
                               LayerSpan r) const {
  KVMESH_RETURN_IF_ERROR(CheckRange(r));
  const std::int64_t total = Bytes(r);
  if (static_cast<std::int64_t>(piece.size()) != total) {
    return Status::Corruption(StrCat("layer range is ", piece.size(), " bytes, expected ", total));
  }
  KVMESH_RETURN_IF_ERROR(CheckHeader(piece.data(), id, r));
  const std::int64_t body = total - kBundleChecksumBytes;
  Xxh3Stream state;
  state.Update(piece.data(), static_cast<std::size_t>(body));
  const auto sum = state.Digest();
  if (std::memcmp(sum.data(), piece.data() + body, kBundleChecksumBytes) != 0) {
    return Status::Corruption(StrCat("layer range [", r.begin, ", ", r.end, ") checksum ",
                                     HexOf(piece.data() + body, 16), ", computed ",
                                     HexOf(sum.data(), 16)));
  }
  return Status::Ok();
}

Status LayerRangeCodec::VerifyInPlace(std::span<const std::byte> seal, const ContentId& id,
                                      LayerSpan r, const KvPoolView& view,
                                      std::int64_t block) const {
  KVMESH_RETURN_IF_ERROR(CheckRange(r));
  KVMESH_RETURN_IF_ERROR(bundle_.CheckView(view, block));
  if (static_cast<std::int64_t>(seal.size()) < kLayerRangeSealBytes) {
    return Status::Corruption(
        StrCat("layer range seal of ", seal.size(), " bytes, expected ", kLayerRangeSealBytes));
  }
  // Every header byte is checked, so the bytes hashed below are the header received.
  KVMESH_RETURN_IF_ERROR(CheckHeader(seal.data(), id, r));
  const auto sum = Checksum(seal.data(), view, block, r);
  const std::byte* got = seal.data() + kLayerRangeHeaderBytes;
  if (std::memcmp(sum.data(), got, kBundleChecksumBytes) != 0) {
    return Status::Corruption(StrCat("layer range [", r.begin, ", ", r.end, ") checksum ",
                                     HexOf(got, 16), ", computed ", HexOf(sum.data(), 16),
                                     " (the block was written: do not publish it)"));
  }
  return Status::Ok();
}

void LayerRangeCodec::ZeroPadding(std::span<std::byte> piece, LayerSpan r) const {
  KVMESH_CHECK_GE(static_cast<std::int64_t>(piece.size()), Bytes(r));
  std::int64_t end = 0;
  const LayerRangeParts parts = Parts(r);  // the loop must not iterate a temporary
  for (const BundleRange& d : parts.all()) {
    if (d.offset > end)
      std::memset(piece.data() + end, 0, static_cast<std::size_t>(d.offset - end));
    end = d.offset + d.length;
  }
}

}  // namespace kvmesh
