// Quantise and dequantise one head vector for every cache dtype: the code the append kernel
// (quantise-on-write) and attention (dequantise-on-read) run on the CPU and on the GPU. Everything
// here is KVMESH_HOST_DEVICE and built from kernels/conversions.h, so both sides produce the same
// bytes.
//
// A head vector is `n` contiguous elements x[0..n) of one (token, head), FP32, BF16 (Bf16) or
// FP16 (Fp16) input; BF16/FP16 inputs are widened to FP32 exactly first, so they quantise exactly
// as their FP32 values do.
//
// Order of operations (each step one correctly rounded FP32 operation; DivRn/MulRn are
// __fdiv_rn/__fmul_rn on the device, `/` and `*` on the host built with -ffp-contract=off):
//
//   fp8 per (token, head)  amax   = HeadAmax(x)                     (see "amax" below)
//                          scale  = amax / 448                      DivRn; 1 if that is 0
//                          q[i]   = e4m3_satfinite(x[i] / scale)    DivRn, never x·(1/scale)
//                          x'[i]  = e4m3(q[i]) * scale              MulRn
//   fp8 per tensor         q[i]   = e4m3_satfinite(x[i] / scale)    scale: the pool's constant
//                          x'[i]  = e4m3(q[i]) * scale
//   int8 per (token, head) scale  = amax / 127                      DivRn; 1 if that is 0
//                          q[i]   = clamp(rint(x[i] / scale), -127, 127)   half to even; NaN → 0
//                          x'[i]  = float(q[i]) * scale
//   nvfp4, per 16 elements amax16 = HeadAmax(x[16b .. 16b+16))
//                          SF     = e4m3_satfinite(gs * (amax16 / 6))     DivRn, then MulRn
//                          q[i]   = e2m1(x[i] * (gs / e4m3(SF)))          DivRn, then MulRn
//                                   SF == 0 (code 0x00): every q of the block is 0
//                          x'[i]  = e2m1(q[i]) * e4m3(SF) / gs           MulRn, then DivRn
//                          (gs is the pool's FP32 global scale)
//   bf16 / fp16            q[i]   = FloatToBf16Rne / FloatToHalfRne(x[i]); x'[i] exact decode
//
// amax and the special values (the same on CPU and GPU, tested in tests/kernels):
//   - amax is the largest |x[i]| over the FINITE elements: NaN and ±Inf are ignored, so one bad
//     element does not destroy the scale of the others. A vector with no finite non-zero element
//     has amax 0.
//   - amax = 0 → scale 1 (fp8, int8). The codes are then those of x / 1: ±0 elements give code 0
//     (FP8 keeps the sign: +0 → 0x00, −0 → 0x80; both decode to zero), so "amax = 0 → scale 1,
//     codes 0". The same substitution happens when amax / max_code underflows to 0 (amax below
//     about 3e-43), where dividing by the zero scale would turn zeros into NaN codes.
//   - Non-finite elements use the format's own rules after the division: ±Inf → ±448 (fp8),
//     ±127 (int8), ±6 (nvfp4); NaN → 0x7F (fp8), 0 (int8), +6 = 0x7 (nvfp4).
//   - nvfp4: SF saturates at 448 when gs·amax16/6 > 448 (elements then saturate at ±6); SF rounds
//   to
//     0 when gs·amax16/6 ≤ 2^-10, and then the whole block is codes 0 — including NaN elements.
//
// Packing (nvfp4): element 2i is the low nibble of byte i, element 2i+1 the high nibble; the block
// scales are one byte per 16 elements, in element order. Shapes:
//   fp8 / fp8 per tensor: codes [n] bytes        scale: one float (per tensor: given)
//   int8:                 codes [n] int8         scale: one float
//   nvfp4:                codes [n/2] bytes      block scales [n/16] UE4M3 bytes; gs given
//   bf16 / fp16:          [n] uint16 bit patterns
//
// REQUIRES (not checked here; the array API in kernels/convert_arrays.h validates at its edge):
// n ≥ 1; nvfp4: n % 16 == 0; a given scale or gs is finite and > 0; outputs do not alias inputs.
//
// Device code that includes this header must not be built with -ftz=true or --use_fast_math: the
// _rn intrinsics would then flush subnormal scales and quotients, which the host does not.
//
// Thread-safe: pure functions on caller-owned memory.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "kernels/conversions.h"

namespace kvmesh {

// BF16 / FP16 element storage: the bit pattern, 2 bytes, layout-compatible with __nv_bfloat16 and
// __half (so device pointers to those may be passed as Bf16* / Fp16*).
struct Bf16 {
  std::uint16_t bits;
};
struct Fp16 {
  std::uint16_t bits;
};

KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float WidenToFloat(float x) { return x; }
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float WidenToFloat(Bf16 x) { return Bf16ToFloat(x.bits); }
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float WidenToFloat(Fp16 x) { return HalfToFloat(x.bits); }

inline constexpr float kFp8MaxCodeValue = 448.0f;
inline constexpr float kInt8MaxCodeValue = 127.0f;
inline constexpr float kE2M1MaxCodeValue = 6.0f;

// ---------------------------------------------------------------------------------------------
// Element-level building blocks (attention dequantises one element at a time with these).

// Largest |x[i]| over the finite elements of x[0..n); 0 when there is none.
template <typename In>
KVMESH_HOST_DEVICE inline float HeadAmax(const In* x, int n) {
  std::uint32_t amax_bits = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t a = FloatToBits(WidenToFloat(x[i])) & kFloatAbsMask;
    // For non-negative floats the bit patterns order like the values.
    if (a < kFloatInfBits && a > amax_bits) amax_bits = a;
  }
  return BitsToFloat(amax_bits);
}

// amax / max_code, or 1 when that is 0 (amax = 0, or so small that the quotient underflows).
KVMESH_HOST_DEVICE inline float ScaleFromAmax(float amax, float max_code) {
  const float scale = DivRn(amax, max_code);
  return FloatToBits(scale) != 0u ? scale : 1.0f;  // amax ≥ +0, so only +0 is replaced
}

KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::uint8_t QuantizeFp8Element(float x, float scale) {
  return FloatToE4M3Sat(DivRn(x, scale));
}
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float DequantizeFp8Element(std::uint8_t q, float scale) {
  return MulRn(E4M3ToFloat(q), scale);
}
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::int8_t QuantizeInt8Element(float x, float scale) {
  return FloatToInt8Sat(DivRn(x, scale));
}
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float DequantizeInt8Element(std::int8_t q, float scale) {
  return MulRn(Int8ToFloat(q), scale);
}

// The UE4M3 block scale SF = e4m3_satfinite(gs * (amax16 / 6)) of one 16-element block.
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::uint8_t Nvfp4BlockScale(float amax16, float gs) {
  return FloatToE4M3Sat(MulRn(gs, DivRn(amax16, kE2M1MaxCodeValue)));
}
// The factor gs / SF that multiplies every element of a block before e2m1; only for SF != 0.
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float Nvfp4EncodeFactor(std::uint8_t sf, float gs) {
  return DivRn(gs, E4M3ToFloat(sf));
}
// e2m1(x * factor), or 0 when the block scale is 0 (`factor` is then unused).
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::uint8_t QuantizeNvfp4Element(float x, std::uint8_t sf,
                                                                        float factor) {
  return sf == 0u ? std::uint8_t{0} : FloatToE2M1(MulRn(x, factor));
}
// e2m1(q) * SF / gs, evaluated left to right.
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float DequantizeNvfp4Element(std::uint8_t nibble,
                                                                   std::uint8_t sf, float gs) {
  return DivRn(MulRn(E2M1ToFloat(nibble), E4M3ToFloat(sf)), gs);
}
// Nibble `i` of a packed E2M1 row (low nibble first).
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::uint8_t Nvfp4Nibble(const std::uint8_t* packed,
                                                               std::int64_t i) {
  return static_cast<std::uint8_t>((packed[i >> 1] >> ((i & 1) * 4)) & 0xFu);
}

// ---------------------------------------------------------------------------------------------
// Whole head vectors.

// FP8 E4M3 with one scale per (token, head). Writes q[0..n), returns the scale.
template <typename In>
KVMESH_HOST_DEVICE inline float QuantizeHeadFp8(const In* x, int n, std::uint8_t* q) {
  const float scale = ScaleFromAmax(HeadAmax(x, n), kFp8MaxCodeValue);
  for (int i = 0; i < n; ++i) q[i] = QuantizeFp8Element(WidenToFloat(x[i]), scale);
  return scale;
}

// FP8 E4M3 with the pool's scale (fp8_per_tensor). REQUIRES scale finite and > 0.
template <typename In>
KVMESH_HOST_DEVICE inline void QuantizeHeadFp8PerTensor(const In* x, int n, float scale,
                                                        std::uint8_t* q) {
  for (int i = 0; i < n; ++i) q[i] = QuantizeFp8Element(WidenToFloat(x[i]), scale);
}

// Dequantises fp8 (either scale kind): out[i] = e4m3(q[i]) * scale.
KVMESH_HOST_DEVICE inline void DequantizeHeadFp8(const std::uint8_t* q, int n, float scale,
                                                 float* out) {
  for (int i = 0; i < n; ++i) out[i] = DequantizeFp8Element(q[i], scale);
}

// INT8 with one scale per (token, head). Writes q[0..n), returns the scale.
template <typename In>
KVMESH_HOST_DEVICE inline float QuantizeHeadInt8(const In* x, int n, std::int8_t* q) {
  const float scale = ScaleFromAmax(HeadAmax(x, n), kInt8MaxCodeValue);
  for (int i = 0; i < n; ++i) q[i] = QuantizeInt8Element(WidenToFloat(x[i]), scale);
  return scale;
}

KVMESH_HOST_DEVICE inline void DequantizeHeadInt8(const std::int8_t* q, int n, float scale,
                                                  float* out) {
  for (int i = 0; i < n; ++i) out[i] = DequantizeInt8Element(q[i], scale);
}

// NVFP4: writes packed[0..n/2) and block_scales[0..n/16). REQUIRES n % 16 == 0, gs finite > 0.
template <typename In>
KVMESH_HOST_DEVICE inline void QuantizeHeadNvfp4(const In* x, int n, float gs, std::uint8_t* packed,
                                                 std::uint8_t* block_scales) {
  for (int b = 0; b < n / 16; ++b) {
    const In* xb = x + b * 16;
    const std::uint8_t sf = Nvfp4BlockScale(HeadAmax(xb, 16), gs);
    block_scales[b] = sf;
    const float factor = sf == 0u ? 0.0f : Nvfp4EncodeFactor(sf, gs);
    for (int i = 0; i < 16; i += 2) {
      const std::uint8_t lo = QuantizeNvfp4Element(WidenToFloat(xb[i]), sf, factor);
      const std::uint8_t hi = QuantizeNvfp4Element(WidenToFloat(xb[i + 1]), sf, factor);
      packed[(b * 16 + i) / 2] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
}

KVMESH_HOST_DEVICE inline void DequantizeHeadNvfp4(const std::uint8_t* packed,
                                                   const std::uint8_t* block_scales, int n,
                                                   float gs, float* out) {
  for (int i = 0; i < n; ++i) {
    out[i] = DequantizeNvfp4Element(Nvfp4Nibble(packed, i), block_scales[i / 16], gs);
  }
}

// BF16 / FP16 caches: round to nearest even (see conversions.h for NaN and overflow).
template <typename In>
KVMESH_HOST_DEVICE inline void QuantizeHeadBf16(const In* x, int n, std::uint16_t* q) {
  for (int i = 0; i < n; ++i) q[i] = FloatToBf16Rne(WidenToFloat(x[i]));
}
KVMESH_HOST_DEVICE inline void DequantizeHeadBf16(const std::uint16_t* q, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = Bf16ToFloat(q[i]);
}
template <typename In>
KVMESH_HOST_DEVICE inline void QuantizeHeadFp16(const In* x, int n, std::uint16_t* q) {
  for (int i = 0; i < n; ++i) q[i] = FloatToHalfRne(WidenToFloat(x[i]));
}
KVMESH_HOST_DEVICE inline void DequantizeHeadFp16(const std::uint16_t* q, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = HalfToFloat(q[i]);
}

}  // namespace kvmesh
