// CUDA MLA decode: the launcher. The kernel and the parameters of a launch are in
// kernels/cuda/mla_decode.cuh (shared with the CPU emulation test).
//
// Must not be compiled with --use_fast_math.
#include <cuda_runtime.h>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/mla_decode_cuda.h"

namespace kvmesh::cuda {
namespace {

template <bool kFp8>
Status LaunchMla(const mla::MlaLaunch& l, cudaStream_t stream) {
  constexpr int kSmem = mla::MlaShape<kFp8>::kSharedBytes;
  auto* kernel = &mla::MlaDecodeKernel<kFp8>;
  KVMESH_RETURN_IF_ERROR(CudaCallStatus(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
      "LaunchMlaDecode: cudaFuncSetAttribute"));
  ClearStaleCudaError();
  kernel<<<dim3(l.grid_x, l.grid_y), mla::kThreads, kSmem, stream>>>(l.params);
  return LaunchStatus("LaunchMlaDecode");
}

}  // namespace

Status LaunchMlaDecode(const MlaDecodeArgs& args, Workspace workspace, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementMlaDecode(args, workspace));
  if (args.num_seqs == 0) return Status::Ok();
  KVMESH_ASSIGN_OR_RETURN(const mla::MlaLaunch launch, mla::MakeMlaLaunch(args, workspace));
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  // The one runtime-to-template switch: the latent pool's element type.
  KVMESH_RETURN_IF_ERROR(launch.fp8 ? LaunchMla<true>(launch, cuda_stream)
                                    : LaunchMla<false>(launch, cuda_stream));
  if (!launch.needs_combine) return Status::Ok();
  return attention::LaunchCombine(launch.combine, cuda_stream, "LaunchMlaDecode: combine");
}

}  // namespace kvmesh::cuda
