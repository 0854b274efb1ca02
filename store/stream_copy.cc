#include "store/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVMESH_SANITIZED_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVMESH_SANITIZED_BUILD 1
#endif

#if defined(__x86_64__) && !defined(KVMESH_SANITIZED_BUILD)
#define KVMESH_STREAMING_STORES 1
#endif
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace kvmesh {

#if KVMESH_STREAMING_STORES
namespace {

// 64 bytes from s to d (d 16-byte aligned) with non-temporal stores.
inline void StreamLine(std::uint8_t* d, const std::uint8_t* s) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
}

// Non-temporal stores for the destination's whole 16-byte units, memcpy for the unaligned head and
// the tail; no fence. From kTwoStreamBytes on, the range is copied as two halves at once, a line
// of each in turn: two sequential read streams keep more of memory's reads in flight than one
// (host_tier_bench's "streaming copy alone", 256 MiB in 256 KiB blocks on the 2-core VM:
// 0.030-0.033 s with one stream, 0.024-0.026 s with two; in a test program, 16 KiB pieces with four
// streams were slower than two, with eight four times slower than one).
constexpr std::size_t kTwoStreamBytes = 4096;

void StreamBytes(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
  const std::size_t head = std::min(n, (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  if (n >= kTwoStreamBytes) {
    const std::size_t half = n / 128 * 64;
    for (std::size_t off = 0; off < half; off += 64) {
      StreamLine(d + off, s + off);
      StreamLine(d + half + off, s + half + off);
    }
    d += 2 * half;
    s += 2 * half;
    n -= 2 * half;
  }
  for (; n >= 64; n -= 64, s += 64, d += 64) StreamLine(d, s);
  for (; n >= 16; n -= 16, s += 16, d += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
  std::memcpy(d, s, n);
}

}  // namespace
#endif

void CopyStreaming(void* dst, const void* src, std::size_t n) {
#if KVMESH_STREAMING_STORES
  if (n < kStreamingCopyMinBytes) {
    std::memcpy(dst, src, n);
    return;
  }
  StreamBytes(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), n);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

void CopyStreamingPiece(void* dst, const void* src, std::size_t n) {
#if KVMESH_STREAMING_STORES
  StreamBytes(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), n);
#else
  std::memcpy(dst, src, n);
#endif
}

void StreamingFence() {
#if defined(__x86_64__)
  _mm_sfence();  // also in sanitizer builds: Xxh3Stream::CopyUpdate streams under ASan
#endif
}

}  // namespace kvmesh
