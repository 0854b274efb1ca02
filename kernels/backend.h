// KernelBackend: where the node's kernels run, chosen once at setup.
//
//   CPU backend  — multi-threaded (a ThreadPool), on host memory; a real execution target used by
//                  the node on machines without a GPU, and the oracle the CUDA kernels are tested
//                  against.
//   CUDA backend — kernels enqueued on one CUDA stream, on device memory (built when nvcc is
//   found).
//
// Completion: CPU calls return when their output is written. CUDA calls return once enqueued on the
// backend's stream; Synchronize() waits for everything enqueued so far. Errors detected before a
// launch (CanImplement...) are returned and nothing runs; launch errors are kCudaError.
//
// Thread safety: a backend is externally synchronised (one caller at a time, like a CUDA stream).
#pragma once

#include <memory>
#include <string_view>

#include "common/result.h"
#include "kernels/append_kv.h"
#include "kernels/block_copy.h"
#include "kernels/decode_attention.h"
#include "kernels/mla_decode.h"

namespace kvmesh {

class ThreadPool;

enum class BackendKind : std::uint8_t { kCpu = 0, kCuda = 1 };
std::string_view BackendKindName(BackendKind kind);  // "cpu", "cuda"

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  [[nodiscard]] virtual BackendKind kind() const = 0;

  virtual Status AppendKv(const AppendKvArgs& args) = 0;
  virtual Status AppendIndexK(const AppendIndexKArgs& args) = 0;
  virtual Status DecodeAttention(const DecodeAttentionArgs& args, Workspace workspace) = 0;
  virtual Status MlaDecode(const MlaDecodeArgs& args, Workspace workspace) = 0;
  virtual Status BlockCopy(const BlockCopyArgs& args) = 0;
  virtual Status Synchronize() = 0;
};

// The CPU backend runs on `executor` (not owned; null runs everything on the caller).
std::unique_ptr<KernelBackend> MakeCpuBackend(ThreadPool* executor);

// The CUDA backend on `device`, with its own stream. kNotSupported when built without CUDA;
// kCudaError when no such device exists.
Result<std::unique_ptr<KernelBackend>> MakeCudaBackend(int device);

}  // namespace kvmesh
