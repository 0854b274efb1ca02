// Bit-exact scalar conversions between FP32 and the cache element formats: FP8 E4M3 (satfinite),
// E2M1 (FP4), BF16, FP16 and symmetric INT8. The same code is compiled by the host compiler and by
// nvcc for the device, so the CPU twin of every kernel produces the same bytes as the GPU.
//
// How the two sides are kept identical:
//   - Every rounding decision is integer arithmetic on the FP32 bit pattern (FloatToBits); the FPU
//     is never asked to round to a narrow format, so flush-to-zero or rounding-mode settings cannot
//     change a result.
//   - Where a rule contains floating arithmetic (the quantisers in kernels/quantize.h), it goes
//     through DivRn/MulRn: correctly rounded IEEE division/multiplication, `__fdiv_rn`/`__fmul_rn`
//     on the device (never contracted into an FMA, never an approximate reciprocal) and plain `/`,
//     `*` on the host, which is compiled with -ffp-contract=off (cmake/KvmeshCompiler.cmake) and
//     without fast-math.
//
// The rules (from the product brief, "Bit-exact conversions"):
//
//   FP8 E4M3, satfinite (FloatToE4M3Sat)
//     finite magnitudes: subnormals m·2^-9 (m = 1..7), normals (1 + m/8)·2^(e-7), e = 1..15, up to
//     448 (0x7E). 0x7F / 0xFF are NaN; there is no Inf.
//     round to nearest, ties to the even code; |x| > 448 and ±Inf → ±448 (a value in (448, 464]
//     rounds to 448 anyway; 464 is the tie with the unrepresentable 480); NaN (any sign or payload)
//     → 0x7F; |x| ≤ 2^-10 → ±0 (2^-10 is the tie between 0 and 2^-9 and goes to the even code 0;
//     the next float up rounds to 2^-9). The sign bit is kept when the magnitude rounds to zero
//     (-1e-30 → 0x80), as cuda_fp8.h's __nv_cvt_float_to_fp8 does.
//   E4M3 → FP32 (E4M3ToFloat): exact; 0x7F and 0xFF → the canonical NaN 0x7FFFFFFF (the sign of a
//     NaN is dropped, as cuda_fp8.h's decoder does).
//
//   E2M1 (FloatToE2M1): magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} are codes 0..7; bit 3 is the sign.
//     code = (a>0.25)+(a>=0.75)+(a>1.25)+(a>=1.75)+(a>2.5)+(a>=3.5)+(a>5) for a = |x|, which is
//     round to nearest, ties to the even code; a ≥ 6 and Inf → 6; NaN → +6 (0x7); a tiny negative
//     value is −0 (0x8), as cuda_fp4.h's __nv_cvt_float_to_fp4 does. Software only: sm_90 has no
//     FP4 conversion instruction. The nibble is returned in the low 4 bits of a byte; packing two
//     per byte (low nibble first) is the caller's job (kernels/quantize.h).
//   E2M1 → FP32 (E2M1ToFloat): exact; only the low 4 bits of the argument are read.
//
//   BF16 (FloatToBf16Rne): round to nearest even on the 16 dropped bits; overflow rounds to ±Inf,
//     Inf stays Inf, subnormals are rounded like any other value (no flush to zero). NaN → 0x7FFF,
//     the canonical NaN: what the device instruction cvt.rn.bf16.f32 produces (PTX: NaN results are
//     canonical) and what cuda_bf16.hpp's host path returns (it checks for NaN first and returns
//     0x7fff with the sign dropped). Choosing the same NaN as NVIDIA means a pool written by
//     NVIDIA's conversions and one written by ours are byte-identical.
//   BF16 → FP32 (Bf16ToFloat): exact, a 16-bit shift (NaN payloads are kept, as
//     __bfloat162float does).
//
//   FP16 (FloatToHalfRne): round to nearest even; |x| ≥ 65520 (the tie between 65504 and 2^16)
//     and ±Inf → ±Inf; FP16 subnormals (k·2^-24) are produced exactly, |x| ≤ 2^-25 → ±0 (sign
//     kept). NaN → 0x7FFF, the canonical NaN of cvt.rn.f16.f32 and of cuda_fp16.hpp's host path.
//   FP16 → FP32 (HalfToFloat): exact; a NaN becomes the canonical FP32 NaN 0x7FFFFFFF, as
//     cuda_fp16.hpp's __half2float host path does (sign and payload dropped).
//
//   INT8 (FloatToInt8Sat): the value is already divided by its scale (kernels/quantize.h); rounds
//     half to even (rint in the default rounding mode) and clamps to [-127, 127] (-128 is never
//     produced, so the format is symmetric); ±Inf → ±127; NaN → 0.
//
// Thread-safe: pure functions. Usable from host and device code; includes no CUDA header (device
// intrinsics are named only under __CUDA_ARCH__, where nvcc declares them).
#pragma once

#include <cstdint>

#include "common/host_device.h"

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

namespace kvmesh {

// ---------------------------------------------------------------------------------------------
// Bit access and correctly rounded arithmetic, identical on host and device.

KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}

KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float BitsToFloat(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

// a / b, correctly rounded (round to nearest even), never an approximate reciprocal.
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float DivRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// a * b, correctly rounded, never fused with a following add.
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

inline constexpr std::uint32_t kFloatSignBit = 0x80000000u;
inline constexpr std::uint32_t kFloatAbsMask = 0x7FFFFFFFu;
inline constexpr std::uint32_t kFloatInfBits = 0x7F800000u;
inline constexpr std::uint32_t kFloatCanonicalNan = 0x7FFFFFFFu;

KVMESH_HOST_DEVICE KVMESH_FORCEINLINE bool IsNanBits(std::uint32_t u) {
  return (u & kFloatAbsMask) > kFloatInfBits;
}
// True for finite values (not NaN, not ±Inf).
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE bool IsFiniteBits(std::uint32_t u) {
  return (u & kFloatAbsMask) < kFloatInfBits;
}

// Rounds the significand `sig` right by `shift` bits (1 ≤ shift ≤ 31), ties to even. A carry out
// of the kept bits is the caller's next binade, which is the correct encoding in every format here.
KVMESH_HOST_DEVICE KVMESH_FORCEINLINE std::uint32_t ShiftRightRne(std::uint32_t sig,
                                                                  std::uint32_t shift) {
  const std::uint32_t kept = sig >> shift;
  const std::uint32_t rest = sig & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  return kept + ((rest > half || (rest == half && (kept & 1u) != 0u)) ? 1u : 0u);
}

// ---------------------------------------------------------------------------------------------
// FP8 E4M3

inline constexpr std::uint8_t kE4M3MaxCode = 0x7E;  // 448
inline constexpr std::uint8_t kE4M3NanCode = 0x7F;
inline constexpr float kE4M3Max = 448.0f;

KVMESH_HOST_DEVICE inline std::uint8_t FloatToE4M3Sat(float x) {
  const std::uint32_t u = FloatToBits(x);
  const std::uint32_t a = u & kFloatAbsMask;
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  if (a > kFloatInfBits) return kE4M3NanCode;                 // NaN
  if (a > 0x43E80000u) return sign | kE4M3MaxCode;            // > 464 and Inf: saturate
  if (a <= 0x3A800000u) return sign;                          // ≤ 2^-10: ±0
  const std::uint32_t exp = a >> 23;                          // biased FP32 exponent
  const std::uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u;  // 24-bit significand
  if (exp >= 121u) {                                          // ≥ 2^-6: E4M3 normal
    // Biased E4M3 exponent exp - 120 in bits 3..6, mantissa the top 3 of 23 bits; rounding the
    // 24-bit significand by 20 keeps 4 bits (implicit 1 + 3); a carry bumps the exponent.
    const std::uint32_t r = ((exp - 120u) << 3) + ShiftRightRne(sig, 20u) - 8u;
    return static_cast<std::uint8_t>(sign | r);  // ≤ 464 rounds to ≤ 0x7E
  }
  // E4M3 subnormal: value = sig·2^(exp-150) = m·2^-9 → m = sig >> (141 - exp); exp ∈ [117, 120]
  // here, so the shift is 21..24. m = 8 after rounding is the smallest normal code 0x08.
  return static_cast<std::uint8_t>(sign | ShiftRightRne(sig, 141u - exp));
}

KVMESH_HOST_DEVICE inline float E4M3ToFloat(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t e = (code >> 3) & 0xFu;
  const std::uint32_t m = code & 0x7u;
  if (e == 0xFu && m == 0x7u) return BitsToFloat(kFloatCanonicalNan);
  if (e != 0u) return BitsToFloat(sign | ((e + 120u) << 23) | (m << 20));
  if (m == 0u) return BitsToFloat(sign);
  // Subnormal m·2^-9: normalise; the leading bit of m is at position p (0..2).
  const std::uint32_t p = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);
  return BitsToFloat(sign | ((p + 118u) << 23) | ((m - (1u << p)) << (23u - p)));
}

// ---------------------------------------------------------------------------------------------
// E2M1 (FP4)

inline constexpr std::uint8_t kE2M1MaxCode = 0x7;  // 6
inline constexpr float kE2M1Max = 6.0f;

KVMESH_HOST_DEVICE inline std::uint8_t FloatToE2M1(float x) {
  const std::uint32_t u = FloatToBits(x);
  const std::uint32_t a = u & kFloatAbsMask;
  if (a > kFloatInfBits) return kE2M1MaxCode;  // NaN → +6
  // The brief's sum of comparisons; for non-negative floats the order of the bit patterns is the
  // order of the values, so the thresholds are compared as integers.
  const std::uint32_t code = (a > 0x3E800000u ? 1u : 0u) +   // > 0.25
                             (a >= 0x3F400000u ? 1u : 0u) +  // >= 0.75
                             (a > 0x3FA00000u ? 1u : 0u) +   // > 1.25
                             (a >= 0x3FE00000u ? 1u : 0u) +  // >= 1.75
                             (a > 0x40200000u ? 1u : 0u) +   // > 2.5
                             (a >= 0x40600000u ? 1u : 0u) +  // >= 3.5
                             (a > 0x40A00000u ? 1u : 0u);    // > 5
  return static_cast<std::uint8_t>(((u >> 28) & 0x8u) | code);
}

KVMESH_HOST_DEVICE inline float E2M1ToFloat(std::uint8_t nibble) {
  const std::uint32_t sign = static_cast<std::uint32_t>(nibble & 0x8u) << 28;
  const std::uint32_t e = (nibble >> 1) & 0x3u;
  const std::uint32_t m = nibble & 0x1u;
  if (e == 0u) return BitsToFloat(sign | (m != 0u ? 0x3F000000u : 0u));  // 0 or 0.5
  return BitsToFloat(sign | ((e + 126u) << 23) | (m << 22));             // (1 + m/2)·2^(e-1)
}

// ---------------------------------------------------------------------------------------------
// BF16 and FP16

inline constexpr std::uint16_t kBf16CanonicalNan = 0x7FFF;
inline constexpr std::uint16_t kHalfCanonicalNan = 0x7FFF;

KVMESH_HOST_DEVICE inline std::uint16_t FloatToBf16Rne(float x) {
  const std::uint32_t u = FloatToBits(x);
  if (IsNanBits(u)) return kBf16CanonicalNan;
  // Adding 0x7FFF plus the lowest kept bit rounds half to even; a carry into the exponent is the
  // next binade, and past the largest finite value it is ±Inf.
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

KVMESH_HOST_DEVICE inline float Bf16ToFloat(std::uint16_t bits) {
  return BitsToFloat(static_cast<std::uint32_t>(bits) << 16);
}

KVMESH_HOST_DEVICE inline std::uint16_t FloatToHalfRne(float x) {
  const std::uint32_t u = FloatToBits(x);
  const std::uint32_t a = u & kFloatAbsMask;
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  if (a > kFloatInfBits) return kHalfCanonicalNan;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // ≥ 65520 and Inf → Inf
  if (a >= 0x38800000u) {                       // ≥ 2^-14: FP16 normal
    // Rebias the exponent (127 → 15) and round away 13 mantissa bits; a carry is the next binade.
    return static_cast<std::uint16_t>(sign | ShiftRightRne(a - 0x38000000u, 13u));
  }
  if (a <= 0x33000000u) return sign;  // ≤ 2^-25 (the tie with 2^-24): ±0
  // FP16 subnormal k·2^-24: k = sig·2^(exp-150+24) = sig >> (126 - exp); exp ∈ [102, 112], so the
  // shift is 14..24. k = 0x400 after rounding is the smallest normal code.
  const std::uint32_t exp = a >> 23;
  const std::uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u;
  return static_cast<std::uint16_t>(sign | ShiftRightRne(sig, 126u - exp));
}

KVMESH_HOST_DEVICE inline float HalfToFloat(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  std::uint32_t m = h & 0x3FFu;
  if (e == 0x1Fu) return BitsToFloat(m != 0u ? kFloatCanonicalNan : (sign | kFloatInfBits));
  if (e != 0u) return BitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0u) return BitsToFloat(sign);
  // Subnormal m·2^-24: shift m up until its leading bit reaches bit 10 (the implicit one).
  std::uint32_t exp = 113u;  // the FP32 biased exponent of 2^-14
  while ((m & 0x400u) == 0u) {
    m <<= 1;
    --exp;
  }
  return BitsToFloat(sign | (exp << 23) | ((m & 0x3FFu) << 13));
}

// ---------------------------------------------------------------------------------------------
// Symmetric INT8

inline constexpr int kInt8MaxCode = 127;

// `v` is x / scale. Round half to even, clamp to [-127, 127]; NaN → 0.
KVMESH_HOST_DEVICE inline std::int8_t FloatToInt8Sat(float v) {
  const std::uint32_t u = FloatToBits(v);
  const std::uint32_t a = u & kFloatAbsMask;
  if (a > kFloatInfBits) return 0;
  std::uint32_t q = 0;
  if (a >= 0x42FE0000u) {  // ≥ 127 (and Inf): clamp
    q = kInt8MaxCode;
  } else if (a > 0x3F000000u) {  // > 0.5 (0.5 itself is the tie with 0 → 0)
    // value = sig·2^(exp-150) with exp ∈ [126, 133]: the integer is sig >> (150 - exp), 17..24.
    const std::uint32_t exp = a >> 23;
    const std::uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u;
    q = ShiftRightRne(sig, 150u - exp);  // ≤ 127 since the value is < 127
  }
  const int signed_q = (u & kFloatSignBit) != 0u ? -static_cast<int>(q) : static_cast<int>(q);
  return static_cast<std::int8_t>(signed_q);
}

KVMESH_HOST_DEVICE KVMESH_FORCEINLINE float Int8ToFloat(std::int8_t q) {
  return static_cast<float>(q);
}

}  // namespace kvmesh
