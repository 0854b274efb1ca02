// Device code shared by the decode-attention and MLA CUDA kernels
// (kernels/cuda/decode_attention.cuh, kernels/cuda/mla_decode.cuh): activation loads and stores,
// the merge rule of online-softmax states and the split-combine kernel; the launch of the combine
// kernel for the .cu launchers. The device code compiles as plain C++ against the CPU emulation
// (tests/kernels/cuda_emulation.h, included first), which runs it on the host; the launch is built
// only by nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/attention_split.h"
#include "kernels/cuda/device_ops.cuh"
#include "kernels/kernel_types.h"

#if !defined(KVMESH_CUDA_EMULATION)
#include "kernels/cuda/cuda_status.h"
#endif

namespace kvmesh::cuda::attention {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// --------------------------------------------------------------------------------------------
// Activations

// Element i of an activation array as float.
__device__ __forceinline__ float LoadAct(ActDtype dtype, const void* base, std::int64_t i) {
  switch (dtype) {
    case ActDtype::kFP32: return __ldg(static_cast<const float*>(base) + i);
    case ActDtype::kBF16:
      return __uint_as_float(std::uint32_t{__ldg(static_cast<const std::uint16_t*>(base) + i)}
                             << 16);
    case ActDtype::kFP16:
      return hw::HalfBitsToFloat(__ldg(static_cast<const std::uint16_t*>(base) + i));
  }
  return 0.0f;
}

// Stores x, y at elements i, i + 1 of an fp32 or bf16 output (i even).
__device__ __forceinline__ void StorePair(ActDtype dtype, void* base, std::int64_t i, float x,
                                          float y) {
  if (dtype == ActDtype::kBF16) {
    *reinterpret_cast<std::uint32_t*>(static_cast<std::uint16_t*>(base) + i) =
        hw::PackPair<true>(x, y);
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

#if !defined(KVMESH_CUDA_EMULATION)
// Launches the combine of p.layout's splits; kCudaError naming `launcher` when the launch fails.
inline Status LaunchCombine(const CombineParams& p, cudaStream_t stream, const char* launcher) {
  if (p.layout.rows == 0) return Status::Ok();
  ClearStaleCudaError();
  CombineSplitsKernel<kCombineThreads>
      <<<static_cast<unsigned int>(p.layout.rows), kCombineThreads, 0, stream>>>(p);
  return LaunchStatus(launcher);
}
#endif

}  // namespace kvmesh::cuda::attention
