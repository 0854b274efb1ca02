#include "store/xxh3_stream.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_generateSecret_fromSeed
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "store/stream_copy.h"

// ThreadSanitizer does not see accesses wider than 16 bytes, so a TSan build (and a non-x86 one)
// uses the scalar loop and memcpy. AddressSanitizer checks vector loads and stores of any width,
// non-temporal ones included, so an ASan build runs the vector loops as a release build does.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVMESH_XXH3_SCALAR_ONLY 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
#define KVMESH_XXH3_SCALAR_ONLY 1
#endif

#if !KVMESH_XXH3_SCALAR_ONLY
#include <immintrin.h>
#endif

namespace kvmesh {
namespace {

// XXH3's constants (from its specification).
constexpr std::uint64_t kPrime32_1 = 0x9E3779B1U;
constexpr std::uint64_t kPrime32_2 = 0x85EBCA77U;
constexpr std::uint64_t kPrime32_3 = 0xC2B2AE3DU;
constexpr std::uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
constexpr std::uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
constexpr std::uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
constexpr std::uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
constexpr std::uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;
constexpr std::uint64_t kAvalancheMul = 0x165667919E3779F9ULL;

constexpr std::size_t kStripe = 64;
constexpr std::size_t kSecretBytes = 192;                              // the default secret
constexpr int kStripesPerBlock = (kSecretBytes - kStripe) / 8;         // 16: a 1 KiB block
constexpr std::size_t kScrambleOffset = kSecretBytes - kStripe;        // 128
constexpr std::size_t kLastStripeOffset = kSecretBytes - kStripe - 7;  // 121
constexpr std::size_t kMergeLowOffset = 11;                            // low 64 bits
constexpr std::size_t kMergeHighOffset = kSecretBytes - kStripe - 11;  // 117: high 64 bits
constexpr std::size_t kShortInputMax = 240;  // at most this: XXH3's short-input hashes

const std::uint8_t* DefaultSecret() {
  static const auto secret = [] {
    std::array<std::uint8_t, kSecretBytes> s{};
    XXH3_generateSecret_fromSeed(s.data(), 0);  // seed 0: the default secret itself
    return s;
  }();
  return secret.data();
}

inline std::uint64_t Read64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);  // little-endian host (bundle_internal.h asserts it)
  return v;
}

// One stripe into the accumulators.
inline void MixStripeScalar(std::uint64_t* acc, const std::uint8_t* in, const std::uint8_t* key) {
  for (int i = 0; i < 8; ++i) {
    const std::uint64_t data = Read64(in + 8 * i);
    const std::uint64_t mixed = data ^ Read64(key + 8 * i);
    acc[i ^ 1] += data;
    acc[i] += (mixed & 0xFFFFFFFFULL) * (mixed >> 32);
  }
}

inline void ScrambleScalar(std::uint64_t* acc, const std::uint8_t* key) {
  for (int i = 0; i < 8; ++i) {
    std::uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= Read64(key + 8 * i);
    acc[i] = a * kPrime32_1;
  }
}

// `stripes` stripes from src into acc; *in_block counts the stripes of the current block.
void MixStripesScalar(std::uint64_t* acc, const std::uint8_t* src, std::size_t stripes,
                      int* in_block, const std::uint8_t* secret) {
  for (std::size_t s = 0; s < stripes; ++s, src += kStripe) {
    MixStripeScalar(acc, src, secret + 8 * *in_block);
    if (++*in_block == kStripesPerBlock) {
      ScrambleScalar(acc, secret + kScrambleOffset);
      *in_block = 0;
    }
  }
}

#if !KVMESH_XXH3_SCALAR_ONLY
// The vector loops prefetch each stripe twice ahead of the loop: 1 KiB ahead into L1 and 4 KiB
// ahead into L2, the far one across the 4 KiB pages where the hardware prefetchers stop. A fused
// copy and hash of 256 MiB in scattered 256 KiB blocks on the 2-core VM (AVX-512; the streaming
// copy alone 10.5 GB/s): 8.0 GB/s without prefetches; with L1 only, 8.5 at 256 bytes, 8.9-9.3 at
// 1 KiB, 8.5-8.8 at 2 and 4 KiB; with L1 at 1 KiB and L2 at 3, 4, 6 and 8 KiB: 9.2-10.2,
// 9.7-10.7, 9.7-10.8, 9.6-10.1 GB/s.
constexpr std::size_t kPrefetchL1 = 1024;
constexpr std::size_t kPrefetchL2 = 4096;

inline void PrefetchAhead(const std::uint8_t* src) {
  _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetchL1, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetchL2, _MM_HINT_T1);
}

// The same per 32 bytes in AVX2 lanes: four accumulators per register; acc[i ^ 1] += data is a
// swap of the 64-bit halves of each 128-bit lane.
__attribute__((target("avx2"))) inline __m256i MixAvx2(__m256i acc, __m256i data, __m256i key) {
  const __m256i mixed = _mm256_xor_si256(data, key);
  const __m256i mixed_hi = _mm256_shuffle_epi32(mixed, _MM_SHUFFLE(0, 3, 0, 1));
  const __m256i product = _mm256_mul_epu32(mixed, mixed_hi);
  const __m256i swapped = _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));
  return _mm256_add_epi64(_mm256_add_epi64(acc, swapped), product);
}

__attribute__((target("avx2"))) inline __m256i ScrambleAvx2(__m256i acc, __m256i key) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(kPrime32_1));
  __m256i a = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47));
  a = _mm256_xor_si256(a, key);
  const __m256i a_hi = _mm256_shuffle_epi32(a, _MM_SHUFFLE(0, 3, 0, 1));
  const __m256i lo = _mm256_mul_epu32(a, prime);
  const __m256i hi = _mm256_mul_epu32(a_hi, prime);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

// kStore: 0 hash only, 1 copy with plain stores, 2 copy with non-temporal stores (dst 32-aligned).
template <int kStore>
__attribute__((target("avx2"))) void MixStripesAvx2(std::uint64_t* acc, std::uint8_t* dst,
                                                    const std::uint8_t* src, std::size_t stripes,
                                                    int* in_block, const std::uint8_t* secret) {
  __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc + 4));
  const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + kScrambleOffset));
  const __m256i s1 =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + kScrambleOffset + 32));
  int k = *in_block;
  for (std::size_t s = 0; s < stripes; ++s, src += kStripe) {
    PrefetchAhead(src);
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
    if constexpr (kStore == 1) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), d0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
    } else if constexpr (kStore == 2) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), d0);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
    }
    if constexpr (kStore != 0) dst += kStripe;  // dst is null when only hashing
    const std::uint8_t* key = secret + 8 * k;
    a0 = MixAvx2(a0, d0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
    a1 = MixAvx2(a1, d1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key + 32)));
    if (++k == kStripesPerBlock) {
      a0 = ScrambleAvx2(a0, s0);
      a1 = ScrambleAvx2(a1, s1);
      k = 0;
    }
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), a1);
  *in_block = k;
}

// The same per 64 bytes in AVX-512. The masked forms with every lane set are the plain
// instructions; GCC 12's unmasked intrinsics start from an undefined register and trip
// -Wmaybe-uninitialized.
constexpr __mmask16 kAll16 = 0xFFFF;
constexpr __mmask8 kAll8 = 0xFF;

__attribute__((target("avx512f"))) inline __m512i MixAvx512(__m512i acc, __m512i data,
                                                            __m512i key) {
  const __m512i mixed = _mm512_xor_si512(data, key);
  const __m512i mixed_hi = _mm512_maskz_shuffle_epi32(
      kAll16, mixed, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(0, 3, 0, 1)));
  const __m512i product = _mm512_maskz_mul_epu32(kAll8, mixed, mixed_hi);
  const __m512i swapped =
      _mm512_maskz_shuffle_epi32(kAll16, data, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_epi64(_mm512_add_epi64(acc, swapped), product);
}

__attribute__((target("avx512f"))) inline __m512i ScrambleAvx512(__m512i acc, __m512i key) {
  const __m512i prime = _mm512_set1_epi32(static_cast<int>(kPrime32_1));
  __m512i a = _mm512_xor_si512(acc, _mm512_maskz_srli_epi64(kAll8, acc, 47));
  a = _mm512_xor_si512(a, key);
  const __m512i a_hi =
      _mm512_maskz_shuffle_epi32(kAll16, a, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(0, 3, 0, 1)));
  const __m512i lo = _mm512_maskz_mul_epu32(kAll8, a, prime);
  const __m512i hi = _mm512_maskz_mul_epu32(kAll8, a_hi, prime);
  return _mm512_add_epi64(lo, _mm512_maskz_slli_epi64(kAll8, hi, 32));
}

template <int kStore>
__attribute__((target("avx512f"))) void MixStripesAvx512(std::uint64_t* acc, std::uint8_t* dst,
                                                         const std::uint8_t* src,
                                                         std::size_t stripes, int* in_block,
                                                         const std::uint8_t* secret) {
  __m512i a = _mm512_load_si512(acc);
  const __m512i sk = _mm512_loadu_si512(secret + kScrambleOffset);
  int k = *in_block;
  for (std::size_t s = 0; s < stripes; ++s, src += kStripe) {
    PrefetchAhead(src);
    const __m512i d = _mm512_loadu_si512(src);
    if constexpr (kStore == 1) {
      _mm512_storeu_si512(dst, d);
    } else if constexpr (kStore == 2) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), d);
    }
    if constexpr (kStore != 0) dst += kStripe;  // dst is null when only hashing
    a = MixAvx512(a, d, _mm512_loadu_si512(secret + 8 * k));
    if (++k == kStripesPerBlock) {
      a = ScrambleAvx512(a, sk);
      k = 0;
    }
  }
  _mm512_store_si512(acc, a);
  *in_block = k;
}

#endif

// dst == nullptr: hash only.
void MixStripes(Xxh3Isa isa, std::uint64_t* acc, std::uint8_t* dst, const std::uint8_t* src,
                std::size_t stripes, int* in_block, const std::uint8_t* secret) {
#if !KVMESH_XXH3_SCALAR_ONLY
  const auto misaligned = [dst](std::uintptr_t a) {
    return reinterpret_cast<std::uintptr_t>(dst) % a != 0;
  };
#endif
  switch (isa) {
#if !KVMESH_XXH3_SCALAR_ONLY
    case Xxh3Isa::kAvx512:
      if (dst == nullptr) return MixStripesAvx512<0>(acc, dst, src, stripes, in_block, secret);
      if (misaligned(64)) return MixStripesAvx512<1>(acc, dst, src, stripes, in_block, secret);
      return MixStripesAvx512<2>(acc, dst, src, stripes, in_block, secret);
    case Xxh3Isa::kAvx2:
      if (dst == nullptr) return MixStripesAvx2<0>(acc, dst, src, stripes, in_block, secret);
      if (misaligned(32)) return MixStripesAvx2<1>(acc, dst, src, stripes, in_block, secret);
      return MixStripesAvx2<2>(acc, dst, src, stripes, in_block, secret);
#endif
    default:
      if (dst != nullptr) CopyStreamingPiece(dst, src, stripes * kStripe);
      return MixStripesScalar(acc, src, stripes, in_block, secret);
  }
}

std::uint64_t Avalanche(std::uint64_t h) {
  h ^= h >> 37;
  h *= kAvalancheMul;
  return h ^ (h >> 32);
}

std::uint64_t MulFold64(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(p) ^ static_cast<std::uint64_t>(p >> 64);
}

std::uint64_t MergeAccumulators(const std::uint64_t* acc, const std::uint8_t* key,
                                std::uint64_t start) {
  std::uint64_t h = start;
  for (int i = 0; i < 4; ++i) {
    h += MulFold64(acc[2 * i] ^ Read64(key + 16 * i), acc[2 * i + 1] ^ Read64(key + 16 * i + 8));
  }
  return Avalanche(h);
}

std::array<std::byte, 16> CanonicalOf(std::uint64_t high, std::uint64_t low) {
  XXH128_hash_t h;
  h.high64 = high;
  h.low64 = low;
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  std::array<std::byte, 16> out;
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

}  // namespace

bool Xxh3Stream::Supported(Xxh3Isa isa) {
  switch (isa) {
    case Xxh3Isa::kBest:
    case Xxh3Isa::kScalar: return true;
#if !KVMESH_XXH3_SCALAR_ONLY
    case Xxh3Isa::kAvx2: {
      static const bool has = __builtin_cpu_supports("avx2");
      return has;
    }
    case Xxh3Isa::kAvx512: {
      static const bool has = __builtin_cpu_supports("avx512f");
      return has;
    }
#endif
    default: return false;
  }
}

Xxh3Stream::Xxh3Stream(Xxh3Isa isa)
    : acc_{kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
           kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1},
      isa_(isa) {
  if (isa_ == Xxh3Isa::kBest) {
    static const Xxh3Isa best = Supported(Xxh3Isa::kAvx512) ? Xxh3Isa::kAvx512
                                : Supported(Xxh3Isa::kAvx2) ? Xxh3Isa::kAvx2
                                                            : Xxh3Isa::kScalar;
    isa_ = best;
  }
  KVMESH_CHECK(Supported(isa_));
  DefaultSecret();  // fetched once per process, before the first stripe
}

void Xxh3Stream::MixBufferedStripe() {
  MixStripes(isa_, acc_, nullptr, buf_, 1, &stripe_in_block_, DefaultSecret());
  std::memcpy(last_, buf_, kStripe);
  buffered_ = 0;
}

template <bool kCopy>
void Xxh3Stream::Feed(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) {
  if (n == 0) return;
  if (total_ < kShortInputMax) {
    std::memcpy(head_ + total_, src, std::min<std::size_t>(n, kShortInputMax - total_));
  }
  total_ += n;
  // Top up the held-back stripe.
  if (buffered_ > 0 && buffered_ < kStripe) {
    const std::size_t m = std::min(kStripe - buffered_, n);
    std::memcpy(buf_ + buffered_, src, m);
    if constexpr (kCopy) std::memcpy(dst, src, m);
    buffered_ += m;
    src += m;
    if constexpr (kCopy) dst += m;
    n -= m;
    if (n == 0) return;
  }
  if (buffered_ == kStripe) MixBufferedStripe();  // a byte follows it
  // Every whole stripe but the last (at least one byte is held back), straight from the source.
  const std::size_t stripes = (n - 1) / kStripe;
  if (stripes > 0) {
    const std::size_t bytes = stripes * kStripe;
    MixStripes(isa_, acc_, kCopy ? dst : nullptr, src, stripes, &stripe_in_block_, DefaultSecret());
    std::memcpy(last_, src + bytes - kStripe, kStripe);
    src += bytes;
    if constexpr (kCopy) dst += bytes;
    n -= bytes;
  }
  std::memcpy(buf_, src, n);
  if constexpr (kCopy) std::memcpy(dst, src, n);
  buffered_ = n;
}

void Xxh3Stream::Update(const void* p, std::size_t n) {
  Feed<false>(nullptr, static_cast<const std::uint8_t*>(p), n);
}

void Xxh3Stream::CopyUpdate(void* dst, const void* src, std::size_t n) {
  Feed<true>(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), n);
}

void Xxh3Stream::CopyUpdateRows(std::byte* dst, std::ptrdiff_t outer_stride,
                                std::ptrdiff_t inner_stride, std::int64_t outer, std::int64_t inner,
                                const std::byte* src, std::size_t row_bytes) {
  const std::size_t rows = static_cast<std::size_t>(outer * inner);
  const std::size_t n = rows * row_bytes;
  if (n == 0) return;
  const auto row_dst = [&](std::size_t r) {
    const auto i = static_cast<std::ptrdiff_t>(r / static_cast<std::size_t>(inner));
    const auto j = static_cast<std::ptrdiff_t>(r % static_cast<std::size_t>(inner));
    return reinterpret_cast<std::uint8_t*>(dst + i * outer_stride + j * inner_stride);
  };
  const auto* in = reinterpret_cast<const std::uint8_t*>(src);
  if (row_bytes % kStripe != 0 || (buffered_ != 0 && buffered_ != kStripe)) {
    Update(in, n);  // then copy from the cache
    for (std::size_t r = 0; r < rows; ++r)
      CopyStreamingPiece(row_dst(r), in + r * row_bytes, row_bytes);
    return;
  }
  if (total_ < kShortInputMax) {
    std::memcpy(head_ + total_, in, std::min<std::size_t>(n, kShortInputMax - total_));
  }
  total_ += n;
  if (buffered_ == kStripe) MixBufferedStripe();  // a byte follows it
  // Every stripe but the last of the last row is mixed in; that one is held back (copied too).
  const std::uint8_t* secret = DefaultSecret();
  const std::size_t stripes_per_row = row_bytes / kStripe;
  for (std::size_t r = 0; r < rows; ++r, in += row_bytes) {
    const std::size_t stripes = r + 1 < rows ? stripes_per_row : stripes_per_row - 1;
    std::uint8_t* to = row_dst(r);
    if (stripes > 0) MixStripes(isa_, acc_, to, in, stripes, &stripe_in_block_, secret);
    if (r + 1 == rows) {
      const std::uint8_t* last = in + row_bytes - kStripe;
      std::memcpy(to + row_bytes - kStripe, last, kStripe);
      std::memcpy(buf_, last, kStripe);
      buffered_ = kStripe;  // Digest takes the final 64 bytes from buf_ alone
    }
  }
}

std::array<std::byte, 16> Xxh3Stream::Digest() const {
  if (total_ <= kShortInputMax) {
    const XXH128_hash_t h = XXH3_128bits(head_, static_cast<std::size_t>(total_));
    return CanonicalOf(h.high64, h.low64);
  }
  // The held-back bytes end the input and hold no whole stripe that a byte follows; the last 64
  // bytes of the input (the end of the last stripe mixed in, then the held-back bytes) are mixed
  // in once more with their own part of the secret.
  const std::uint8_t* secret = DefaultSecret();
  alignas(64) std::uint64_t acc[8];
  std::memcpy(acc, acc_, sizeof acc);
  alignas(64) std::uint8_t last[kStripe];
  std::memcpy(last, last_ + buffered_, kStripe - buffered_);
  std::memcpy(last + (kStripe - buffered_), buf_, buffered_);
  MixStripeScalar(acc, last, secret + kLastStripeOffset);
  const std::uint64_t low = MergeAccumulators(acc, secret + kMergeLowOffset, total_ * kPrime64_1);
  const std::uint64_t high =
      MergeAccumulators(acc, secret + kMergeHighOffset, ~(total_ * kPrime64_2));
  return CanonicalOf(high, low);
}

}  // namespace kvmesh
