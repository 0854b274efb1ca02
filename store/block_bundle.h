// Block bundles: the serialised form of one complete pool block — what the host tier and the
// RocksDB tier store, and what is verified before a block is restored.
//
// A bundle (format version 1, byte by byte in docs/bundle-format.md):
//
//   [fixed header 64 B: magic "KVMB", version, header bytes, total bytes, content id,
//    geometry fingerprint, pool scale, dtype, layout, component count]
//   [component table: 40 B per present component — kind, bits, order, layers, kv_factor, heads,
//    tokens_per_block, inner, offset, bytes]
//   [zero padding to a multiple of 64]
//   [payload: each present component's bytes of the block, in kind order (data, scale, index_k,
//    index_scale), each starting on a multiple of 64, zero padding between]
//   [checksum 16 B: XXH3-128 of every byte before it, canonical (big-endian) form]
//
// The checksum covers the header, so it is bound to the content id and to the geometry (the
// fingerprint and the explicit shape fields). The payload is each component's block in the pool's
// own order (HND or NHD), exactly the bytes KvPoolView::BlockBytes points at.
//
// GeometryFingerprint: XXH3-128 of a canonical record of the pool layout (dtype; per component its
// presence, order, bits and shape) and of the pool-wide scale for the dtypes that have one
// (fp8_per_tensor, nvfp4). Two pools whose blocks are interchangeable have equal fingerprints; a
// block written under another global scale or order is not interchangeable.
//
// BundleCodec is built once per pool (layout + pool scale) and then encodes and decodes blocks of
// that pool. Decode verifies everything before writing a byte of the destination: a bundle that
// is truncated, too long, has a wrong length or shape field, another fingerprint, another pool
// scale, another content id or a bad checksum gives kCorruption (the message names the first
// failed check), and the destination block is untouched. DecodeOnePass, for a destination nobody
// can read before the caller publishes it (a restore's hidden, reserved block), checks the header
// and component table first, then copies the payload while checksumming it (one loop: each
// 64-byte stripe loaded once, hashed and stored with a streaming store; store/xxh3_stream.h)
// and decides at the end: on kCorruption the destination holds unspecified bytes and must not be
// published. Encode likewise reads each source byte once. Decoding never reads outside the given
// span: every offset used comes from the codec, and the size must match exactly.
//
// Thread safety: a BundleCodec is immutable after Create; all methods are const and may be called
// from any number of threads. Callers own all memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/content_id.h"
#include "common/result.h"
#include "common/status.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

inline constexpr std::uint32_t kBundleMagic = 0x424D564B;  // bytes 'K' 'V' 'M' 'B'
inline constexpr std::uint16_t kBundleVersion = 1;
inline constexpr std::int64_t kBundleFixedHeaderBytes = 64;
inline constexpr std::int64_t kBundleTableEntryBytes = 40;
inline constexpr std::int64_t kBundleAlignment = 64;
inline constexpr std::int64_t kBundleChecksumBytes = 16;

struct GeometryFingerprint {
  std::array<std::uint8_t, 16> bytes{};
  [[nodiscard]] std::string ToHex() const;  // 32 lower-case hex characters
  friend bool operator==(const GeometryFingerprint&, const GeometryFingerprint&) = default;
};

// The fingerprint of a pool: its layout and, for fp8_per_tensor and nvfp4, its pool scale.
GeometryFingerprint FingerprintOf(const KvPoolLayout& layout, float pool_scale);

// A bundle as a sequence of byte ranges, without copying the block: the header and checksum live
// in this struct, the payload ranges point into the pool block. Filled by
// BundleCodec::EncodePieces; used to hand a bundle to a writer that gathers (RocksDB SliceParts).
// Not copyable or movable (the ranges point into the struct itself).
struct BundlePieces {
  static constexpr int kMaxPieces = 2 + 2 * kNumKvComponents + 1;
  std::array<std::span<const std::byte>, kMaxPieces> pieces{};
  int count = 0;
  std::array<std::byte,
             kBundleFixedHeaderBytes + kNumKvComponents * kBundleTableEntryBytes + kBundleAlignment>
      header{};
  std::array<std::byte, kBundleChecksumBytes> checksum{};

  BundlePieces() = default;
  BundlePieces(const BundlePieces&) = delete;
  BundlePieces& operator=(const BundlePieces&) = delete;
};

// A byte range of a bundle: the header (with its table and padding), one component's block
// bytes, or the checksum.
struct BundleRange {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  int component = -1;  // the KvComponent whose block bytes it holds; -1: header or checksum
};

class BundleCodec {
 public:
  // kInvalidArgument when the layout has no data component, a component with an unsupported
  // element width (bits not 4, 8, 16 or 32), an odd 4-bit row, or a non-finite/non-positive pool
  // scale for a dtype that has one. The pool scale of a dtype without one is ignored (stored as 1).
  static Result<BundleCodec> Create(const KvPoolLayout& layout, float pool_scale);

  [[nodiscard]] const KvPoolLayout& layout() const { return layout_; }
  [[nodiscard]] float pool_scale() const { return pool_scale_; }
  [[nodiscard]] const GeometryFingerprint& fingerprint() const { return fingerprint_; }
  // Exact size of every bundle of this pool.
  [[nodiscard]] std::int64_t bundle_bytes() const { return bundle_bytes_; }
  // Bytes of the block itself (every component), without header, padding and checksum.
  [[nodiscard]] std::int64_t block_bytes() const { return layout_.BytesPerBlock(); }

  // OK when `view` is a pool of this codec (same layout; same pool scale for the dtypes that have
  // one; a base for every present component) and `block` lies in it; else kInvalidArgument.
  Status CheckView(const KvPoolView& view, std::int64_t block) const;

  // Writes block `block` of `src` as a bundle into out[0, bundle_bytes()).
  // kInvalidArgument: CheckView fails or `out` is shorter than bundle_bytes().
  // REQUIRES: no one writes the source block during the call; `out` does not overlap the pool.
  Status Encode(const KvPoolView& src, std::int64_t block, const ContentId& id,
                std::span<std::byte> out) const;

  // As Encode, but computes the checksum and describes the bundle as pieces that point into the
  // source block instead of copying it. The pieces are valid while the block is not rewritten.
  Status EncodePieces(const KvPoolView& src, std::int64_t block, const ContentId& id,
                      BundlePieces* out) const;

  // The ranges of a bundle that are not padding between components, in order: the header, each
  // present component's bytes, the checksum. Every other byte of a bundle is zero. A bundle can
  // travel range by range (remote fetch: the component ranges straight from the pool block).
  [[nodiscard]] const std::vector<BundleRange>& data_ranges() const { return data_ranges_; }

  // As Encode, but writes only the header and checksum ranges of out[0, bundle_bytes()) — the
  // checksum over the block as Encode computes it, reading each source byte once, copying none.
  // The block's bytes then go from the pool to the receiver's component ranges (remote fetch).
  // kInvalidArgument as Encode.
  Status EncodeSeal(const KvPoolView& src, std::int64_t block, const ContentId& id,
                    std::span<std::byte> out) const;

  // Verifies a block received range by range in place: `seal` is a bundle-size buffer whose
  // header and checksum ranges were received (the rest is not read), block `block` of `view`
  // holds the component ranges. The header is checked completely, then the checksum over the
  // header, the block in `view` and zero padding — the bundle's checksum, without a copy. OK or
  // kCorruption (the block then holds unspecified bytes: do not publish it); kInvalidArgument as
  // CheckView. REQUIRES: nobody writes the block during the call.
  Status VerifyInPlace(std::span<const std::byte> seal, const ContentId& id, const KvPoolView& view,
                       std::int64_t block) const;

  // Writes zeros into the padding between components of bundle[0, bundle_bytes()) (a bundle whose
  // data ranges were received one by one). REQUIRES: bundle.size() >= bundle_bytes().
  void ZeroPadding(std::span<std::byte> bundle) const;

  // Checks a bundle completely (structure, fingerprint, pool scale, content id, checksum) without
  // copying it. OK or kCorruption naming the first failed check.
  Status Verify(std::span<const std::byte> bundle, const ContentId& id) const;

  // Verify, then write the block into block `block` of `dst`. kCorruption from Verify (the
  // destination untouched); kInvalidArgument when CheckView(dst, block) fails.
  // REQUIRES: no one reads or writes the destination block during the call.
  Status Decode(std::span<const std::byte> bundle, const ContentId& id, const KvPoolView& dst,
                std::int64_t block) const;

  // Decode in one pass over the bundle: the header and component table are checked before any
  // byte is copied; the payload is copied while it is checksummed; the checksum decides at the
  // end. kCorruption: the destination block holds unspecified bytes (some of the payload) — the
  // caller must not publish it. kInvalidArgument as Decode (nothing written).
  // REQUIRES: nobody reads the destination block before the call returned OK and the caller
  // published it (a restore destination: hidden and reserved); nobody writes it during the call.
  Status DecodeOnePass(std::span<const std::byte> bundle, const ContentId& id,
                       const KvPoolView& dst, std::int64_t block) const;

  // DecodeOnePass into a pool of the same geometry in the other order (HND <-> NHD: a handoff
  // between nodes whose pools differ only in order): the header and table are checked first;
  // then, component by component and (layer, K/V) by (layer, K/V) — a range that is contiguous
  // in both orders — each range is checksummed and at once copied, converted, from the cache into
  // the destination block; the checksum decides at the end. The same contract as DecodeOnePass
  // (kCorruption: the destination holds unspecified bytes, do not publish it). kInvalidArgument
  // (nothing written) when `dst` is not this codec's layout in the other order, has another pool
  // scale, lacks a component base, or `block` is outside it.
  Status DecodeOnePassConverting(std::span<const std::byte> bundle, const ContentId& id,
                                 const KvPoolView& dst, std::int64_t block) const;

 private:
  BundleCodec() = default;
  void BuildHeaderTemplate();
  Status VerifyStructure(std::span<const std::byte> bundle, const ContentId& id) const;
  Status VerifyTable(const std::byte* bundle) const;  // REQUIRES: the size was checked
  // The frame of the one-pass decodes: the structure checked first, then the header, table and
  // padding hashed and, per present component, copy_component(c, payload, hash) — which hashes
  // (hash(bytes, n), in order) and copies component c's payload — then the checksum compared.
  template <typename CopyComponent>
  Status OnePass(std::span<const std::byte> bundle, const ContentId& id,
                 CopyComponent&& copy_component) const;

  KvPoolLayout layout_;
  float pool_scale_ = 1.0f;
  GeometryFingerprint fingerprint_;
  std::int64_t payload_offset_ = 0;  // header + table + padding
  std::int64_t bundle_bytes_ = 0;
  std::array<std::int64_t, kNumKvComponents> component_offset_{};  // -1 when absent
  int num_components_ = 0;
  std::vector<std::byte> header_template_;  // [payload_offset_], content id zero
  std::vector<BundleRange> data_ranges_;
};

}  // namespace kvmesh
