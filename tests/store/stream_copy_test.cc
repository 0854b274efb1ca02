// CopyStreaming and CopyStreamingPiece (store/stream_copy.h): every byte of the range copied and
// none outside it, for sizes around the 16-byte units, the 64-byte lines, the 4 KiB threshold and
// the two halves copied at once from 4 KiB on (an odd number of lines, a tail after the halves), at
// every alignment of the destination and a few of the source.
#include "store/stream_copy.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvmesh {
namespace {

constexpr std::size_t kGuard = 64;

std::vector<std::size_t> Sizes() {
  std::vector<std::size_t> out;
  for (std::size_t n = 0; n <= 200; ++n) out.push_back(n);
  for (std::size_t n : {255, 256, 257, 1023, 1024, 4095, 4096, 4097, 4096 + 64, 4096 + 127, 8191,
                        8192, 16384 + 48, 65536 + 17})
    out.push_back(n);
  return out;
}

template <typename Copy>
void ExpectExactCopies(Copy copy, bool fence) {
  std::vector<std::uint8_t> src(70000 + 2 * kGuard);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 131 + 7);
  for (const std::size_t n : Sizes()) {
    std::vector<std::uint8_t> dst(n + 16 + 2 * kGuard);
    for (std::size_t dst_off = 0; dst_off < 16; ++dst_off) {
      for (const std::size_t src_off : {std::size_t{0}, std::size_t{3}, std::size_t{16}}) {
        std::fill(dst.begin(), dst.end(), std::uint8_t{0xEE});
        std::uint8_t* d = dst.data() + kGuard + dst_off;
        const std::uint8_t* s = src.data() + kGuard + src_off;
        copy(d, s, n);
        if (fence) StreamingFence();
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(d[i], s[i]) << "size " << n << " dst offset " << dst_off << " src offset "
                                << src_off << " byte " << i;
        }
        for (std::size_t i = 0; i < kGuard + dst_off; ++i) {
          ASSERT_EQ(dst[i], 0xEE) << "written before the range: size " << n;
        }
        for (std::size_t i = kGuard + dst_off + n; i < dst.size(); ++i) {
          ASSERT_EQ(dst[i], 0xEE) << "written after the range: size " << n;
        }
      }
    }
  }
}

TEST(StreamCopy, CopyStreamingCopiesExactlyTheRange) {
  ExpectExactCopies([](void* d, const void* s, std::size_t n) { CopyStreaming(d, s, n); },
                    /*fence=*/false);
}

TEST(StreamCopy, CopyStreamingPieceCopiesExactlyTheRange) {
  ExpectExactCopies([](void* d, const void* s, std::size_t n) { CopyStreamingPiece(d, s, n); },
                    /*fence=*/true);
}

}  // namespace
}  // namespace kvmesh
