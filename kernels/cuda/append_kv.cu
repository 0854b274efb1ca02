// CUDA append with quantise-on-write; the CPU twin is kernels/cpu/append_kv.cc. Both quantise with
// the element steps of kernels/quantize.h and kernels/index_k_quantize.h, whose floating arithmetic
// goes through __fdiv_rn/__fmul_rn, so the bytes are equal. The kernel and its parameters are in
// kernels/cuda/append_kv.cuh; this file sizes the grid and launches.
//
// Instantiations: one kernel per activation dtype (3); the pool format is a uniform runtime switch.
// Must not be compiled with -ftz=true or --use_fast_math (see kernels/quantize.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/append_kv_cuda.h"
#include "kernels/cuda/append_kv.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvmesh::cuda {
namespace {

// Blocks of the kernel one SM holds at once (computed once: a node's GPUs are of one kind).
template <typename In>
int ResidentBlocksPerSm() {
  static const int blocks = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, AppendRowsKernel<In>, kThreads, 0) !=
        cudaSuccess) {
      ClearStaleCudaError();  // fall back to a guess; not an error of anybody's launch
      n = 4;
    }
    return std::max(n, 1);
  }();
  return blocks;
}

template <typename In>
Status LaunchRows(const AppendParams& p, std::int32_t total_tokens, cudaStream_t stream) {
  int device = 0;
  int sms = 0;
  KVMESH_RETURN_IF_ERROR(CudaCallStatus(cudaGetDevice(&device), "LaunchAppendKv: cudaGetDevice"));
  KVMESH_RETURN_IF_ERROR(
      CudaCallStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                     "LaunchAppendKv: cudaDeviceGetAttribute"));
  const std::int64_t resident = std::int64_t{sms} * ResidentBlocksPerSm<In>();
  const std::int64_t ctas = AppendCtas(p, total_tokens, resident);
  ClearStaleCudaError();
  AppendRowsKernel<In><<<static_cast<unsigned int>(ctas), kThreads, 0, stream>>>(p);
  return LaunchStatus("LaunchAppendKv");
}

Status Launch(const AppendParams& p, ActDtype act, std::int32_t total_tokens, void* stream) {
  auto* s = static_cast<cudaStream_t>(stream);
  switch (act) {
    case ActDtype::kFP32: return LaunchRows<float>(p, total_tokens, s);
    case ActDtype::kBF16: return LaunchRows<Bf16>(p, total_tokens, s);
    case ActDtype::kFP16: return LaunchRows<Fp16>(p, total_tokens, s);
  }
  return Status::InvalidArgument("append: unknown act_dtype");
}

}  // namespace

Status LaunchAppendKv(const AppendKvArgs& args, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementAppendKv(args));
  if (args.num_seqs == 0) return Status::Ok();
  return Launch(MakeAppendKvParams(args), args.act_dtype, args.total_tokens, stream);
}

Status LaunchAppendIndexK(const AppendIndexKArgs& args, void* stream) {
  KVMESH_RETURN_IF_ERROR(CanImplementAppendIndexK(args));
  if (args.num_seqs == 0) return Status::Ok();
  return Launch(MakeAppendIndexKParams(args), args.act_dtype, args.total_tokens, stream);
}

}  // namespace kvmesh::cuda
