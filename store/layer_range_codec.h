// LayerRangeCodec: layers [begin, end) of one pool block in their wire form — what a streaming
// handoff moves (node/handoff.h; byte by byte in docs/bundle-format.md "Layer ranges").
//
// Within a block a layer is contiguous in every component in both orders ([layers, kv, heads,
// tokens, inner] or [layers, kv, tokens, heads, inner]), so a range is one contiguous byte range
// per component. A component with another layer count than the data component (a sparse-attention
// indexer present on some layers) is not cut: it travels whole with the range that ends at the last
// layer.
//
//   [header 64 B: magic "KVML", version, header bytes, total bytes, content id, geometry
//    fingerprint, layer begin, layer end, the pool's layers, component count, order]
//   [payload: each component's bytes of the range, in kind order, each on a multiple of 64, zero
//    padding between]
//   [checksum 16 B: XXH3-128 of every byte before it, canonical form]
//
// The checksum covers the header, so a range is bound to its content id, its geometry and its
// layers: a range of another block, of another pool or of other layers fails verification. The
// size of a range's wire form depends only on the pool's layout and the range, so a receiver
// computes every length and offset itself; nothing in a range is ever used as an offset.
// A range's "seal" is its header and checksum (kLayerRangeSealBytes: the header, then the
// checksum), which travel apart from its payload when the payload goes straight from the sender's
// pool into the receiver's (EncodeSeal / VerifyInPlace).
//
// Thread safety: immutable after Create; every method is const. Callers own all memory.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "common/content_id.h"
#include "common/result.h"
#include "kernels/paged_kv_layout.h"
#include "store/block_bundle.h"

namespace kvmesh {

struct LayerSpan {
  std::int32_t begin = 0;
  std::int32_t end = 0;  // exclusive
  [[nodiscard]] bool empty() const { return end <= begin; }
  friend bool operator==(const LayerSpan&, const LayerSpan&) = default;
};

inline constexpr std::uint32_t kLayerRangeMagic = 0x4C4D564B;  // bytes 'K' 'V' 'M' 'L'
inline constexpr std::uint16_t kLayerRangeVersion = 1;
inline constexpr std::int64_t kLayerRangeHeaderBytes = 64;
inline constexpr std::int64_t kLayerRangeSealBytes = kLayerRangeHeaderBytes + kBundleChecksumBytes;

// The byte ranges of a range's wire form that are not padding, in order: the header, each
// component of the range, the checksum (component -1 for header and checksum). A value: no
// allocation.
struct LayerRangeParts {
  std::array<BundleRange, kNumKvComponents + 2> parts{};
  int count = 0;
  // A view into this object: iterate a named LayerRangeParts, or the value itself (begin/end,
  // which keeps a temporary alive for the loop), never all() of a temporary.
  [[nodiscard]] std::span<const BundleRange> all() const {
    return {parts.data(), static_cast<std::size_t>(count)};
  }
  [[nodiscard]] const BundleRange* begin() const { return parts.data(); }
  [[nodiscard]] const BundleRange* end() const { return parts.data() + count; }
  // Bytes of the wire form, header and checksum included.
  [[nodiscard]] std::int64_t bytes() const {
    return parts[static_cast<std::size_t>(count - 1)].offset +
           parts[static_cast<std::size_t>(count - 1)].length;
  }
};

class LayerRangeCodec {
 public:
  // kInvalidArgument as BundleCodec::Create.
  static Result<LayerRangeCodec> Create(const KvPoolLayout& layout, float pool_scale);

  [[nodiscard]] const KvPoolLayout& layout() const { return bundle_.layout(); }
  [[nodiscard]] float pool_scale() const { return bundle_.pool_scale(); }
  [[nodiscard]] const GeometryFingerprint& fingerprint() const { return bundle_.fingerprint(); }
  // The data component's layers: ranges lie in [0, num_layers()).
  [[nodiscard]] std::int32_t num_layers() const { return layout().data().num_layers; }

  // OK when 0 <= begin < end <= num_layers(); else kInvalidArgument. Every method below
  // REQUIRES a range that passes.
  [[nodiscard]] Status CheckRange(LayerSpan r) const;
  // Bytes of the range's wire form, header and checksum included.
  [[nodiscard]] std::int64_t Bytes(LayerSpan r) const;
  // The parts of the wire form that are not padding (every other byte is zero).
  [[nodiscard]] LayerRangeParts Parts(LayerSpan r) const;
  // The layout of one block's range seen as a one-block pool: components cut to the range's
  // layers, a whole component that does not travel with it absent.
  [[nodiscard]] KvPoolLayout RangeLayout(LayerSpan r) const;
  // One-block views (RangeLayout) of block `block`'s range inside `pool`, and of the payload of
  // a range's wire form in `piece`: pointer arithmetic only, nothing is read.
  [[nodiscard]] KvPoolView BlockView(const KvPoolView& pool, std::int64_t block, LayerSpan r) const;
  [[nodiscard]] KvPoolView PayloadView(std::span<std::byte> piece, LayerSpan r) const;

  // Writes block `block`'s range of `src` into out[0, Bytes(r)). kInvalidArgument: a view of
  // another pool (BundleCodec::CheckView), a bad range or a short `out`.
  Status Encode(const KvPoolView& src, std::int64_t block, const ContentId& id, LayerSpan r,
                std::span<std::byte> out) const;
  // As Encode, but writes only the seal (header, then checksum) into seal[0,
  // kLayerRangeSealBytes): the payload goes from `src` itself. Reads each source byte once.
  Status EncodeSeal(const KvPoolView& src, std::int64_t block, const ContentId& id, LayerSpan r,
                    std::span<std::byte> seal) const;
  // Checks a range's wire form completely (size, every header field, checksum). OK or
  // kCorruption naming the first failed check; kInvalidArgument for a bad range.
  Status Verify(std::span<const std::byte> piece, const ContentId& id, LayerSpan r) const;
  // Verifies a range whose payload was received in place, into block `block`'s range of `view`,
  // and whose seal is `seal`: the header checked completely, then the checksum over it, the
  // block's range and zero padding. OK or kCorruption (the range then holds unspecified bytes: do
  // not publish the block). REQUIRES: nobody writes the range during the call.
  Status VerifyInPlace(std::span<const std::byte> seal, const ContentId& id, LayerSpan r,
                       const KvPoolView& view, std::int64_t block) const;
  // Writes zeros into the padding of piece[0, Bytes(r)) (a range received range by range).
  void ZeroPadding(std::span<std::byte> piece, LayerSpan r) const;

 private:
  explicit LayerRangeCodec(BundleCodec bundle) : bundle_(std::move(bundle)) {}
  // Component c's range: its offset inside a block and its bytes (0: not in the range).
  [[nodiscard]] std::int64_t OffsetInBlock(int c, LayerSpan r) const;
  [[nodiscard]] std::int64_t ComponentBytes(int c, LayerSpan r) const;
  void Header(const ContentId& id, LayerSpan r, std::byte* out) const;
  // XXH3-128 of the wire form's bytes before the checksum, with the payload read from `view`.
  [[nodiscard]] std::array<std::byte, kBundleChecksumBytes> Checksum(const std::byte* header,
                                                                     const KvPoolView& view,
                                                                     std::int64_t block,
                                                                     LayerSpan r) const;
  Status CheckHeader(const std::byte* header, const ContentId& id, LayerSpan r) const;

  BundleCodec bundle_;  // the pool's layout, scale and fingerprint
};

}  // namespace kvmesh
