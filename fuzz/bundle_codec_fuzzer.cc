// Fuzz target bundle_codec: store/block_bundle.h — BundleCodec::Verify, Decode and VerifyInPlace on
// arbitrary bytes, for pools of several geometries (bf16, fp8 with per-token-head scales, int8,
// nvfp4 with block scales and a global scale, an MLA latent with an FP4 indexer; HND and NHD).
//
// Input: [codec u8][mode u8][rest...]
//   mode 0: the rest is the bundle;
//   mode 1: a valid bundle of the codec with edits: the rest is a list of (offset u16, xor u8),
//           then a new size (u16 low bits of the first two bytes when mode bit 2 is set);
//   mode 2: as 1, then the checksum is recomputed (XXH3-128 over everything before it), so that
//           the structural checks, not the checksum, decide.
//   mode bit 3: verify against another content id.
// Oracles: VerifyInPlace (the bundle as a seal, its component ranges copied into the destination
// block) succeeds exactly when Verify of the bundle with zero padding does, and refuses a short
// seal; Decode succeeds exactly when Verify does; a failed Decode leaves the destination block
// untouched (kCorruption); a successful one wrote exactly the bundle's block, so encoding the
// destination block again gives a bundle that verifies, of the same size and with the same
// header; an accepted bundle is bound to its content id (another id fails); DecodeOnePassConverting
// into the same geometry in the other order succeeds exactly when Verify does (kCorruption
// otherwise), and what it wrote is the converting block copy of what Decode wrote.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <vector>

#include "common/check.h"
#include "fuzz/bundle_shapes.h"
#include "fuzz/fuzz_input.h"
#include "kernels/block_copy.h"
#include "pool/pool_storage.h"
#include "store/block_bundle.h"

namespace kvmesh::fuzz {
namespace {

constexpr std::int64_t kSource = 0;
constexpr std::int64_t kDestination = 1;
constexpr std::uint8_t kCanary = 0xA5;

struct Codec {
  BundleCodec codec;
  PoolStorage storage;
  std::vector<std::byte> valid;  // block kSource encoded with kId
  PoolStorage other;             // the same geometry in the other order
};

const ContentId kId = BundleId(1);

std::vector<Codec> MakeCodecs() {
  std::vector<Codec> out;
  for (const auto& [g, scale] : BundleShapes()) {
    auto layout = MakeKvPoolLayout(g);
    KVMESH_CHECK(layout.ok()) << layout.status().ToString();
    auto codec = BundleCodec::Create(*layout, scale);
    KVMESH_CHECK(codec.ok()) << codec.status().ToString();
    const PoolMemorySpec spec{*layout, 2, scale};
    auto storage = PoolStorage::Allocate(std::span(&spec, 1));
    KVMESH_CHECK(storage.ok()) << storage.status().ToString();
    const KvLayout flipped = layout->order() == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
    const PoolMemorySpec other_spec{WithOrder(*layout, flipped), 2, scale};
    auto other = PoolStorage::Allocate(std::span(&other_spec, 1));
    KVMESH_CHECK(other.ok()) << other.status().ToString();
    Codec c{std::move(codec).value(), std::move(storage).value(), {}, std::move(other).value()};
    FillSourceBlock(c.storage.view(0), kSource);
    c.valid.resize(static_cast<std::size_t>(c.codec.bundle_bytes()));
    KVMESH_CHECK(c.codec.Encode(c.storage.view(0), kSource, kId, c.valid).ok());
    out.push_back(std::move(c));
  }
  return out;
}

// Every component's bytes of `block`, concatenated.
std::vector<std::uint8_t> BlockBytes(const KvPoolView& v, std::int64_t block) {
  std::vector<std::uint8_t> out;
  for (int k = 0; k < kNumKvComponents; ++k) {
    if (!v.layout.components[k].present()) continue;
    const std::uint8_t* p = v.BlockBytes(static_cast<KvComponent>(k), block);
    out.insert(out.end(), p, p + v.layout.components[k].BytesPerBlock());
  }
  return out;
}

void FillCanary(const KvPoolView& v, std::int64_t block) {
  for (int k = 0; k < kNumKvComponents; ++k) {
    if (!v.layout.components[k].present()) continue;
    std::memset(v.BlockBytes(static_cast<KvComponent>(k), block), kCanary,
                static_cast<std::size_t>(v.layout.components[k].BytesPerBlock()));
  }
}

std::vector<std::byte> EditedBundle(const Codec& c, FuzzInput& in, int mode, bool resize) {
  std::vector<std::byte> b = c.valid;
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
  std::vector<std::byte> bundle;
  if (mode == 0) {
    const auto rest = AsBytes(in.Rest());
    bundle.assign(rest.begin(), rest.end());
  } else {
    bundle = EditedBundle(c, in, mode, (mode_byte & 4) != 0);
  }

  const KvPoolView& v = c.storage.view(0);
  const auto bundle_bytes = static_cast<std::size_t>(c.codec.bundle_bytes());
  if (bundle.size() < bundle_bytes) {
    KVMESH_CHECK(c.codec.VerifyInPlace(bundle, id, v, kDestination).IsCorruption());
  } else if (bundle.size() == bundle_bytes) {
    // In place (remote fetch): the bundle's component ranges as received into the destination
    // block, the bundle itself as the seal (its header and checksum ranges): it verifies exactly
    // when the bundle with zero padding does.
    for (const BundleRange& r : c.codec.data_ranges()) {
      if (r.component < 0) continue;
      std::memcpy(v.BlockBytes(static_cast<KvComponent>(r.component), kDestination),
                  bundle.data() + r.offset, static_cast<std::size_t>(r.length));
    }
    std::vector<std::byte> padded = bundle;
    c.codec.ZeroPadding(padded);
    const Status in_place = c.codec.VerifyInPlace(bundle, id, v, kDestination);
    KVMESH_CHECK_EQ(in_place.ok(), c.codec.Verify(padded, id).ok()) << in_place.ToString();
    KVMESH_CHECK(in_place.ok() || in_place.IsCorruption()) << in_place.ToString();
  }
  FillCanary(v, kDestination);
  const std::vector<std::uint8_t> before = BlockBytes(v, kDestination);
  const Status verified = c.codec.Verify(bundle, id);
  const Status decoded = c.codec.Decode(bundle, id, v, kDestination);
  KVMESH_CHECK_EQ(verified.ok(), decoded.ok())
      << verified.ToString() << " / " << decoded.ToString();
  const KvPoolView& o = c.other.view(0);
  const Status converted = c.codec.DecodeOnePassConverting(bundle, id, o, kDestination);
  KVMESH_CHECK_EQ(verified.ok(), converted.ok())
      << verified.ToString() << " / " << converted.ToString();
  KVMESH_CHECK(converted.ok() || converted.IsCorruption()) << converted.ToString();
  if (converted.ok()) {  // the converting copy of Decode's block, into o's other block
    KVMESH_CHECK(cpu::CopyBlock(v, kDestination, o, kSource).ok());
    KVMESH_CHECK(BlockBytes(o, kDestination) == BlockBytes(o, kSource))
        << "the converting decode wrote other bytes than the converting copy";
  }
  if (!decoded.ok()) {
    KVMESH_CHECK(decoded.IsCorruption()) << decoded.ToString();
    KVMESH_CHECK(BlockBytes(v, kDestination) == before) << "a refused bundle wrote the block";
    return 0;
  }
  KVMESH_CHECK(!c.codec.Verify(bundle, id == kId ? BundleId(2) : kId).ok())
      << "a bundle verifies under two content ids";
  std::vector<std::byte> again(static_cast<std::size_t>(c.codec.bundle_bytes()));
  KVMESH_CHECK(c.codec.Encode(v, kDestination, id, again).ok());
  KVMESH_CHECK(c.codec.Verify(again, id).ok());
  KVMESH_CHECK_EQ(again.size(), bundle.size());
  std::uint16_t header_bytes = 0;
  std::memcpy(&header_bytes, bundle.data() + 6, sizeof(header_bytes));
  KVMESH_CHECK(std::equal(again.begin(), again.begin() + header_bytes, bundle.begin()))
      << "the decoded block encodes to another header";
  return 0;
}
