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
#include <emmintrin.h>
#endif

namespace kvmesh {

#if KVMESH_STREAMING_STORES
namespace {

// Non-temporal stores for the destination's whole 16-byte units (four at a time while there are
// 64 bytes left), memcpy for the unaligned head and the tail; no fence.
void StreamBytes(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
  const std::size_t head = std::min(n, (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 64; n -= 64, s += 64, d += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
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
#if KVMESH_STREAMING_STORES
  _mm_sfence();
#endif
}

}  // namespace kvmesh
