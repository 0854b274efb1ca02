// Quantise and dequantise one quant block of the sparse-attention indexer K (DeepSeek-V3.2 style):
// the kIndexK / kIndexScale components of a pool (kernels/paged_kv_layout.h). Each token's indexer
// row of index_head_dim elements is cut into quant blocks of `qb` elements (index_quant_block,
// default 128); every quant block has one FP32 scale in kIndexScale.
//
//   fp8 (8-bit kIndexK)  scale = ScaleFromAmax(amax, 448);  q[i] = e4m3_satfinite(x[i] / scale)
//                        — exactly QuantizeHeadFp8 of kernels/quantize.h applied to the block
//   fp4 (4-bit kIndexK)  scale = ScaleFromAmax(amax, 6);    q[i] = e2m1(x[i] / scale)
//                        packed two per byte, element 2i in the low nibble
//   dequantised          x'[i] = e4m3(q[i]) * scale  or  e2m1(q[i]) * scale
//
// amax, the scale = 1 substitution and the NaN/Inf rules are those of kernels/quantize.h (HeadAmax,
// ScaleFromAmax; e2m1 maps ±Inf to ±6 and NaN to +6). Unlike nvfp4 there is no UE4M3 block scale
// and no global scale: the FP32 scale of the quant block plays both parts.
//
// The append kernel runs these on the CPU and (element by element, same operations) on the GPU.
// REQUIRES: n ≥ 1; fp4: n even. Thread-safe: pure functions.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "kernels/conversions.h"
#include "kernels/quantize.h"

namespace kvmesh {

// e2m1(x / scale) (the nibble in the low 4 bits).
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::uint8_t QuantizeFp4ScaledElement(float x, float scale) {
  return FloatToE2M1(DivRn(x, scale));
}

// FP8 quant block: writes q[0..n), returns the scale.
template <typename In>
KVMESH_HOST_DEVICE inline float QuantizeIndexBlockFp8(const In* x, int n, std::uint8_t* q) {
  return QuantizeHeadFp8(x, n, q);
}

// FP4 quant block: writes packed[0..n/2), returns the scale.
template <typename In>
KVMESH_HOST_DEVICE inline float QuantizeIndexBlockFp4(const In* x, int n, std::uint8_t* packed) {
  const float scale = ScaleFromAmax(HeadAmax(x, n), kE2M1MaxCodeValue);
  for (int i = 0; i < n; i += 2) {
    const std::uint8_t lo = QuantizeFp4ScaledElement(WidenToFloat(x[i]), scale);
    const std::uint8_t hi = QuantizeFp4ScaledElement(WidenToFloat(x[i + 1]), scale);
    packed[i / 2] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
  return scale;
}

KVMESH_HOST_DEVICE inline void DequantizeIndexBlockFp4(const std::uint8_t* packed, int n,
                                                       float scale, float* out) {
  for (int i = 0; i < n; ++i) out[i] = MulRn(E2M1ToFloat(Nvfp4Nibble(packed, i)), scale);
}

}  // namespace kvmesh
