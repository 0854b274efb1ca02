// Xxh3Stream (store/xxh3_stream.h) against libxxhash: the digest equals XXH3_128bits of the whole
// input for lengths around every boundary the algorithm has (the 240-byte short inputs, the 64-byte
// stripes, the 1 KiB blocks), cut into pieces in many ways (byte by byte, at stripe boundaries and
// off them, one piece, random cuts), hashed alone or copied; CopyUpdate copies every byte and none
// outside the destination at every alignment; a flipped byte anywhere changes the digest.
#include "store/xxh3_stream.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "store/stream_copy.h"

namespace kvmesh {
namespace {

std::array<std::byte, 16> Reference(const std::uint8_t* p, std::size_t n) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(p, n));
  std::array<std::byte, 16> out;
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

std::vector<std::uint8_t> Input(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

std::vector<std::size_t> Lengths() {
  std::vector<std::size_t> out;
  for (std::size_t n = 0; n <= 300; ++n) out.push_back(n);
  for (const std::size_t base : {std::size_t{512}, std::size_t{1024}, std::size_t{2048},
                                 std::size_t{4096}, std::size_t{16384}, std::size_t{65536}}) {
    for (const std::size_t d : {0, 1, 63, 64, 65, 127}) {
      out.push_back(base - d);
      out.push_back(base + d);
    }
  }
  out.push_back(1024 * 16 + 1024 + 64);  // whole blocks then one stripe
  out.push_back(262144 + 4096 + 16);     // a bundle-sized input
  return out;
}

// Cuts [0, n) into pieces: the returned sizes add up to n.
std::vector<std::size_t> Cuts(std::size_t n, int how, std::mt19937* rng) {
  std::vector<std::size_t> out;
  std::size_t left = n;
  while (left > 0) {
    std::size_t piece = left;
    switch (how) {
      case 0: piece = left; break;
      case 1: piece = 1; break;
      case 2: piece = 64; break;
      case 3: piece = 63; break;
      case 4: piece = 1024; break;
      case 5: piece = 1 + (*rng)() % 200; break;
      case 6: piece = 1 + (*rng)() % 5000; break;
      default: piece = (*rng)() % 2 == 0 ? 0 : 1 + (*rng)() % 70; break;  // empty pieces too
    }
    piece = std::min(piece, left);
    out.push_back(piece);
    left -= piece;
  }
  return out;
}

class Xxh3StreamIsa : public ::testing::TestWithParam<Xxh3Isa> {
 protected:
  void SetUp() override {
    if (!Xxh3Stream::Supported(GetParam())) GTEST_SKIP() << "this build or CPU lacks the ISA";
  }
};

INSTANTIATE_TEST_SUITE_P(Isas, Xxh3StreamIsa,
                         ::testing::Values(Xxh3Isa::kBest, Xxh3Isa::kScalar, Xxh3Isa::kAvx2,
                                           Xxh3Isa::kAvx512),
                         [](const auto& info) {
                           switch (info.param) {
                             case Xxh3Isa::kScalar: return "scalar";
                             case Xxh3Isa::kAvx2: return "avx2";
                             case Xxh3Isa::kAvx512: return "avx512";
                             default: return "best";
                           }
                         });

TEST_P(Xxh3StreamIsa, EqualsLibxxhashForEveryLengthAndEveryWayOfCuttingTheInput) {
  std::mt19937 rng(7);
  for (const std::size_t n : Lengths()) {
    const std::vector<std::uint8_t> in = Input(n, static_cast<std::uint32_t>(n));
    const auto want = Reference(in.data(), n);
    for (int how = 0; how < 8; ++how) {
      if (how == 1 && n > 5000) continue;  // byte by byte: slow and no different from 63
      for (const bool copy : {false, true}) {
        Xxh3Stream s(GetParam());
        std::vector<std::uint8_t> dst(n);
        std::size_t pos = 0;
        for (const std::size_t piece : Cuts(n, how, &rng)) {
          if (copy) {
            s.CopyUpdate(dst.data() + pos, in.data() + pos, piece);
          } else {
            s.Update(in.data() + pos, piece);
          }
          pos += piece;
        }
        if (copy) StreamingFence();
        ASSERT_EQ(s.total_bytes(), n);
        ASSERT_EQ(s.Digest(), want) << "length " << n << ", cuts " << how << ", copy " << copy;
        if (copy) {
          ASSERT_EQ(dst, in) << "length " << n << ", cuts " << how;
        }
      }
    }
  }
}

TEST(Xxh3Stream, DigestCanBeTakenMidStreamAndTheStreamGoesOn) {
  const std::vector<std::uint8_t> in = Input(5000, 3);
  Xxh3Stream s;
  for (std::size_t pos = 0; pos < in.size(); pos += 500) {
    s.Update(in.data() + pos, 500);
    ASSERT_EQ(s.Digest(), Reference(in.data(), pos + 500)) << "after " << pos + 500 << " bytes";
  }
}

TEST_P(Xxh3StreamIsa, CopyUpdateWritesEveryByteAndNoneOutsideAtEveryAlignment) {
  constexpr std::size_t kGuard = 64;
  const std::vector<std::uint8_t> src = Input(70000 + 2 * kGuard, 11);
  for (const std::size_t n : {std::size_t{1}, std::size_t{64}, std::size_t{65}, std::size_t{241},
                              std::size_t{4096}, std::size_t{4097}, std::size_t{65536 + 17}}) {
    for (std::size_t dst_off = 0; dst_off < 72; dst_off += 3) {
      for (const std::size_t src_off : {std::size_t{0}, std::size_t{5}, std::size_t{32}}) {
        std::vector<std::uint8_t> dst(n + 64 + 2 * kGuard, 0xEE);
        std::uint8_t* d = dst.data() + kGuard + dst_off;
        const std::uint8_t* s = src.data() + kGuard + src_off;
        Xxh3Stream h(GetParam());
        h.Update(s, 37);  // the copy starts off a stripe boundary of the stream
        h.CopyUpdate(d, s + 37, n);
        StreamingFence();
        ASSERT_EQ(h.Digest(), Reference(s, 37 + n));
        ASSERT_EQ(std::memcmp(d, s + 37, n), 0) << n << " bytes at +" << dst_off;
        for (std::uint8_t* p = dst.data(); p < d; ++p) ASSERT_EQ(*p, 0xEE) << "before, " << n;
        for (std::uint8_t* p = d + n; p < dst.data() + dst.size(); ++p) {
          ASSERT_EQ(*p, 0xEE) << "after, " << n;
        }
      }
    }
  }
}

// Rows of a layout conversion: every row lands at its (i, j) place, nothing else is written, and
// the digest is that of the source in order — with the stream before them at a stripe boundary
// (the fused path) and off it, and rows of whole stripes and not (the hash-then-copy path).
TEST_P(Xxh3StreamIsa, CopyUpdateRowsScattersTheRowsAndHashesTheSourceInOrder) {
  struct Case {
    std::int64_t outer, inner;
    std::size_t row, before;
  };
  for (const Case c : {Case{8, 32, 256, 0}, Case{32, 8, 256, 64}, Case{4, 4, 64, 128},
                       Case{1, 1, 64, 0}, Case{3, 5, 128, 256 + 64}, Case{8, 32, 256, 37},
                       Case{4, 6, 96, 0}, Case{2, 3, 8, 200}, Case{16, 16, 512, 4096}}) {
    const std::size_t n = static_cast<std::size_t>(c.outer * c.inner) * c.row;
    const std::vector<std::uint8_t> in = Input(c.before + n, static_cast<std::uint32_t>(n));
    // Destination rows in the transposed order, with a gap of one row between outer groups.
    const std::ptrdiff_t inner_stride = static_cast<std::ptrdiff_t>(c.row);
    const std::ptrdiff_t outer_stride = static_cast<std::ptrdiff_t>((c.inner + 1) * c.row);
    std::vector<std::byte> dst(static_cast<std::size_t>(c.outer * outer_stride) + 64,
                               std::byte{0xEE});
    Xxh3Stream s(GetParam());
    s.Update(in.data(), c.before);
    s.CopyUpdateRows(dst.data(), outer_stride, inner_stride, c.outer, c.inner,
                     reinterpret_cast<const std::byte*>(in.data() + c.before), c.row);
    StreamingFence();
    ASSERT_EQ(s.Digest(), Reference(in.data(), in.size()))
        << c.outer << "x" << c.inner << " rows of " << c.row << " after " << c.before;
    std::vector<std::byte> want(dst.size(), std::byte{0xEE});
    for (std::int64_t i = 0; i < c.outer; ++i) {
      for (std::int64_t j = 0; j < c.inner; ++j) {
        std::memcpy(want.data() + i * outer_stride + j * inner_stride,
                    in.data() + c.before + static_cast<std::size_t>(i * c.inner + j) * c.row,
                    c.row);
      }
    }
    ASSERT_EQ(dst, want) << c.outer << "x" << c.inner << " rows of " << c.row;
    // The stream goes on after the rows.
    const std::vector<std::uint8_t> more = Input(100, 1);
    s.Update(more.data(), more.size());
    std::vector<std::uint8_t> all = in;
    all.insert(all.end(), more.begin(), more.end());
    ASSERT_EQ(s.Digest(), Reference(all.data(), all.size()));
  }
}

TEST_P(Xxh3StreamIsa, AFlippedByteAnywhereChangesTheDigest) {
  std::vector<std::uint8_t> in = Input(4096 + 100, 5);
  Xxh3Stream clean(GetParam());
  clean.Update(in.data(), in.size());
  for (const std::size_t at : {std::size_t{0}, std::size_t{63}, std::size_t{64}, std::size_t{1023},
                               std::size_t{1024}, in.size() - 65, in.size() - 64, in.size() - 1}) {
    in[at] ^= 0x10;
    Xxh3Stream s(GetParam());
    std::vector<std::uint8_t> dst(in.size());
    s.CopyUpdate(dst.data(), in.data(), in.size());
    StreamingFence();
    EXPECT_NE(s.Digest(), clean.Digest()) << "byte " << at;
    in[at] ^= 0x10;
  }
}

}  // namespace
}  // namespace kvmesh
