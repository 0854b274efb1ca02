// The array API of kernels/convert_arrays.h: argument validation, and the CPU twin against the
// per-element / per-head functions it is built from (the GPU test compares the CUDA launchers with
// this twin).
#include "kernels/convert_arrays.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace kvmesh {
namespace {

TEST(ConvertArraysTest, ValidationNamesFieldAndValue) {
  float in = 1.0f;
  std::uint8_t out = 0;
  ConvertElementsArgs c{ConvertOp::kFloatToE4M3, &in, &out, 1};
  EXPECT_TRUE(CanImplementConvertElements(c).ok());
  c.count = -1;
  EXPECT_TRUE(CanImplementConvertElements(c).IsInvalidArgument());
  c.count = 1;
  c.output = nullptr;
  EXPECT_TRUE(CanImplementConvertElements(c).IsInvalidArgument());
  c.output = &out;
  c.op = static_cast<ConvertOp>(kNumConvertOps);
  const Status bad_op = CanImplementConvertElements(c);
  EXPECT_TRUE(bad_op.IsInvalidArgument());
  EXPECT_NE(bad_op.message().find("op 9"), std::string::npos) << bad_op;
  c.op = ConvertOp::kFloatToE4M3;
  c.count = 0;
  c.input = nullptr;
  EXPECT_TRUE(CanImplementConvertElements(c).ok()) << "an empty conversion needs no memory";

  std::vector<float> x(24, 1.0f);
  std::vector<std::uint8_t> codes(24), sf(2);
  QuantizeHeadsArgs q{
      KvDtype::kNVFP4, HeadInputType::kFP32, x.data(), 1, 24, codes.data(), sf.data(), 1.0f};
  const Status not16 = CanImplementQuantizeHeads(q);
  EXPECT_TRUE(not16.IsInvalidArgument());
  EXPECT_NE(not16.message().find("head_dim 24"), std::string::npos) << not16;
  q.head_dim = 16;
  EXPECT_TRUE(CanImplementQuantizeHeads(q).ok());
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    q.pool_scale = bad;
    const Status s = CanImplementQuantizeHeads(q);
    EXPECT_TRUE(s.IsInvalidArgument()) << bad;
    EXPECT_NE(s.message().find("pool_scale"), std::string::npos) << s;
  }
  q.pool_scale = 1.0f;
  q.scales = nullptr;
  EXPECT_TRUE(CanImplementQuantizeHeads(q).IsInvalidArgument());
  q.dtype = KvDtype::kBF16;  // bf16 needs neither scales nor a pool scale
  q.pool_scale = 0.0f;
  EXPECT_TRUE(CanImplementQuantizeHeads(q).ok());
  q.head_dim = 0;
  EXPECT_TRUE(CanImplementQuantizeHeads(q).IsInvalidArgument());
  q.head_dim = 16;
  q.num_heads = -2;
  EXPECT_TRUE(CanImplementQuantizeHeads(q).IsInvalidArgument());
  q.num_heads = 1;
  q.input_type = static_cast<HeadInputType>(7);
  EXPECT_TRUE(CanImplementQuantizeHeads(q).IsInvalidArgument());
  q.input_type = HeadInputType::kFP32;
  q.dtype = static_cast<KvDtype>(kNumKvDtypes);
  EXPECT_TRUE(CanImplementQuantizeHeads(q).IsInvalidArgument());

  std::vector<float> out_f(16);
  DequantizeHeadsArgs d{KvDtype::kFP8, codes.data(), nullptr, 0.0f, 1, 16, out_f.data()};
  EXPECT_TRUE(CanImplementDequantizeHeads(d).IsInvalidArgument()) << "fp8 needs scales";
  d.dtype = KvDtype::kFP8PerTensor;
  EXPECT_TRUE(CanImplementDequantizeHeads(d).IsInvalidArgument()) << "pool_scale 0";
  d.pool_scale = 0.5f;
  EXPECT_TRUE(CanImplementDequantizeHeads(d).ok());
  EXPECT_TRUE(cpu::DequantizeHeads(d).ok());
  d.output = nullptr;
  EXPECT_TRUE(cpu::DequantizeHeads(d).IsInvalidArgument());
}

TEST(ConvertArraysTest, ConvertElementsAppliesTheScalarFunction) {
  std::mt19937 rng(11);
  constexpr int kN = 4096;
  std::vector<std::uint32_t> in(kN);
  for (auto& v : in) v = rng();
  in[0] = 0x7FC00000u;  // NaN
  in[1] = 0xFF800000u;  // -Inf
  for (int op = 0; op < kNumConvertOps; ++op) {
    const auto cop = static_cast<ConvertOp>(op);
    std::vector<std::uint8_t> out(kN * 4, 0xCD);
    ASSERT_TRUE(cpu::ConvertElements({cop, in.data(), out.data(), kN}).ok());
    for (int i = 0; i < kN; ++i) {
      float f;
      std::memcpy(&f, &in[i], 4);
      const auto* in8 = reinterpret_cast<const std::uint8_t*>(in.data());
      const auto* in16 = reinterpret_cast<const std::uint16_t*>(in.data());
      std::uint32_t want = 0, got = 0;
      const int ob = ConvertOpOutputBytes(cop);
      std::memcpy(&got, out.data() + std::size_t(i) * ob, ob);
      switch (cop) {
        case ConvertOp::kFloatToE4M3: want = FloatToE4M3Sat(f); break;
        case ConvertOp::kE4M3ToFloat: want = FloatToBits(E4M3ToFloat(in8[i])); break;
        case ConvertOp::kFloatToE2M1: want = FloatToE2M1(f); break;
        case ConvertOp::kE2M1ToFloat: want = FloatToBits(E2M1ToFloat(in8[i])); break;
        case ConvertOp::kFloatToBf16: want = FloatToBf16Rne(f); break;
        case ConvertOp::kBf16ToFloat: want = FloatToBits(Bf16ToFloat(in16[i])); break;
        case ConvertOp::kFloatToFp16: want = FloatToHalfRne(f); break;
        case ConvertOp::kFp16ToFloat: want = FloatToBits(HalfToFloat(in16[i])); break;
        case ConvertOp::kFloatToInt8: want = std::uint8_t(FloatToInt8Sat(f)); break;
      }
      ASSERT_EQ(got, want) << ConvertOpName(cop) << " element " << i;
    }
  }
}

TEST(ConvertArraysTest, QuantizeHeadsMatchesOneHeadAtATime) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  constexpr int kHeads = 9, kDim = 32;
  std::vector<float> x(kHeads * kDim);
  for (float& v : x) v = normal(rng);
  for (int d = 0; d < kDim; ++d) x[3 * kDim + d] = 0.0f;  // an all-zero head
  for (int dt = 0; dt < kNumKvDtypes; ++dt) {
    const auto dtype = static_cast<KvDtype>(dt);
    const int row_bytes = kDim * KvDtypeBits(dtype) / 8;
    std::vector<std::uint8_t> codes(kHeads * row_bytes), scales(kHeads * 4 * 2);
    const float pool_scale = 0.75f;
    ASSERT_TRUE(cpu::QuantizeHeads({dtype, HeadInputType::kFP32, x.data(), kHeads, kDim,
                                    codes.data(), scales.data(), pool_scale})
                    .ok());
    std::vector<float> back(x.size());
    ASSERT_TRUE(cpu::DequantizeHeads(
                    {dtype, codes.data(), scales.data(), pool_scale, kHeads, kDim, back.data()})
                    .ok());
    for (int h = 0; h < kHeads; ++h) {
      const float* xh = x.data() + h * kDim;
      const std::uint8_t* ch = codes.data() + h * row_bytes;
      std::vector<std::uint8_t> want(row_bytes);
      std::vector<float> want_back(kDim);
      switch (dtype) {
        case KvDtype::kFP8: {
          float s;
          std::memcpy(&s, scales.data() + 4 * h, 4);
          EXPECT_EQ(FloatToBits(s), FloatToBits(QuantizeHeadFp8(xh, kDim, want.data())));
          DequantizeHeadFp8(want.data(), kDim, s, want_back.data());
          break;
        }
        case KvDtype::kFP8PerTensor:
          QuantizeHeadFp8PerTensor(xh, kDim, pool_scale, want.data());
          DequantizeHeadFp8(want.data(), kDim, pool_scale, want_back.data());
          break;
        case KvDtype::kINT8: {
          float s;
          std::memcpy(&s, scales.data() + 4 * h, 4);
          auto* w = reinterpret_cast<std::int8_t*>(want.data());
          EXPECT_EQ(FloatToBits(s), FloatToBits(QuantizeHeadInt8(xh, kDim, w)));
          DequantizeHeadInt8(w, kDim, s, want_back.data());
          break;
        }
        case KvDtype::kNVFP4: {
          std::uint8_t sf[2];
          QuantizeHeadNvfp4(xh, kDim, pool_scale, want.data(), sf);
          EXPECT_EQ(scales[2 * h], sf[0]);
          EXPECT_EQ(scales[2 * h + 1], sf[1]);
          DequantizeHeadNvfp4(want.data(), sf, kDim, pool_scale, want_back.data());
          break;
        }
        case KvDtype::kBF16:
        case KvDtype::kFP16: {
          auto* w = reinterpret_cast<std::uint16_t*>(want.data());
          if (dtype == KvDtype::kBF16) {
            QuantizeHeadBf16(xh, kDim, w);
            DequantizeHeadBf16(w, kDim, want_back.data());
          } else {
            QuantizeHeadFp16(xh, kDim, w);
            DequantizeHeadFp16(w, kDim, want_back.data());
          }
          break;
        }
      }
      EXPECT_EQ(std::memcmp(ch, want.data(), row_bytes), 0) << KvDtypeName(dtype) << " head " << h;
      EXPECT_EQ(std::memcmp(back.data() + h * kDim, want_back.data(), kDim * 4), 0)
          << KvDtypeName(dtype) << " head " << h;
    }
  }
}

}  // namespace
}  // namespace kvmesh
