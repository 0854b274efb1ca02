// kernels/quantize.h (one head vector) and the array API of kernels/convert_arrays.h against the
// independent reference (conversion_reference.h): scale formulas, codes, packing, the special
// values, error bounds of the dequantised values, and argument validation.
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/convert_arrays.h"
#include "tests/kernels/conversion_reference.h"

namespace kvmesh {
namespace {

using testref::Bits;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Random head vectors over several magnitudes, including an outlier, sub-2^-10 values and signed
// zeros, so every branch of the conversions is reached through the quantisers.
std::vector<float> RandomHead(std::mt19937& rng, int n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 20);
  const float magnitude = std::ldexp(1.0f, exponent(rng));
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng) * magnitude;
  if (n > 3) {
    x[rng() % n] *= 50.0f;  // outlier
    x[rng() % n] = -0.0f;
    x[rng() % n] = magnitude * 1e-6f;
  }
  return x;
}

const int kHeadDims[] = {1, 3, 7, 16, 17, 64, 128, 576};

TEST(QuantizeTest, Fp8HeadMatchesReference) {
  std::mt19937 rng(1);
  for (int n : kHeadDims) {
    for (int trial = 0; trial < 200; ++trial) {
      const std::vector<float> x = RandomHead(rng, n);
      std::vector<std::uint8_t> q(n);
      const float scale = QuantizeHeadFp8(x.data(), n, q.data());
      const testref::Fp8Head want = testref::QuantizeFp8(x);
      ASSERT_EQ(Bits(scale), Bits(want.scale)) << "n " << n;
      ASSERT_EQ(q, want.q) << "n " << n;
      // The element of largest magnitude maps to ±448.
      const float amax = testref::Amax(x, 0, n);
      EXPECT_EQ(Bits(scale), Bits(amax / 448.0f));
      std::vector<float> back(n);
      DequantizeHeadFp8(q.data(), n, scale, back.data());
      for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) == amax) {
          EXPECT_EQ(q[i] & 0x7F, 0x7E);
        }
        EXPECT_EQ(Bits(back[i]), Bits(testref::Mul(float(testref::E4M3Value(q[i])), scale)));
        // Half a step of E4M3: 2^-4 relative in the normal range, 2^-10·scale below it.
        const float bound = std::fabs(x[i]) * 0x1p-4f + scale * 0x1p-10f;
        EXPECT_LE(std::fabs(back[i] - x[i]), bound * 1.0001f) << "n " << n << " i " << i;
      }
    }
  }
}

TEST(QuantizeTest, Int8HeadMatchesReference) {
  std::mt19937 rng(2);
  for (int n : kHeadDims) {
    for (int trial = 0; trial < 200; ++trial) {
      const std::vector<float> x = RandomHead(rng, n);
      std::vector<std::int8_t> q(n);
      const float scale = QuantizeHeadInt8(x.data(), n, q.data());
      const testref::Int8Head want = testref::QuantizeInt8(x);
      ASSERT_EQ(Bits(scale), Bits(want.scale));
      ASSERT_EQ(q, want.q);
      const float amax = testref::Amax(x, 0, n);
      std::vector<float> back(n);
      DequantizeHeadInt8(q.data(), n, scale, back.data());
      for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) == amax && amax > 0) {
          EXPECT_EQ(std::abs(q[i]), 127);
        }
        EXPECT_EQ(back[i], float(q[i]) * scale);
        EXPECT_LE(std::fabs(back[i] - x[i]), scale * 0.5001f) << "n " << n << " i " << i;
      }
    }
  }
}

// x / scale and x · (1/scale) differ in the last bit now and then; that changes the code only when
// the quotient sits at a rounding tie of the narrow format. Build such inputs (a tie times the
// scale) and check that the quantisers divide, as the brief requires.
TEST(QuantizeTest, DividesByTheScaleRatherThanMultiplyingByItsReciprocal) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> amax_dist(0.5f, 2.0f);
  int fp8_cases = 0, int8_cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const float amax = std::ldexp(amax_dist(rng), int(rng() % 40) - 20);
    const float fp8_scale = amax / 448.0f;
    const float int8_scale = amax / 127.0f;
    for (int c = 0; c < 0x7E; ++c) {  // ties between E4M3 codes c and c + 1
      const float tie = float(
          (testref::E4M3Value(std::uint8_t(c)) + testref::E4M3Value(std::uint8_t(c + 1))) / 2);
      const float x = testref::Mul(tie, fp8_scale);
      if (testref::E4M3(testref::Div(x, fp8_scale)) ==
          testref::E4M3(testref::Mul(x, testref::Div(1.0f, fp8_scale)))) {
        continue;
      }
      ++fp8_cases;
      const float head[2] = {amax, x};
      std::uint8_t q[2];
      ASSERT_EQ(Bits(QuantizeHeadFp8(head, 2, q)), Bits(fp8_scale));
      EXPECT_EQ(q[1], testref::E4M3(testref::Div(x, fp8_scale))) << x << " / " << fp8_scale;
    }
    for (int k = 0; k < 127; ++k) {  // ties between the integers k and k + 1
      const float x = testref::Mul(float(k) + 0.5f, int8_scale);
      if (testref::Int8(testref::Div(x, int8_scale)) ==
          testref::Int8(testref::Mul(x, testref::Div(1.0f, int8_scale)))) {
        continue;
      }
      ++int8_cases;
      const float head[2] = {amax, x};
      std::int8_t q[2];
      ASSERT_EQ(Bits(QuantizeHeadInt8(head, 2, q)), Bits(int8_scale));
      EXPECT_EQ(q[1], testref::Int8(testref::Div(x, int8_scale))) << x << " / " << int8_scale;
    }
  }
  // The search must have found inputs that tell the two apart, or this test proves nothing.
  EXPECT_GT(fp8_cases, 10);
  EXPECT_GT(int8_cases, 10);
  std::printf("division-sensitive inputs: fp8 %d, int8 %d\n", fp8_cases, int8_cases);
}

TEST(QuantizeTest, Fp8PerTensorUsesThePoolScale) {
  std::mt19937 rng(3);
  for (float scale : {1.0f, 0.01f, 3.0f, 1e-6f}) {
    const std::vector<float> x = RandomHead(rng, 128);
    std::vector<std::uint8_t> q(x.size());
    QuantizeHeadFp8PerTensor(x.data(), int(x.size()), scale, q.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(q[i], testref::E4M3(testref::Div(x[i], scale)));
    }
  }
}

TEST(QuantizeTest, AmaxZeroGivesScaleOneAndZeroCodes) {
  const std::vector<float> zeros(64, 0.0f);
  std::vector<std::uint8_t> q8(64, 0xAA);
  EXPECT_EQ(QuantizeHeadFp8(zeros.data(), 64, q8.data()), 1.0f);
  for (auto c : q8) EXPECT_EQ(c, 0x00);
  std::vector<std::int8_t> qi(64, 5);
  EXPECT_EQ(QuantizeHeadInt8(zeros.data(), 64, qi.data()), 1.0f);
  for (auto c : qi) EXPECT_EQ(c, 0);
  // −0 keeps its sign bit in E4M3 (0x80), like every magnitude that rounds to zero.
  const std::vector<float> neg_zeros(16, -0.0f);
  EXPECT_EQ(QuantizeHeadFp8(neg_zeros.data(), 16, q8.data()), 1.0f);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q8[i], 0x80);
  // amax so small that amax/448 underflows to 0: treated as amax = 0.
  const std::vector<float> tiny(8, std::ldexp(1.0f, -149));
  EXPECT_EQ(QuantizeHeadFp8(tiny.data(), 8, q8.data()), 1.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q8[i], 0x00);
  EXPECT_EQ(QuantizeHeadInt8(tiny.data(), 8, qi.data()), 1.0f);
  // A subnormal but non-zero scale is kept.
  const std::vector<float> small(4, 1e-40f);
  const float s = QuantizeHeadFp8(small.data(), 4, q8.data());
  EXPECT_EQ(Bits(s), Bits(1e-40f / 448.0f));
  EXPECT_GT(s, 0.0f);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(q8[i], 0x7E);
}

TEST(QuantizeTest, NanAndInfDoNotEnterAmax) {
  std::vector<float> x = {1.0f, -2.0f, 0.5f, 4.0f, 3.0f, -1.0f};
  std::vector<float> with_specials = x;
  with_specials.insert(with_specials.end(), {kNan, kInf, -kInf, -kNan});
  const int n = int(with_specials.size());
  EXPECT_EQ(HeadAmax(with_specials.data(), n), 4.0f);

  std::vector<std::uint8_t> q8(n);
  EXPECT_EQ(QuantizeHeadFp8(with_specials.data(), n, q8.data()), 4.0f / 448.0f);
  EXPECT_EQ(q8[3], 0x7E);  // 4.0 is the amax
  EXPECT_EQ(q8[6], 0x7F);  // NaN
  EXPECT_EQ(q8[7], 0x7E);  // +Inf saturates
  EXPECT_EQ(q8[8], 0xFE);  // -Inf saturates
  EXPECT_EQ(q8[9], 0x7F);  // -NaN

  std::vector<std::int8_t> qi(n);
  EXPECT_EQ(QuantizeHeadInt8(with_specials.data(), n, qi.data()), 4.0f / 127.0f);
  EXPECT_EQ(qi[3], 127);
  EXPECT_EQ(qi[6], 0);
  EXPECT_EQ(qi[7], 127);
  EXPECT_EQ(qi[8], -127);

  // A vector of nothing but non-finite values has amax 0 and scale 1.
  const std::vector<float> specials = {kNan, kInf, -kInf};
  EXPECT_EQ(QuantizeHeadFp8(specials.data(), 3, q8.data()), 1.0f);
  EXPECT_EQ(q8[0], 0x7F);
  EXPECT_EQ(q8[1], 0x7E);
  EXPECT_EQ(q8[2], 0xFE);
}

TEST(QuantizeTest, Nvfp4MatchesReference) {
  std::mt19937 rng(4);
  for (int n : {16, 32, 64, 128, 576}) {
    for (float gs : {1.0f, 448.0f * 6.0f / 10.0f, 448.0f * 6.0f, 0.37f, 1e4f}) {
      for (int trial = 0; trial < 100; ++trial) {
        const std::vector<float> x = RandomHead(rng, n);
        std::vector<std::uint8_t> packed(n / 2), sf(n / 16);
        QuantizeHeadNvfp4(x.data(), n, gs, packed.data(), sf.data());
        const testref::Nvfp4Head want = testref::QuantizeNvfp4(x, gs);
        ASSERT_EQ(sf, want.sf) << "n " << n << " gs " << gs;
        ASSERT_EQ(packed, want.packed) << "n " << n << " gs " << gs;
        std::vector<float> back(n);
        DequantizeHeadNvfp4(packed.data(), sf.data(), n, gs, back.data());
        for (int i = 0; i < n; ++i) {
          const std::uint8_t nib = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
          ASSERT_EQ(Bits(back[i]), Bits(testref::DequantNvfp4(nib, sf[i / 16], gs)));
          // Error bound where the block scale neither saturated nor underflowed: one E2M1 step
          // (at most 1 unit of the effective scale SF/gs, half a step between 4 and 6, or the
          // clamp at 6 after SF rounded down by at most 1/16).
          const float amax16 = testref::Amax(x, i / 16 * 16, i / 16 * 16 + 16);
          const double ideal = double(gs) * amax16 / 6.0;
          if (ideal > 0.02 && ideal < 400.0) {
            const double s = testref::E4M3Value(sf[i / 16]) / gs;
            EXPECT_LE(std::fabs(double(back[i]) - x[i]), 1.001 * s + 1e-6 * amax16)
                << "n " << n << " gs " << gs << " i " << i;
          }
        }
      }
    }
  }
}

TEST(QuantizeTest, Nvfp4PacksLowNibbleFirst) {
  // gs = 1 and amax16 = 6: SF = e4m3(1) = 0x38, factor 1, so the codes are the E2M1 codes of x.
  const std::vector<float> x = {0.5f, 1.0f,  1.5f, 2.0f,  3.0f,  4.0f, 6.0f, -0.5f,
                                -1.f, -1.5f, -2.f, -3.0f, -4.0f, -6.f, 0.0f, -0.0f};
  std::uint8_t packed[8], sf[1];
  QuantizeHeadNvfp4(x.data(), 16, 1.0f, packed, sf);
  EXPECT_EQ(sf[0], 0x38);
  const std::uint8_t want[8] = {0x21, 0x43, 0x65, 0x97, 0xBA, 0xDC, 0xFE, 0x80};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(packed[i], want[i]) << "byte " << i;
  float back[16];
  DequantizeHeadNvfp4(packed, sf, 16, 1.0f, back);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Bits(back[i]), Bits(x[i])) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Nvfp4Nibble(packed, i), FloatToE2M1(x[i]));
}

TEST(QuantizeTest, Nvfp4ZeroBlockScaleGivesZeroCodes) {
  // Block 0: all zero. Block 1: gs·amax16/6 = 2^-10 exactly → SF rounds to 0, NaN included.
  // Block 2: SF saturates at 448; elements saturate at ±6.
  std::vector<float> x(48, 0.0f);
  const float gs = 1.0f;
  x[16] = 6.0f * std::ldexp(1.0f, -10);
  x[17] = -1e-6f;
  x[18] = kNan;
  x[32] = 1e6f;
  x[33] = -1e6f;
  x[34] = kInf;
  std::vector<std::uint8_t> packed(24, 0xAA), sf(3, 0xAA);
  QuantizeHeadNvfp4(x.data(), 48, gs, packed.data(), sf.data());
  EXPECT_EQ(sf[0], 0x00);
  EXPECT_EQ(sf[1], 0x00);
  EXPECT_EQ(sf[2], 0x7E);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(packed[i], 0x00) << "byte " << i;
  EXPECT_EQ(packed[16], 0xF7);  // 1e6 → +6 (0x7), -1e6 → -6 (0xF)
  EXPECT_EQ(packed[17] & 0xF, 0x7);
  float back[48];
  DequantizeHeadNvfp4(packed.data(), sf.data(), 48, gs, back);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(back[i], 0.0f);
  EXPECT_EQ(back[32], 6.0f * 448.0f);
  // Just above the SF underflow: SF is the smallest subnormal E4M3.
  x[16] = std::nextafter(x[16], kInf);
  QuantizeHeadNvfp4(x.data(), 48, gs, packed.data(), sf.data());
  EXPECT_EQ(sf[1], 0x01);
}

TEST(QuantizeTest, Bf16AndFp16InputsQuantiseAsTheirFp32Values) {
  std::mt19937 rng(5);
  constexpr int kN = 128;
  std::vector<Bf16> xb(kN);
  std::vector<Fp16> xh(kN);
  std::vector<float> wb(kN), wh(kN);
  for (int i = 0; i < kN; ++i) {
    xb[i].bits = std::uint16_t(rng());
    xh[i].bits = std::uint16_t(rng());
    wb[i] = Bf16ToFloat(xb[i].bits);
    wh[i] = HalfToFloat(xh[i].bits);
  }
  std::vector<std::uint8_t> a(kN), b(kN);
  EXPECT_EQ(Bits(QuantizeHeadFp8(xb.data(), kN, a.data())),
            Bits(QuantizeHeadFp8(wb.data(), kN, b.data())));
  EXPECT_EQ(a, b);
  EXPECT_EQ(Bits(QuantizeHeadFp8(xh.data(), kN, a.data())),
            Bits(QuantizeHeadFp8(wh.data(), kN, b.data())));
  EXPECT_EQ(a, b);
  std::vector<std::uint8_t> pa(kN / 2), pb(kN / 2), sa(kN / 16), sb(kN / 16);
  QuantizeHeadNvfp4(xh.data(), kN, 2.5f, pa.data(), sa.data());
  QuantizeHeadNvfp4(wh.data(), kN, 2.5f, pb.data(), sb.data());
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(sa, sb);
  std::vector<std::uint16_t> ca(kN), cb(kN);
  QuantizeHeadFp16(xb.data(), kN, ca.data());
  QuantizeHeadFp16(wb.data(), kN, cb.data());
  EXPECT_EQ(ca, cb);
  // BF16 → BF16 is the identity except that every NaN becomes the canonical one.
  QuantizeHeadBf16(xb.data(), kN, ca.data());
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(ca[i], std::isnan(wb[i]) ? 0x7FFF : xb[i].bits);
  }
}

TEST(QuantizeTest, Bf16AndFp16HeadsRoundTrip) {
  std::mt19937 rng(6);
  const std::vector<float> x = RandomHead(rng, 64);
  std::vector<std::uint16_t> q(64);
  std::vector<float> back(64);
  QuantizeHeadBf16(x.data(), 64, q.data());
  DequantizeHeadBf16(q.data(), 64, back.data());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(q[i], testref::Bf16(x[i]));
    EXPECT_EQ(back[i], float(testref::Bf16Value(q[i])));
  }
  QuantizeHeadFp16(x.data(), 64, q.data());
  DequantizeHeadFp16(q.data(), 64, back.data());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(q[i], testref::Half(x[i]));
    EXPECT_EQ(back[i], float(testref::HalfValue(q[i])));
  }
}

}  // namespace
}  // namespace kvmesh
