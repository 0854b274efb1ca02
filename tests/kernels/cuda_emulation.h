// CPU emulation of the CUDA device code of kernels/cuda/*.cuh, so that the kernels' device code
// compiles as plain C++ and runs on any machine against the CPU twins (label cpu). Include it
// before any kernels/cuda header: it defines KVMESH_CUDA_EMULATION, the CUDA built-ins the kernels
// use (threadIdx, blockIdx, __shfl_xor_sync, __syncthreads, __ldg, __byte_perm, ...) and the host
// implementations of the hardware wrappers of kernels/cuda/device_ops.cuh.
//
// Model (tests/kernels/cuda_emulation.cc):
//   - A block's threads are fibers (user-space stacks, switched in a few nanoseconds) on the
//   calling
//     thread. A fiber runs until it reaches a collective operation or returns.
//   - Warp collectives (__shfl_xor_sync, ldmatrix, mma.sync) complete when every live lane of the
//     warp has arrived at the same kind of operation; the last lane to arrive computes every
//     lane's result at once (as the hardware does: no lane sees another's later stores). Lanes at
//     different collectives, or a lane that returns while its warp waits, are reported as errors.
//   - __syncthreads completes when every live thread of the block has arrived; a thread that
//     returns while others wait at a barrier, and a block in which nobody can go on, are errors.
//   - Dynamic shared memory: exactly the launch's bytes per block, filled with 0xFF (NaN in every
//     16- and 32-bit float format) before each block, so a read of bytes nobody wrote shows.
//   - cp.async: the destination is filled with 0xFF when the copy is issued and receives the data
//     only when a WaitAsyncCopies of the same thread retires its group — a read before the wait (or
//     before the barrier after it) sees poison. Destinations must lie inside the block's shared
//     memory and be aligned to the copy's size; a thread that returns with copies in flight is an
//     error.
//   - ldmatrix: row addresses must lie inside shared memory, 16-byte aligned. mma.sync m16n8k16:
//     the documented fragment layouts (kernels/cuda/device_ops.cuh), inputs widened exactly, FP32
//     accumulation in k order (the hardware's internal order differs: results agree to FP32
//     rounding, not bit for bit).
//   - Arithmetic is the host's: exp2f, logf, fmaf ... of the C library (the device's exp2f and
//     logf differ by an ulp or two), conversions by kernels/conversions.h (bit-exact).
// It checks indexing, fragment layouts, barriers and cp.async ordering as far as one deterministic
// schedule shows them; it cannot show what only the hardware has (its memory model, timing).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/status.h"
#include "kernels/conversions.h"

#define KVMESH_CUDA_EMULATION 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct uint4 {
  unsigned int x, y, z, w;
};
struct uint2 {
  unsigned int x, y;
};
struct float4 {
  float x, y, z, w;
};
struct float2 {
  float x, y;
};
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
  return {x, y, z, w};
}
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

struct EmulatedIndex {
  unsigned int x = 0, y = 0, z = 0;
};
// The indices of the thread that runs now (the scheduler sets them before it resumes a fiber).
inline EmulatedIndex threadIdx, blockIdx, gridDim, blockDim;

using std::max;
using std::min;

namespace kvmesh::testing {

struct EmulatedLaunch {
  unsigned int grid_x = 1;
  unsigned int grid_y = 1;
  unsigned int threads = 32;     // a multiple of 32
  std::size_t shared_bytes = 0;  // dynamic shared memory per block
};

namespace emulation {

// Runs body(arg) on every thread of one block (threads as fibers); the error of the first broken
// rule (see the file comment), or OK.
Status RunBlock(unsigned int threads, std::size_t shared_bytes, void (*body)(const void*),
                const void* arg);

// The collectives and per-thread state, for the wrappers below. REQUIRES: called from a kernel that
// RunBlock runs (anything else aborts with a message).
std::uint32_t ShuffleXor(std::uint32_t value, unsigned int lane_mask);
void SyncThreads();
std::uint8_t* DynamicShared();
void CopyAsync(void* dst, const void* src, int bytes, bool valid);
void CommitAsyncCopies();
void WaitAsyncCopies(int pending);
void LoadMatrix(std::uint32_t (&r)[4], const void* row_address, bool transposed);
void Mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1, bool bf16);

}  // namespace emulation

// Runs kernel(params) on a grid_x × grid_y grid of blocks, block after block.
template <typename Params>
Status EmulateKernel(void (*kernel)(Params), const Params& params, const EmulatedLaunch& launch) {
  struct Call {
    void (*kernel)(Params);
    const Params* params;
  };
  const Call call{kernel, &params};
  gridDim = {launch.grid_x, launch.grid_y, 1};
  blockDim = {launch.threads, 1, 1};
  for (unsigned int by = 0; by < launch.grid_y; ++by) {
    for (unsigned int bx = 0; bx < launch.grid_x; ++bx) {
      blockIdx = {bx, by, 0};
      const Status s = emulation::RunBlock(
          launch.threads, launch.shared_bytes,
          [](const void* c) {
            const auto* k = static_cast<const Call*>(c);
            k->kernel(*k->params);
          },
          &call);
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

// Kernels without collectives or shared memory (block copy) can run every thread in turn, start to
// end, which is quicker; with `warp_lanes_concurrent` the block's threads are fibers
// (EmulateKernel).
template <typename Params>
Status EmulateGrid(void (*kernel)(Params), const Params& params, unsigned int grid_x,
                   unsigned int grid_y, unsigned int threads, bool warp_lanes_concurrent) {
  if (warp_lanes_concurrent) {
    return EmulateKernel(kernel, params, EmulatedLaunch{grid_x, grid_y, threads, 0});
  }
  gridDim = {grid_x, grid_y, 1};
  blockDim = {threads, 1, 1};
  for (unsigned int by = 0; by < grid_y; ++by) {
    for (unsigned int bx = 0; bx < grid_x; ++bx) {
      blockIdx = {bx, by, 0};
      for (unsigned int t = 0; t < threads; ++t) {
        threadIdx = {t, 0, 0};
        kernel(params);
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvmesh::testing

// ---------------------------------------------------------------------------------------------
// CUDA built-ins

// Every lane of the warp must call it (as on the device with a full mask).
inline std::uint32_t __shfl_xor_sync(unsigned int /*mask*/, std::uint32_t value, int lane_mask) {
  return kvmesh::testing::emulation::ShuffleXor(value, static_cast<unsigned int>(lane_mask));
}
inline int __shfl_xor_sync(unsigned int mask, int value, int lane_mask) {
  return static_cast<int>(__shfl_xor_sync(mask, static_cast<std::uint32_t>(value), lane_mask));
}
inline float __shfl_xor_sync(unsigned int mask, float value, int lane_mask) {
  return kvmesh::BitsToFloat(__shfl_xor_sync(mask, kvmesh::FloatToBits(value), lane_mask));
}
inline void __syncthreads() { kvmesh::testing::emulation::SyncThreads(); }

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline float __uint_as_float(std::uint32_t u) { return kvmesh::BitsToFloat(u); }
inline std::uint32_t __float_as_uint(float f) { return kvmesh::FloatToBits(f); }
inline float __expf(float x) { return std::exp(x); }
// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x (x bytes 0..3).
inline std::uint32_t __byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
  const std::uint64_t bytes = (std::uint64_t{y} << 32) | x;
  std::uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned int sel = (s >> (4 * i)) & 7u;
    r |= static_cast<std::uint32_t>((bytes >> (8 * sel)) & 0xFFu) << (8 * i);
  }
  return r;
}

#define KVMESH_DYNAMIC_SHARED(name) \
  std::uint8_t* const name = ::kvmesh::testing::emulation::DynamicShared()

// ---------------------------------------------------------------------------------------------
// The hardware wrappers of kernels/cuda/device_ops.cuh

namespace kvmesh::cuda::hw {

template <int kBytes>
inline void CopyAsync(void* dst, const void* src, bool valid) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  testing::emulation::CopyAsync(dst, src, kBytes, valid);
}
inline void CommitAsyncCopies() { testing::emulation::CommitAsyncCopies(); }
template <int kPending>
inline void WaitAsyncCopies() {
  testing::emulation::WaitAsyncCopies(kPending);
}
inline void LoadMatrixX4(std::uint32_t (&r)[4], const void* row_address) {
  testing::emulation::LoadMatrix(r, row_address, false);
}
inline void LoadMatrixX4Transposed(std::uint32_t (&r)[4], const void* row_address) {
  testing::emulation::LoadMatrix(r, row_address, true);
}
template <bool kBf16>
inline void MmaM16N8K16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                        std::uint32_t b1) {
  testing::emulation::Mma(c, a, b0, b1, kBf16);
}
template <bool kBf16>
inline std::uint32_t PackPair(float x, float y) {
  if constexpr (kBf16) {
    return std::uint32_t{FloatToBf16Rne(x)} | (std::uint32_t{FloatToBf16Rne(y)} << 16);
  } else {
    return std::uint32_t{FloatToHalfRne(x)} | (std::uint32_t{FloatToHalfRne(y)} << 16);
  }
}
inline float2 HalfPairToFloat2(std::uint32_t h2) {
  return {HalfToFloat(static_cast<std::uint16_t>(h2 & 0xFFFFu)),
          HalfToFloat(static_cast<std::uint16_t>(h2 >> 16))};
}
inline float HalfBitsToFloat(std::uint16_t h) { return HalfToFloat(h); }
inline std::uint32_t E4M3PairToHalfPair(std::uint32_t two_codes) {
  const auto half_of = [](std::uint32_t code) {
    return std::uint32_t{FloatToHalfRne(E4M3ToFloat(static_cast<std::uint8_t>(code & 0xFFu)))};
  };
  return half_of(two_codes) | (half_of(two_codes >> 8) << 16);
}

}  // namespace kvmesh::cuda::hw
