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

#include "common/strings.h"
#include "kernels/append_kv_cuda.h"
#include "kernels/cuda/append_kv.cuh"

namespace kvmesh::cuda {
namespace {

Status CudaStatus(cudaError_t err) {
  return Status::CudaError(
      StrCat("LaunchAppendKv: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Blocks of the kernel one SM holds at once (computed once: a node's GPUs are of one kind).
template <typename In>
int ResidentBlocksPerSm() {
  static const int blocks = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, AppendRowsKernel<In>, kThreads, 0) !=
        cudaSuccess) {
      (void)cudaGetLastError();  // clear it; fall back to a guess
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
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return CudaStatus(err);
  // Without a token count, one resident wave loops over the rows; with one, enough blocks for one
  // row group per lane group, up to a few waves.
  const std::int64_t resident = std::int64_t{sms} * ResidentBlocksPerSm<In>();
  std::int64_t ctas = resident;
  if (total_tokens >= 0) {
    const std::int64_t rows = std::int64_t{total_tokens} * p.kv_factor * p.heads * p.subs;
    if (rows == 0) return Status::Ok();
    if (rows > kMaxRows) {
      return Status::NotSupported(StrCat("append: ", rows, " rows in one launch (at most ",
                                         kMaxRows, "): split the batch"));
    }
    const std::int64_t rows_per_cta = kThreads / p.group;
    ctas = std::clamp<std::int64_t>((rows + rows_per_cta - 1) / rows_per_cta, 1, 4 * resident);
  }
  AppendRowsKernel<In><<<static_cast<unsigned int>(ctas), kThreads, 0, stream>>>(p);
  err = cudaGetLastError();
  return err == cudaSuccess ? Status::Ok() : CudaStatus(err);
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
