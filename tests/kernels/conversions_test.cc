// kernels/conversions.h against the independent reference (conversion_reference.h): exhaustively
// over all 65,536 BF16 bit patterns as FP32 inputs (and their FP32 neighbours), over every code of
// every format, and on the edges the brief names.
#include "kernels/conversions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/conversion_reference.h"

namespace kvmesh {
namespace {

using testref::Bits;
using testref::FromBits;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Every BF16 bit pattern as an FP32 value, plus the FP32 values one ulp either side (ties and near
// ties of the narrower formats sit on BF16 values; their neighbours test the rounding direction).
std::vector<float> Bf16PatternsAndNeighbours() {
  std::vector<float> v;
  v.reserve(3 * 65536);
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const std::uint32_t u = p << 16;
    v.push_back(FromBits(u));
    v.push_back(FromBits(u + 1));
    if ((u & 0x7FFFFFFFu) != 0) v.push_back(FromBits(u - 1));
  }
  return v;
}

template <typename Impl, typename Ref>
void ExpectAllEqual(const std::string& what, const std::vector<float>& inputs, Impl impl, Ref ref) {
  int mismatches = 0;
  for (float x : inputs) {
    const auto got = impl(x);
    const auto want = ref(x);
    if (got != want) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << what << "(0x" << std::hex << Bits(x) << " = " << x << ") = 0x" << +got
                      << ", reference 0x" << +want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << inputs.size();
  std::printf("%s: %zu inputs, %d mismatches\n", what.c_str(), inputs.size(), mismatches);
}

TEST(ConversionsTest, E4M3ExhaustiveOverBf16Inputs) {
  ExpectAllEqual("FloatToE4M3Sat", Bf16PatternsAndNeighbours(), FloatToE4M3Sat, testref::E4M3);
}

TEST(ConversionsTest, E2M1ExhaustiveOverBf16Inputs) {
  const auto inputs = Bf16PatternsAndNeighbours();
  ExpectAllEqual("FloatToE2M1", inputs, FloatToE2M1, testref::E2M1);
  // The brief's formula, evaluated literally with float comparisons, is the same rounding.
  ExpectAllEqual("brief E2M1 formula", inputs, FloatToE2M1, [](float x) -> std::uint8_t {
    if (std::isnan(x)) return 0x7;
    const float a = std::fabs(x);
    const int code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                     (a >= 3.5f) + (a > 5.0f);
    return std::uint8_t((std::signbit(x) ? 8 : 0) | code);
  });
}

TEST(ConversionsTest, HalfExhaustiveOverBf16InputsAndHalfMidpoints) {
  std::vector<float> inputs = Bf16PatternsAndNeighbours();
  // Every midpoint between adjacent FP16 values (12 significant bits: exact in FP32) and its FP32
  // neighbours, both signs.
  for (std::uint32_t c = 0; c < 0x7C00; ++c) {
    const double next = c == 0x7BFF ? 65536.0 : testref::HalfValue(std::uint16_t(c + 1));
    const float mid = float((testref::HalfValue(std::uint16_t(c)) + next) / 2);
    for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      inputs.push_back(m);
      inputs.push_back(-m);
    }
  }
  ExpectAllEqual("FloatToHalfRne", inputs, FloatToHalfRne, testref::Half);
}

TEST(ConversionsTest, Bf16RoundingAgainstReference) {
  std::vector<float> inputs;
  std::mt19937 rng(7);
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const std::uint32_t u = p << 16;
    // exact, the tie, both sides of the tie, and a random remainder
    for (std::uint32_t low : {0x0000u, 0x8000u, 0x7FFFu, 0x8001u, std::uint32_t(rng() & 0xFFFF)}) {
      inputs.push_back(FromBits(u | low));
    }
  }
  ExpectAllEqual("FloatToBf16Rne", inputs, FloatToBf16Rne, testref::Bf16);
}

TEST(ConversionsTest, Int8ExhaustiveOverBf16InputsForSeveralScales) {
  const auto inputs = Bf16PatternsAndNeighbours();
  for (float scale : {1.0f, 0.5f, 1.0f / 127.0f, 3.7f, 448.0f / 127.0f, 1e-3f, 1e-30f, 1e30f}) {
    int div_mismatches = 0;
    for (float x : inputs) {
      // The host division is the correctly rounded one the reference computes in double.
      if (!std::isnan(x) && Bits(DivRn(x, scale)) != Bits(testref::Div(x, scale))) {
        ++div_mismatches;
      }
    }
    EXPECT_EQ(div_mismatches, 0) << "scale " << scale;
    char what[64];
    std::snprintf(what, sizeof(what), "FloatToInt8Sat(x / %g)", double{scale});
    ExpectAllEqual(
        what, inputs, [scale](float x) { return FloatToInt8Sat(DivRn(x, scale)); },
        [scale](float x) { return testref::Int8(testref::Div(x, scale)); });
  }
}

TEST(ConversionsTest, DecodersAreExactForEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const double want = testref::E4M3Value(std::uint8_t(c));
    const float got = E4M3ToFloat(std::uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_EQ(Bits(got), kFloatCanonicalNan) << "code " << c;
    } else {
      EXPECT_EQ(Bits(got), Bits(float(want))) << "code " << c;
      EXPECT_EQ(double{got}, want) << "code " << c;
    }
  }
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(Bits(E2M1ToFloat(std::uint8_t(c))), Bits(float(testref::E2M1Value(std::uint8_t(c)))));
    EXPECT_EQ(Bits(E2M1ToFloat(std::uint8_t(c | 0xF0))), Bits(E2M1ToFloat(std::uint8_t(c))));
  }
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto h = std::uint16_t(c);
    const double want_h = testref::HalfValue(h);
    if (std::isnan(want_h)) {
      EXPECT_EQ(Bits(HalfToFloat(h)), kFloatCanonicalNan) << std::hex << c;
    } else {
      EXPECT_EQ(Bits(HalfToFloat(h)), Bits(float(want_h))) << std::hex << c;
    }
    const double want_b = testref::Bf16Value(h);
    if (std::isnan(want_b)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(h)));
      EXPECT_EQ(Bits(Bf16ToFloat(h)), c << 16) << "payload kept";
    } else {
      EXPECT_EQ(Bits(Bf16ToFloat(h)), Bits(float(want_b))) << std::hex << c;
    }
  }
}

TEST(ConversionsTest, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const auto code = std::uint8_t(c);
    const bool nan = (c & 0x7F) == 0x7F;
    EXPECT_EQ(FloatToE4M3Sat(E4M3ToFloat(code)), nan ? 0x7F : code) << "code " << c;
  }
  for (int c = 0; c < 16; ++c) EXPECT_EQ(FloatToE2M1(E2M1ToFloat(std::uint8_t(c))), c);
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto h = std::uint16_t(c);
    const bool h_nan = (c & 0x7C00) == 0x7C00 && (c & 0x3FF) != 0;
    EXPECT_EQ(FloatToHalfRne(HalfToFloat(h)), h_nan ? 0x7FFF : h) << std::hex << c;
    const bool b_nan = (c & 0x7F80) == 0x7F80 && (c & 0x7F) != 0;
    EXPECT_EQ(FloatToBf16Rne(Bf16ToFloat(h)), b_nan ? 0x7FFF : h) << std::hex << c;
  }
}

// Expected codes written by hand from the brief's rules.
TEST(ConversionsTest, E4M3Edges) {
  const float p10 = std::ldexp(1.0f, -10);
  EXPECT_EQ(FloatToE4M3Sat(448.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3Sat(-448.0f), 0xFE);
  EXPECT_EQ(FloatToE4M3Sat(416.0f), 0x7D);
  EXPECT_EQ(FloatToE4M3Sat(432.0f), 0x7E);  // tie 416/448 → even mantissa (448 = 0x7E)
  EXPECT_EQ(FloatToE4M3Sat(std::nextafter(448.0f, kInf)), 0x7E);
  EXPECT_EQ(FloatToE4M3Sat(464.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3Sat(-464.0f), 0xFE);
  EXPECT_EQ(FloatToE4M3Sat(std::nextafter(464.0f, kInf)), 0x7E);
  EXPECT_EQ(FloatToE4M3Sat(480.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3Sat(3.4e38f), 0x7E);
  EXPECT_EQ(FloatToE4M3Sat(kInf), 0x7E);
  EXPECT_EQ(FloatToE4M3Sat(-kInf), 0xFE);
  EXPECT_EQ(FloatToE4M3Sat(kNan), 0x7F);
  EXPECT_EQ(FloatToE4M3Sat(-kNan), 0x7F);
  EXPECT_EQ(FloatToE4M3Sat(FromBits(0x7F800001u)), 0x7F);  // signalling NaN
  EXPECT_EQ(FloatToE4M3Sat(FromBits(0xFFFFFFFFu)), 0x7F);
  EXPECT_EQ(FloatToE4M3Sat(p10), 0x00);  // tie between 0 and 2^-9 → even code 0
  EXPECT_EQ(FloatToE4M3Sat(-p10), 0x80);
  EXPECT_EQ(FloatToE4M3Sat(std::nextafter(p10, 1.0f)), 0x01);
  EXPECT_EQ(FloatToE4M3Sat(-std::nextafter(p10, 1.0f)), 0x81);
  EXPECT_EQ(FloatToE4M3Sat(std::nextafter(p10, 0.0f)), 0x00);
  EXPECT_EQ(FloatToE4M3Sat(std::ldexp(1.0f, -9)), 0x01);    // smallest subnormal
  EXPECT_EQ(FloatToE4M3Sat(std::ldexp(3.0f, -10)), 0x02);   // tie 1/2 → 2
  EXPECT_EQ(FloatToE4M3Sat(std::ldexp(5.0f, -10)), 0x02);   // tie 2/3 → 2
  EXPECT_EQ(FloatToE4M3Sat(std::ldexp(7.0f, -9)), 0x07);    // largest subnormal
  EXPECT_EQ(FloatToE4M3Sat(std::ldexp(15.0f, -10)), 0x08);  // tie 7·2^-9 / 2^-6 → 0x08
  EXPECT_EQ(FloatToE4M3Sat(std::ldexp(1.0f, -6)), 0x08);    // smallest normal
  EXPECT_EQ(FloatToE4M3Sat(1.0f), 0x38);
  EXPECT_EQ(FloatToE4M3Sat(-1.0f), 0xB8);
  EXPECT_EQ(FloatToE4M3Sat(1.0625f), 0x38);  // tie 1 / 1.125 → even
  EXPECT_EQ(FloatToE4M3Sat(1.1875f), 0x3A);  // tie 1.125 / 1.25 → even (1.25)
  EXPECT_EQ(FloatToE4M3Sat(0.0f), 0x00);
  EXPECT_EQ(FloatToE4M3Sat(-0.0f), 0x80);
  EXPECT_EQ(FloatToE4M3Sat(-1e-30f), 0x80);
  EXPECT_EQ(FloatToE4M3Sat(FromBits(1u)), 0x00);  // FP32 subnormal
  EXPECT_EQ(FloatToE4M3Sat(FromBits(0x80000001u)), 0x80);
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(Bits(E4M3ToFloat(0x80)), 0x80000000u);
  EXPECT_TRUE(std::isnan(E4M3ToFloat(0xFF)));
}

TEST(ConversionsTest, E2M1EveryMidpointAndNeighbours) {
  struct Case {
    float mid;
    int at, below, above;  // codes at the midpoint, one ulp below, one ulp above
  };
  for (const Case& c :
       {Case{0.25f, 0, 0, 1}, Case{0.75f, 2, 1, 2}, Case{1.25f, 2, 2, 3}, Case{1.75f, 4, 3, 4},
        Case{2.5f, 4, 4, 5}, Case{3.5f, 6, 5, 6}, Case{5.0f, 6, 6, 7}}) {
    EXPECT_EQ(FloatToE2M1(c.mid), c.at) << c.mid;
    EXPECT_EQ(FloatToE2M1(std::nextafter(c.mid, 0.0f)), c.below) << c.mid;
    EXPECT_EQ(FloatToE2M1(std::nextafter(c.mid, kInf)), c.above) << c.mid;
    EXPECT_EQ(FloatToE2M1(-c.mid), 8 | c.at) << -c.mid;
    EXPECT_EQ(FloatToE2M1(-std::nextafter(c.mid, kInf)), 8 | c.above) << -c.mid;
  }
  const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) EXPECT_EQ(FloatToE2M1(values[c]), c);
  EXPECT_EQ(FloatToE2M1(6.5f), 0x7);
  EXPECT_EQ(FloatToE2M1(1e30f), 0x7);
  EXPECT_EQ(FloatToE2M1(kInf), 0x7);
  EXPECT_EQ(FloatToE2M1(-kInf), 0xF);
  EXPECT_EQ(FloatToE2M1(-6.0f), 0xF);
  EXPECT_EQ(FloatToE2M1(kNan), 0x7);
  EXPECT_EQ(FloatToE2M1(-kNan), 0x7);
  EXPECT_EQ(FloatToE2M1(-0.0f), 0x8);
  EXPECT_EQ(FloatToE2M1(-0.1f), 0x8);
  EXPECT_EQ(FloatToE2M1(0.1f), 0x0);
  EXPECT_EQ(Bits(E2M1ToFloat(0x8)), 0x80000000u);
  EXPECT_EQ(E2M1ToFloat(0xF), -6.0f);
}

TEST(ConversionsTest, HalfAndBf16Edges) {
  EXPECT_EQ(FloatToHalfRne(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalfRne(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(FloatToHalfRne(65520.0f), 0x7C00);  // tie with 2^16 → even → Inf
  EXPECT_EQ(FloatToHalfRne(-65520.0f), 0xFC00);
  EXPECT_EQ(FloatToHalfRne(kInf), 0x7C00);
  EXPECT_EQ(FloatToHalfRne(-kInf), 0xFC00);
  EXPECT_EQ(FloatToHalfRne(kNan), 0x7FFF);
  EXPECT_EQ(FloatToHalfRne(-kNan), 0x7FFF);
  EXPECT_EQ(FloatToHalfRne(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalfRne(std::ldexp(1.0f, -25)), 0x0000);  // tie 0 / 2^-24 → 0
  EXPECT_EQ(FloatToHalfRne(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToHalfRne(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalfRne(std::ldexp(3.0f, -25)), 0x0002);  // tie 1/2 → 2
  EXPECT_EQ(FloatToHalfRne(std::ldexp(5.0f, -25)), 0x0002);  // tie 2/3 → 2
  EXPECT_EQ(FloatToHalfRne(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(FloatToHalfRne(std::ldexp(2047.0f, -25)), 0x0400);  // tie 0x3FF / 0x400 → 0x400
  EXPECT_EQ(FloatToHalfRne(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalfRne(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalfRne(1.0f + std::ldexp(3.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToHalfRne(-1e-30f), 0x8000);

  EXPECT_EQ(FloatToBf16Rne(kNan), 0x7FFF);
  EXPECT_EQ(FloatToBf16Rne(-kNan), 0x7FFF);
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x7F800001u)), 0x7FFF);
  EXPECT_EQ(FloatToBf16Rne(kInf), 0x7F80);
  EXPECT_EQ(FloatToBf16Rne(-kInf), 0xFF80);
  EXPECT_EQ(FloatToBf16Rne(std::numeric_limits<float>::max()), 0x7F80);  // overflow → Inf
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x3F808000u)), 0x3F80);  // tie → even
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x3F818000u)), 0x3F82);  // tie → even
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x00008000u)), 0x0000);  // subnormal tie → 0
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(FloatToBf16Rne(FromBits(0x80008001u)), 0x8001);
  EXPECT_EQ(FloatToBf16Rne(-0.0f), 0x8000);
}

TEST(ConversionsTest, Int8Edges) {
  EXPECT_EQ(FloatToInt8Sat(0.5f), 0);
  EXPECT_EQ(FloatToInt8Sat(std::nextafter(0.5f, 1.0f)), 1);
  EXPECT_EQ(FloatToInt8Sat(std::nextafter(0.5f, 0.0f)), 0);
  EXPECT_EQ(FloatToInt8Sat(1.5f), 2);
  EXPECT_EQ(FloatToInt8Sat(2.5f), 2);
  EXPECT_EQ(FloatToInt8Sat(-0.5f), 0);
  EXPECT_EQ(FloatToInt8Sat(-1.5f), -2);
  EXPECT_EQ(FloatToInt8Sat(-2.5f), -2);
  EXPECT_EQ(FloatToInt8Sat(126.5f), 126);
  EXPECT_EQ(FloatToInt8Sat(std::nextafter(126.5f, kInf)), 127);
  EXPECT_EQ(FloatToInt8Sat(127.0f), 127);
  EXPECT_EQ(FloatToInt8Sat(127.5f), 127);
  EXPECT_EQ(FloatToInt8Sat(128.0f), 127);
  EXPECT_EQ(FloatToInt8Sat(-128.0f), -127);  // symmetric: -128 is never produced
  EXPECT_EQ(FloatToInt8Sat(1e30f), 127);
  EXPECT_EQ(FloatToInt8Sat(kInf), 127);
  EXPECT_EQ(FloatToInt8Sat(-kInf), -127);
  EXPECT_EQ(FloatToInt8Sat(kNan), 0);
  EXPECT_EQ(FloatToInt8Sat(-0.0f), 0);
  EXPECT_EQ(FloatToInt8Sat(FromBits(1u)), 0);
  EXPECT_EQ(FloatToInt8Sat(-37.49f), -37);
  EXPECT_EQ(FloatToInt8Sat(-37.51f), -38);
}

}  // namespace
}  // namespace kvmesh
