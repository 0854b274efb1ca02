// kernels/conversions.h against NVIDIA's own conversions, host code paths of cuda_fp8.h,
// cuda_fp4.h, cuda_bf16.h and cuda_fp16.h (plain C++; no device is needed). Built only when the
// CUDA toolkit is present. Inputs: all 65,536 BF16 bit patterns as FP32 and their FP32 neighbours,
// plus a million random FP32 bit patterns (which include NaNs with every sign and payload).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/conversions.h"

namespace kvmesh {
namespace {

std::vector<float> Inputs() {
  std::vector<float> v;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const std::uint32_t u = p << 16;
    for (std::uint32_t w : {u, u + 1, u - 1, u | 0x8000u}) v.push_back(BitsToFloat(w));
  }
  std::mt19937 rng(2024);
  for (int i = 0; i < 1'000'000; ++i) v.push_back(BitsToFloat(rng()));
  return v;
}

template <typename Ours, typename Theirs>
int CountDisagreements(const char* what, const std::vector<float>& inputs, Ours ours,
                       Theirs theirs) {
  int mismatches = 0;
  for (float x : inputs) {
    const unsigned a = ours(x);
    const unsigned b = theirs(x);
    if (a != b && ++mismatches <= 10) {
      ADD_FAILURE() << what << "(0x" << std::hex << FloatToBits(x) << "): ours 0x" << a
                    << ", NVIDIA 0x" << b;
    }
  }
  std::printf("%s vs NVIDIA host path: %zu inputs, %d disagreements\n", what, inputs.size(),
              mismatches);
  return mismatches;
}

TEST(ConversionsNvidiaTest, EncodersAgreeWithNvidiaHostPaths) {
  const std::vector<float> inputs = Inputs();
  EXPECT_EQ(CountDisagreements("e4m3 satfinite", inputs, FloatToE4M3Sat,
                               [](float x) -> unsigned {
                                 return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
                               }),
            0);
  EXPECT_EQ(CountDisagreements("e2m1", inputs, FloatToE2M1,
                               [](float x) -> unsigned {
                                 return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
                               }),
            0);
  EXPECT_EQ(CountDisagreements(
                "bf16 rn", inputs, FloatToBf16Rne,
                [](float x) -> unsigned { return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x; }),
            0);
  EXPECT_EQ(
      CountDisagreements("fp16 rn", inputs, FloatToHalfRne,
                         [](float x) -> unsigned { return __half_raw(__float2half_rn(x)).x; }),
      0);
}

TEST(ConversionsNvidiaTest, DecodersAgreeWithNvidiaHostPaths) {
  // E4M3 and E2M1 decode to FP16 exactly in NVIDIA's API; widen that with __half2float.
  for (int c = 0; c < 256; ++c) {
    const float theirs = __half2float(__half(__nv_cvt_fp8_to_halfraw(std::uint8_t(c), __NV_E4M3)));
    EXPECT_EQ(FloatToBits(E4M3ToFloat(std::uint8_t(c))), FloatToBits(theirs)) << "code " << c;
  }
  for (int c = 0; c < 16; ++c) {
    const float theirs = __half2float(__half(__nv_cvt_fp4_to_halfraw(std::uint8_t(c), __NV_E2M1)));
    EXPECT_EQ(FloatToBits(E2M1ToFloat(std::uint8_t(c))), FloatToBits(theirs)) << "nibble " << c;
  }
  int half_mismatches = 0, bf16_mismatches = 0;
  for (std::uint32_t c = 0; c < 65536; ++c) {
    __half_raw hr;
    hr.x = std::uint16_t(c);
    __nv_bfloat16_raw br;
    br.x = std::uint16_t(c);
    half_mismatches += FloatToBits(HalfToFloat(std::uint16_t(c))) != FloatToBits(__half2float(hr));
    bf16_mismatches +=
        FloatToBits(Bf16ToFloat(std::uint16_t(c))) != FloatToBits(__bfloat162float(br));
  }
  EXPECT_EQ(half_mismatches, 0);
  EXPECT_EQ(bf16_mismatches, 0);
}

}  // namespace
}  // namespace kvmesh
