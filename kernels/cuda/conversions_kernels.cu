// CUDA implementation of the conversion kernels; the CPU twin is kernels/cpu/convert_arrays.cc.
// Both run the per-element and per-head steps of kernels/convert_arrays.h, whose floating
// arithmetic goes through __fdiv_rn/__fmul_rn (kernels/conversions.h), so the bytes are equal.
//
// Must not be compiled with -ftz=true or --use_fast_math (see kernels/quantize.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/strings.h"
#include "kernels/conversions_cuda.h"

namespace kvmesh::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr std::int64_t kMaxBlocks = 65535;

__global__ void ConvertElementsKernel(ConvertElementsArgs args) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < args.count;
       i += stride) {
    ConvertElementAt(args, i);
  }
}

__global__ void QuantizeHeadsKernel(QuantizeHeadsArgs args) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t h = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; h < args.num_heads;
       h += stride) {
    QuantizeHeadAt(args, h);
  }
}

__global__ void DequantizeHeadsKernel(DequantizeHeadsArgs args) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t h = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; h < args.num_heads;
       h += stride) {
    DequantizeHeadAt(args, h);
  }
}

unsigned int GridFor(std::int64_t items) {
  const std::int64_t blocks = (items + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned int>(std::clamp<std::int64_t>(blocks, 1, kMaxBlocks));
}

Status LaunchStatus(const char* launcher) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(
      StrCat(launcher, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

}  // namespace

Status LaunchConvertElements(const ConvertElementsArgs& args, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementConvertElements(args));
  if (args.count == 0) return Status::Ok();
  ConvertElementsKernel<<<GridFor(args.count), kThreadsPerBlock, 0,
                          static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchStatus("LaunchConvertElements");
}

Status LaunchQuantizeHeads(const QuantizeHeadsArgs& args, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementQuantizeHeads(args));
  if (args.num_heads == 0) return Status::Ok();
  QuantizeHeadsKernel<<<GridFor(args.num_heads), kThreadsPerBlock, 0,
                        static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchStatus("LaunchQuantizeHeads");
}

Status LaunchDequantizeHeads(const DequantizeHeadsArgs& args, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementDequantizeHeads(args));
  if (args.num_heads == 0) return Status::Ok();
  DequantizeHeadsKernel<<<GridFor(args.num_heads), kThreadsPerBlock, 0,
                          static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchStatus("LaunchDequantizeHeads");
}

}  // namespace kvmesh::cuda
