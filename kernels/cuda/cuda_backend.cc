// The CUDA backend: the CUDA launchers on one stream the backend owns, on one device. Plain C++
// against the CUDA runtime API (no device code here).
//
// Every call first makes the backend's device current on the calling thread (cudaSetDevice), so a
// backend may be driven from any thread (one at a time: it is externally synchronised).
//
// Memory: Allocate is cudaMalloc on the backend's device (freed by cudaFree with that device made
// current); Upload is cudaMemcpyAsync on the backend's stream followed by a wait for the stream
// (the source may be reused when it returns, pageable or pinned); Download is cudaMemcpyAsync on
// the stream (filled once Synchronize() returns). Copies are cudaMemcpyDefault: the direction is
// taken from the pointers (unified addressing), since a kind that does not match them is undefined
// behaviour — device memory, IPC-mapped memory and pinned host memory all work as `dst`/`src`.
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>

#include "common/strings.h"
#include "kernels/append_kv_cuda.h"
#include "kernels/backend.h"
#include "kernels/block_copy_cuda.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/decode_attention_cuda.h"
#include "kernels/mla_decode_cuda.h"

namespace kvmesh {
namespace {

// (Clears the thread's last error too, so that no later launch reports this failure as its own.)
Status CudaStatus(std::string_view what, cudaError_t err) {
  return cuda::CudaCallStatus(err, what);
}

using cuda::ScopedDevice;

// BackendBuffer's release for cudaMalloc'd memory. Errors cannot be reported from here (kernels/
// does not log, a destructor does not throw); a failed cudaFree leaves the memory to the context.
void FreeDevice(void* data, int device) noexcept {
  const ScopedDevice current(device);
  if (current.ok()) (void)cudaFree(data);
  (void)cudaGetLastError();  // not a later launch's error
}

Status CheckCopy(std::string_view what, const void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) {
    return Status::InvalidArgument(StrCat(what, " of ", bytes, " bytes with a null pointer"));
  }
  return Status::Ok();
}

// Owns one non-blocking CUDA stream of one device.
class CudaStream {
 public:
  CudaStream(int device, cudaStream_t s) : device_(device), stream_(s) {}
  ~CudaStream() {
    if (stream_ == nullptr) return;
    // Queued work still completes. The stream's device is made current for the call and the
    // caller's current device is restored; errors cannot be reported from here (kernels/ does not
    // log) and leave nothing to clean up.
    const ScopedDevice current(device_);
    if (current.ok()) (void)cudaStreamDestroy(stream_);
  }
  CudaStream(CudaStream&& other) noexcept
      : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&&) = delete;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  [[nodiscard]] cudaStream_t get() const { return stream_; }

 private:
  int device_;
  cudaStream_t stream_;
};

class CudaBackend final : public KernelBackend {
 public:
  CudaBackend(int device, CudaStream stream) : device_(device), stream_(std::move(stream)) {}

  [[nodiscard]] BackendKind kind() const override { return BackendKind::kCuda; }
  [[nodiscard]] bool host_addressable() const override { return false; }

  Result<BackendBuffer> Allocate(std::size_t bytes) override {
    if (bytes == 0) return BackendBuffer();
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // reported here
      return Status::ResourceExhausted(
          StrCat("cuda backend: cannot allocate ", bytes, " bytes on device ", device_));
    }
    if (err != cudaSuccess) {
      return CudaStatus(StrCat("cudaMalloc of ", bytes, " bytes on device ", device_), err);
    }
    return BackendBuffer(p, bytes, &FreeDevice, device_);
  }
  // Waits for the stream after the copy: the source may be reused when this returns (a pinned
  // source would otherwise still be read by the DMA engine; a pageable one is staged by the
  // driver).
  Status Upload(void* dst, const void* src, std::size_t bytes) override {
    KVMESH_RETURN_IF_ERROR(CheckCopy("cuda backend upload", dst, src, bytes));
    if (bytes == 0) return Status::Ok();
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_.get());
    if (err != cudaSuccess) {
      return CudaStatus(StrCat("cuda backend upload of ", bytes, " bytes on device ", device_),
                        err);
    }
    err = cudaStreamSynchronize(stream_.get());
    return err == cudaSuccess
               ? Status::Ok()
               : CudaStatus(StrCat("cuda backend upload of ", bytes, " bytes on device ", device_),
                            err);
  }
  Status Download(void* dst, const void* src, std::size_t bytes) override {
    KVMESH_RETURN_IF_ERROR(CheckCopy("cuda backend download", dst, src, bytes));
    if (bytes == 0) return Status::Ok();
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_.get());
    return err == cudaSuccess
               ? Status::Ok()
               : CudaStatus(
                     StrCat("cuda backend download of ", bytes, " bytes on device ", device_), err);
  }

  Status AppendKv(const AppendKvArgs& args) override {
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    return cuda::LaunchAppendKv(args, stream_.get());
  }
  Status AppendIndexK(const AppendIndexKArgs& args) override {
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    return cuda::LaunchAppendIndexK(args, stream_.get());
  }
  Status DecodeAttention(const DecodeAttentionArgs& args, Workspace workspace) override {
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    return cuda::LaunchDecodeAttention(args, workspace, stream_.get());
  }
  Status MlaDecode(const MlaDecodeArgs& args, Workspace workspace) override {
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    return cuda::LaunchMlaDecode(args, workspace, stream_.get());
  }
  Status BlockCopy(const BlockCopyArgs& args) override {
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    return cuda::LaunchBlockCopy(args, stream_.get());
  }
  // Waits for everything enqueued so far; an error raised by a kernel surfaces here.
  Status Synchronize() override {
    KVMESH_RETURN_IF_ERROR(MakeCurrent());
    const cudaError_t err = cudaStreamSynchronize(stream_.get());
    return err == cudaSuccess ? Status::Ok()
                              : CudaStatus(StrCat("cuda backend device ", device_), err);
  }

 private:
  Status MakeCurrent() const {
    const cudaError_t err = cudaSetDevice(device_);
    return err == cudaSuccess ? Status::Ok() : CudaStatus(StrCat("cudaSetDevice ", device_), err);
  }

  int device_;
  CudaStream stream_;
};

}  // namespace

Result<std::unique_ptr<KernelBackend>> MakeCudaBackend(int device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return CudaStatus(StrCat("cuda backend device ", device), err);
  if (device < 0 || device >= count) {
    return Status::CudaError(
        StrCat("cuda backend: no device ", device, " (", count, " CUDA devices)"));
  }
  err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaStatus(StrCat("cudaSetDevice ", device), err);
  cudaStream_t s = nullptr;
  err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) return CudaStatus(StrCat("cudaStreamCreate on device ", device), err);
  return std::unique_ptr<KernelBackend>(
      std::make_unique<CudaBackend>(device, CudaStream(device, s)));
}

}  // namespace kvmesh
