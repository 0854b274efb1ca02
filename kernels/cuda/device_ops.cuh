// The hardware operations the attention kernels use beyond plain C++ arithmetic, behind small
// wrappers: asynchronous global→shared copies (cp.async with commit/wait groups, sm_80+),
// tensor-core fragments (ldmatrix x4 / x4.trans, mma.sync m16n8k16 with FP32 accumulation), the
// FP16/BF16/FP8 conversions that go through CUDA's vector types, and the block's dynamic shared
// memory. This file holds the device implementation (inline PTX and CUDA intrinsics); the CPU
// emulation of the device code (tests/kernels/cuda_emulation.h, which defines
// KVMESH_CUDA_EMULATION and must be included first) supplies the same functions for the host, so
// the kernels' device code (kernels/cuda/*.cuh) compiles and runs on the CPU unchanged.
//
// Besides these, the kernels use CUDA built-ins that need no wrapper (threadIdx, blockIdx,
// __syncthreads, __shfl_xor_sync, __ldg, __byte_perm, __float_as_uint, exp2f, ...): the emulation
// defines those too.
//
// Fragment layouts of mma.sync.m16n8k16 (PTX ISA, "matrix fragments for mma.m16n8k16", floating
// point), g = lane / 4, t = lane % 4, two 16-bit elements per register (the lower column in the low
// half):
//   A (16x16, row-major): a[0] row g, cols 2t, 2t+1; a[1] row g+8, cols 2t, 2t+1;
//                         a[2] row g, cols 2t+8, 2t+9; a[3] row g+8, cols 2t+8, 2t+9
//   B (16x8, k x n):      b0 rows k = 2t, 2t+1 of col n = g; b1 rows k = 2t+8, 2t+9 of col g
//   C (16x8, FP32):       c[0], c[1] row g, cols 2t, 2t+1; c[2], c[3] row g+8, cols 2t, 2t+1
// ldmatrix.m8n8.x4.b16: lanes 8i..8i+7 give the row addresses of matrix i (16 bytes each, 16-byte
// aligned, in shared memory); register r[i] of lane l receives row l/4, elements 2(l%4), 2(l%4)+1
// of matrix i — with .trans, elements (2(l%4), l/4) and (2(l%4)+1, l/4), i.e. the transposed
// matrix.
#pragma once

#include <cstdint>

#if defined(KVMESH_CUDA_EMULATION)
// The host implementations are those of tests/kernels/cuda_emulation.h.
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

// The block's dynamic shared memory as `std::uint8_t name[]`, 16-byte aligned.
#define KVMESH_DYNAMIC_SHARED(name) extern __shared__ __align__(16) std::uint8_t name[]

namespace kvmesh::cuda::hw {

__device__ __forceinline__ std::uint32_t SharedAddress(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async: `kBytes` (4, 8 or 16) from global `src` to shared `dst`; with valid == false nothing is
// read and the destination is zero-filled (src-size 0). The copy lands when a later
// WaitAsyncCopies retires the group it was committed with; until then `dst` is undefined.
template <int kBytes>
__device__ __forceinline__ void CopyAsync(void* dst, const void* src, bool valid) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const std::uint32_t src_size = valid ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)),
                 "l"(src), "r"(src_size)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(SharedAddress(dst)),
                 "l"(src), "n"(kBytes), "r"(src_size)
                 : "memory");
  }
}

// Closes the calling thread's current group of cp.async copies.
__device__ __forceinline__ void CommitAsyncCopies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of the calling thread's committed groups are still in flight. Other
// threads' copies need a __syncthreads() after it before they may be read.
template <int kPending>
__device__ __forceinline__ void WaitAsyncCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void LoadMatrixX4(std::uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_address)));
}

__device__ __forceinline__ void LoadMatrixX4Transposed(std::uint32_t (&r)[4],
                                                       const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_address)));
}

// c += a · b with BF16 (kBf16) or FP16 inputs and FP32 accumulation.
template <bool kBf16>
__device__ __forceinline__ void MmaM16N8K16(float (&c)[4], const std::uint32_t (&a)[4],
                                            std::uint32_t b0, std::uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a packed BF16 (kBf16) or FP16 pair, x in the low half, round to nearest even.
template <bool kBf16>
__device__ __forceinline__ std::uint32_t PackPair(float x, float y) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

// A packed FP16 pair (low half first) as two floats (exact).
__device__ __forceinline__ float2 HalfPairToFloat2(std::uint32_t h2) {
  return __half22float2(*reinterpret_cast<const __half2*>(&h2));
}

// One FP16 value (its bits) as float (exact).
__device__ __forceinline__ float HalfBitsToFloat(std::uint16_t h) {
  return __half2float(*reinterpret_cast<const __half*>(&h));
}

// Two E4M3 codes (the low 16 bits, the lower code first) as a packed FP16 pair (exact: every E4M3
// value is an FP16 value).
__device__ __forceinline__ std::uint32_t E4M3PairToHalfPair(std::uint32_t two_codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xFFFFu), __NV_E4M3);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

}  // namespace kvmesh::cuda::hw

#endif  // KVMESH_CUDA_EMULATION
