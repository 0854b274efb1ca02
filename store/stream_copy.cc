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

void CopyStreaming(void* dst, const void* src, std::size_t n) {
#if KVMESH_STREAMING_STORES
  if (n < kStreamingCopyMinBytes) {
    std::memcpy(dst, src, n);
    return;
  }
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  const std::size_t lines = n / 64;
  for (std::size_t i = 0; i < lines; ++i) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    s += 64;
    d += 64;
  }
  std::memcpy(d, s, n - lines * 64);
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

void CopyStreamingPiece(void* dst, const void* src, std::size_t n) {
#if KVMESH_STREAMING_STORES
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  const std::size_t head = std::min(n, (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  const std::size_t units = n / 16;
  for (std::size_t i = 0; i < units; ++i) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    s += 16;
    d += 16;
  }
  std::memcpy(d, s, n - units * 16);
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
