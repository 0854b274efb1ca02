// Internal to the bundle codecs (store/block_bundle.cc, store/layer_range_codec.cc): the fixed
// header fields both wire forms share and the little-endian, XXH3 helpers. Not a public header.
#pragma once

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#if defined(__x86_64__)
// XXH3 through libxxhash's runtime dispatch (AVX2 where the CPU has it: ~4x the scalar speed).
#include <xxh_x86dispatch.h>
#endif

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/strings.h"
#include "store/block_bundle.h"

namespace kvmesh::bundle_internal {

static_assert(std::endian::native == std::endian::little, "bundles are written little-endian");

// Fixed header fields (docs/bundle-format.md), the same in a bundle and a layer range up to the
// fingerprint.
inline constexpr std::int64_t kOffMagic = 0;
inline constexpr std::int64_t kOffVersion = 4;
inline constexpr std::int64_t kOffHeaderBytes = 6;
inline constexpr std::int64_t kOffTotalBytes = 8;
inline constexpr std::int64_t kOffContentId = 16;
inline constexpr std::int64_t kOffFingerprint = 32;

constexpr std::int64_t RoundUp(std::int64_t x, std::int64_t a) { return (x + a - 1) / a * a; }

template <typename T>
void Store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

inline constexpr std::byte kZeros[kBundleAlignment] = {};

inline std::string HexOf(const void* p, std::size_t n) { return HexEncode(p, n); }

}  // namespace kvmesh::bundle_internal
