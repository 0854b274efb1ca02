// CUDA block copy: launches the kernel of kernels/cuda/block_copy.cuh, kBlockCopyPairsPerLaunch
// pairs at a time (the pairs travel in the kernel parameters). The CPU twin is
// kernels/cpu/block_copy.cc.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/strings.h"
#include "kernels/block_copy_cuda.h"
#include "kernels/cuda/block_copy.cuh"

namespace kvmesh::cuda {

Status LaunchBlockCopy(const BlockCopyArgs& args, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementBlockCopy(args));
  const int n = args.num_tokens < 0 ? args.src.layout.tokens_per_block() : args.num_tokens;
  if (n == 0 || args.num_pairs == 0) return Status::Ok();
  CopyParams p{};
  std::uint32_t ctas = 0;
  KVMESH_RETURN_IF_ERROR(PlanBlockCopy(args, n, p, ctas));
  auto* s = static_cast<cudaStream_t>(stream);
  for (std::int64_t first = 0; first < args.num_pairs; first += kBlockCopyPairsPerLaunch) {
    const std::int64_t count = std::min(kBlockCopyPairsPerLaunch, args.num_pairs - first);
    SetPairs(args, first, count, p);
    BlockCopyKernel<<<dim3(ctas, static_cast<unsigned int>(count)), kThreads, 0, s>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
      return Status::CudaError(
          StrCat("LaunchBlockCopy: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
    }
  }
  return Status::Ok();
}

}  // namespace kvmesh::cuda
