// CUDA paged decode attention: the launcher. The kernel, its instantiations and the parameters of a
// launch are in kernels/cuda/decode_attention.cuh (shared with the CPU emulation test).
//
// Must not be compiled with --use_fast_math (denormal block scales and small probabilities).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/decode_attention.cuh"
#include "kernels/decode_attention_cuda.h"

namespace kvmesh::cuda {
namespace {

template <int kHeadDim, decode::Codec kCodec, int kRows>
Status Launch(const decode::DecodeLaunch& l, cudaStream_t stream) {
  constexpr int kSmem = decode::SharedBytesOf<kHeadDim, kCodec, kRows>();
  auto* kernel = &decode::DecodeAttentionKernel<kHeadDim, kCodec, kRows>;
  KVMESH_RETURN_IF_ERROR(CudaCallStatus(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
      "LaunchDecodeAttention: cudaFuncSetAttribute"));
  ClearStaleCudaError();
  kernel<<<dim3(l.grid_x, l.grid_y), decode::kThreads, kSmem, stream>>>(l.params);
  return LaunchStatus("LaunchDecodeAttention");
}

}  // namespace

Status LaunchDecodeAttention(const DecodeAttentionArgs& args, Workspace workspace, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementDecodeAttention(args, workspace));
  if (args.num_seqs == 0) return Status::Ok();
  KVMESH_ASSIGN_OR_RETURN(const decode::DecodeLaunch launch,
                          decode::MakeDecodeLaunch(args, workspace));
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  KVMESH_RETURN_IF_ERROR(
      decode::DispatchDecode(launch.instance, [&]<int kHeadDim, decode::Codec kCodec, int kRows>() {
        return Launch<kHeadDim, kCodec, kRows>(launch, cuda_stream);
      }));
  if (!launch.needs_combine) return Status::Ok();
  return attention::LaunchCombine(launch.combine, cuda_stream, "LaunchDecodeAttention: combine");
}

}  // namespace kvmesh::cuda
