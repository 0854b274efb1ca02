// Device code shared by the decode-attention and MLA CUDA kernels
// (kernels/cuda/decode_attention.cu, kernels/cuda/mla_decode.cu): asynchronous global→shared copies
// (cp.async, sm_80+), tensor-core fragments (ldmatrix, mma.sync m16n8k16), activation loads and
// stores, the split-combine kernel and the launch-error check. Included only by .cu files of
// kernels/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "common/strings.h"
#include "kernels/attention_split.h"
#include "kernels/kernel_types.h"

namespace kvmesh::cuda::attention {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// --------------------------------------------------------------------------------------------
// cp.async: `bytes` (4, 8 or 16) from global `src` to shared `dst`; with valid == false nothing is
// read and the destination is zero-filled (src-size 0), so a tile past the end of a sequence holds
// zeros, which decode to 0 in every cache format.

__device__ __forceinline__ std::uint32_t SharedAddress(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

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

__device__ __forceinline__ void CommitAsyncCopies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void WaitAsyncCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// --------------------------------------------------------------------------------------------
// Tensor cores: mma.sync m16n8k16 with FP32 accumulation, fragments loaded with ldmatrix.
// A (16x16, row-major): a[0] rows g, cols 2t..2t+1; a[1] rows g+8; a[2] rows g, cols 8+2t; a[3]
// rows g+8, cols 8+2t (g = lane / 4, t = lane % 4). B (16x8, k x n): b[0] k = 2t..2t+1, n = g;
// b[1] k = 8+2t... C (16x8): c[0..1] row g, cols 2t..2t+1; c[2..3] row g+8.

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

// c += a · b with BF16 (kBf16) or FP16 inputs.
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

// Two floats as a packed BF16 or FP16 pair (x in the low half), round to nearest.
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

// --------------------------------------------------------------------------------------------
// Activations

// Element i of an activation array as float.
__device__ __forceinline__ float LoadAct(ActDtype dtype, const void* base, std::int64_t i) {
  switch (dtype) {
    case ActDtype::kFP32: return __ldg(static_cast<const float*>(base) + i);
    case ActDtype::kBF16:
      return __bfloat162float(__ldg(static_cast<const __nv_bfloat16*>(base) + i));
    case ActDtype::kFP16: return __half2float(__ldg(static_cast<const __half*>(base) + i));
  }
  return 0.0f;
}

// Stores x, y at elements i, i + 1 of an fp32 or bf16 output (i even).
__device__ __forceinline__ void StorePair(ActDtype dtype, void* base, std::int64_t i, float x,
                                          float y) {
  if (dtype == ActDtype::kBF16) {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(base) + i) =
        __floats2bfloat162_rn(x, y);
  } else {
    *reinterpret_cast<float2*>(static_cast<float*>(base) + i) = make_float2(x, y);
  }
}

// --------------------------------------------------------------------------------------------
// Merging (m, l) online-softmax states (log2 domain): the merged state is relative to max(m_a,
// m_b); a state with m = -inf is empty.
__device__ __forceinline__ float RescaleFactor(float m_old, float m_new) {
  return m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);
}

// --------------------------------------------------------------------------------------------
// Combine: one CTA of kCombineThreads per output row; each thread owns 4 consecutive columns of
// `width`. partial_out rows are normalised outputs, partial_lse natural-log lse (-inf: the split
// saw no key).
struct CombineParams {
  SplitWorkspaceLayout layout;
  const float* partial = nullptr;
  ActDtype out_dtype = ActDtype::kFP32;
  void* out = nullptr;
  float* lse = nullptr;
};

inline constexpr int kCombineThreads = 128;

// A template so that the kernel can live in a header included by several translation units.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) CombineSplitsKernel(CombineParams p) {
  const std::int64_t row = blockIdx.x;
  const int splits = p.layout.num_splits;
  float max_lse = -INFINITY;
  for (int s = 0; s < splits; ++s) max_lse = fmaxf(max_lse, p.partial[p.layout.LseOffset(s, row)]);
  float weight_sum = 0.0f;
  for (int col = 4 * threadIdx.x; col < p.layout.width; col += 4 * kThreads) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    weight_sum = 0.0f;
    if (max_lse != -INFINITY) {
      for (int s = 0; s < splits; ++s) {
        const float split_lse = p.partial[p.layout.LseOffset(s, row)];
        if (split_lse == -INFINITY) continue;
        const float w = __expf(split_lse - max_lse);
        weight_sum += w;
        const float4 o =
            *reinterpret_cast<const float4*>(p.partial + p.layout.OutOffset(s, row) + col);
        acc.x += w * o.x;
        acc.y += w * o.y;
        acc.z += w * o.z;
        acc.w += w * o.w;
      }
    }
    const float inv = weight_sum > 0.0f ? 1.0f / weight_sum : 0.0f;
    const std::int64_t base = row * p.layout.width + col;
    StorePair(p.out_dtype, p.out, base, acc.x * inv, acc.y * inv);
    StorePair(p.out_dtype, p.out, base + 2, acc.z * inv, acc.w * inv);
  }
  if (p.lse != nullptr && threadIdx.x == 0) {
    if (max_lse == -INFINITY) {
      p.lse[row] = -INFINITY;
    } else {
      float sum = 0.0f;
      for (int s = 0; s < splits; ++s) {
        const float split_lse = p.partial[p.layout.LseOffset(s, row)];
        if (split_lse != -INFINITY) sum += __expf(split_lse - max_lse);
      }
      p.lse[row] = max_lse + logf(sum);
    }
  }
}

inline Status LaunchCombine(const CombineParams& p, cudaStream_t stream) {
  if (p.layout.rows == 0) return Status::Ok();
  CombineSplitsKernel<kCombineThreads>
      <<<static_cast<unsigned int>(p.layout.rows), kCombineThreads, 0, stream>>>(p);
  return Status::Ok();
}

// kCudaError naming `what` with CUDA's text, or OK.
inline Status CheckCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(
      StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// kCudaError with the launcher's name and CUDA's text, or OK.
inline Status LaunchStatus(const char* launcher) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(
      StrCat(launcher, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

}  // namespace kvmesh::cuda::attention
