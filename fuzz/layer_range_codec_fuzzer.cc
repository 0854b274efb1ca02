// Fuzz target layer_range_codec: store/layer_range_codec.h — LayerRangeCodec::Verify and
// VerifyInPlace on arbitrary bytes and layer ranges (the streaming handoff's wire form, which a
// decode node takes from its peer), for the pool geometries of the bundle_codec target
// (fuzz/bundle_shapes.h: bf16, fp8 with scales, int8, fp8 per tensor, nvfp4, an MLA latent with an
// FP4 indexer on fewer layers; HND and NHD).
//
// Input: [codec u8][mode u8][begin u8][end u8][rest...]; the range is [begin, end) modulo
// layers + 2 (so that empty, reversed and out-of-range ranges occur too).
//   mode 0: the rest is the range's wire form;
//   mode 1: the valid wire form of the codec's source block for that range (of the pool's whole
//           range when the range is invalid) with edits: the rest is a list of (offset u16, xor
//           u8); then a new size (u16 of the first two bytes) when mode bit 2 is set;
//   mode 2: as 1, then the checksum is recomputed (XXH3-128 over everything before it), so that the
//           header checks, not the checksum, decide.
//   mode bit 3: verify against another content id.
// Oracles: a range outside the pool's layers is kInvalidArgument, anything else OK or
// kCorruption; VerifyInPlace (the wire form's components copied into the destination block's
// layers, its header and checksum as the seal) succeeds exactly when Verify of the wire form with
// zero padding does; without a recomputed checksum only the valid wire form itself is accepted; an
// accepted wire form is bound to its content id and its layers (another id, another range fail);
// its payload then holds exactly the wire form's component bytes (PayloadView).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "common/check.h"
#include "fuzz/bundle_shapes.h"
#include "fuzz/fuzz_input.h"
#include "pool/pool_storage.h"
#include "store/block_bundle.h"
#include "store/layer_range_codec.h"

namespace kvmesh::fuzz {
namespace {

constexpr std::int64_t kSource = 0;
constexpr std::int64_t kDestination = 1;

struct Codec {
  LayerRangeCodec codec;
  PoolStorage storage;
};

const ContentId kId = BundleId(1);

std::vector<Codec> MakeCodecs() {
  std::vector<Codec> out;
  for (const auto& [g, scale] : BundleShapes()) {
    auto layout = MakeKvPoolLayout(g);
    KVMESH_CHECK(layout.ok()) << layout.status().ToString();
    auto codec = LayerRangeCodec::Create(*layout, scale);
    KVMESH_CHECK(codec.ok()) << codec.status().ToString();
    const PoolMemorySpec spec{*layout, 2, scale};
    auto storage = PoolStorage::Allocate(std::span(&spec, 1));
    KVMESH_CHECK(storage.ok()) << storage.status().ToString();
    FillSourceBlock(storage->view(0), kSource);
    out.push_back({std::move(codec).value(), std::move(storage).value()});
  }
  return out;
}

std::vector<std::byte> Valid(const Codec& c, LayerSpan r) {
  std::vector<std::byte> b(static_cast<std::size_t>(c.codec.Bytes(r)));
  KVMESH_CHECK(c.codec.Encode(c.storage.view(0), kSource, kId, r, b).ok());
  return b;
}

std::vector<std::byte> Edited(std::vector<std::byte> b, FuzzInput& in, int mode, bool resize) {
  if (resize) b.resize(in.U16() % (b.size() + 64));
  for (int i = 0; i < 16 && in.remaining() >= 3; ++i) {
    const std::uint16_t at = in.U16();
    const std::uint8_t x = in.U8();
    if (!b.empty()) b[at % b.size()] ^= static_cast<std::byte>(x);
  }
  if (mode == 2 && b.size() >= kBundleChecksumBytes) {
    const std::size_t body = b.size() - kBundleChecksumBytes;
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(b.data(), body));
    std::memcpy(b.data() + body, canon.digest, kBundleChecksumBytes);
  }
  return b;
}

}  // namespace
}  // namespace kvmesh::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  using namespace kvmesh::fuzz;
  static std::vector<Codec> codecs = MakeCodecs();
  FuzzInput in(data, size);
  const Codec& c = codecs[in.U8() % codecs.size()];
  const std::uint8_t mode_byte = in.U8();
  const int mode = mode_byte % 3;
  const ContentId id = (mode_byte & 8) != 0 ? BundleId(2) : kId;
  const std::int32_t layers = c.codec.num_layers();
  const LayerSpan r{in.U8() % (layers + 2), in.U8() % (layers + 2)};
  const bool valid_range = c.codec.CheckRange(r).ok();
  const LayerSpan whole{0, layers};
  std::vector<std::byte> piece;
  if (mode == 0) {
    const auto rest = AsBytes(in.Rest());
    piece.assign(rest.begin(), rest.end());
  } else {
    piece = Edited(Valid(c, valid_range ? r : whole), in, mode, (mode_byte & 4) != 0);
  }

  const Status verified = c.codec.Verify(piece, id, r);
  if (!valid_range) {
    KVMESH_CHECK(verified.IsInvalidArgument()) << verified.ToString();
    return 0;
  }
  KVMESH_CHECK(verified.ok() || verified.IsCorruption()) << verified.ToString();
  const KvPoolView& v = c.storage.view(0);
  const std::int64_t bytes = c.codec.Bytes(r);
  if (static_cast<std::int64_t>(piece.size()) == bytes) {
    // In place: the components as received into the destination block's layers, the header and
    // checksum as the seal; it verifies exactly when the wire form with zero padding does.
    const LayerRangeParts parts = c.codec.Parts(r);
    const KvPoolView into = c.codec.BlockView(v, kDestination, r);
    std::vector<std::byte> seal(static_cast<std::size_t>(kLayerRangeSealBytes));
    for (const BundleRange& part : parts.all()) {
      if (part.component >= 0) {
        std::memcpy(into.base[part.component], piece.data() + part.offset,
                    static_cast<std::size_t>(part.length));
      } else {
        std::memcpy(seal.data() + (part.offset == 0 ? 0 : kLayerRangeHeaderBytes),
                    piece.data() + part.offset, static_cast<std::size_t>(part.length));
      }
    }
    std::vector<std::byte> padded = piece;
    c.codec.ZeroPadding(padded, r);
    const Status in_place = c.codec.VerifyInPlace(seal, id, r, v, kDestination);
    KVMESH_CHECK_EQ(in_place.ok(), c.codec.Verify(padded, id, r).ok()) << in_place.ToString();
    KVMESH_CHECK(in_place.ok() || in_place.IsCorruption()) << in_place.ToString();
  }
  if (!verified.ok()) return 0;
  if (mode == 1) {
    KVMESH_CHECK(piece == Valid(c, r)) << "an edited range verified without a new checksum";
  }
  KVMESH_CHECK(!c.codec.Verify(piece, id == kId ? BundleId(2) : kId, r).ok())
      << "a range verifies under two content ids";
  for (std::int32_t b = 0; b < layers; ++b) {
    for (std::int32_t e = b + 1; e <= layers; ++e) {
      if (LayerSpan{b, e} == r) continue;
      KVMESH_CHECK(!c.codec.Verify(piece, id, {b, e}).ok()) << "a range verifies as another";
    }
  }
  const KvPoolView payload = c.codec.PayloadView(piece, r);
  const LayerRangeParts parts = c.codec.Parts(r);
  for (const BundleRange& part : parts.all()) {
    if (part.component < 0) continue;
    KVMESH_CHECK(payload.base[part.component] == piece.data() + part.offset);
  }
  return 0;
}
