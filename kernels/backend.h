// KernelBackend: where the node's kernels run, chosen once at setup.
//
//   CPU backend  — multi-threaded (a ThreadPool), on host memory; a real execution target used by
//                  the node on machines without a GPU, and the oracle the CUDA kernels are tested
//                  against.
//   CUDA backend — kernels enqueued on one CUDA stream, on device memory (built when nvcc is
//   found).
//
// Memory: a backend also allocates the memory its kernels address (Allocate → BackendBuffer) and
// copies host bytes to and from it (Upload, Download), so that engine code is the same on both:
//
//   if (!backend.host_addressable()) { upload the arguments into backend buffers }
//   launch; Download the output; Synchronize(); read the output on the host.
//
// On the CPU backend host pointers are passed to the kernels as they are: host_addressable() is
// true and nothing needs uploading (Upload and Download are plain memcpys all the same).
//
// Completion: CPU calls return when their output is written. CUDA calls return once enqueued on the
// backend's stream; Synchronize() waits for everything enqueued so far. Errors detected before a
// launch (CanImplement...) are returned and nothing runs; launch errors are kCudaError.
//   Upload   returns once the copy has completed: the source may be reused (or freed) at once and
//            the destination holds the bytes. On CUDA it waits for the backend's stream, so for
//            the work enqueued before it too — simple and safe, not an overlapped copy.
//   Download is ordered after the kernels enqueued before it (same stream); the destination is
//            filled once Synchronize() returns (the CPU backend fills it before returning). The
//            destination must stay valid until then.
//
// Thread safety: a backend is externally synchronised (one caller at a time, like a CUDA stream).
// A BackendBuffer is externally synchronised, like any owned buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>

#include "common/result.h"
#include "kernels/append_kv.h"
#include "kernels/block_copy.h"
#include "kernels/decode_attention.h"
#include "kernels/mla_decode.h"

namespace kvmesh {

class ThreadPool;

enum class BackendKind : std::uint8_t { kCpu = 0, kCuda = 1 };
std::string_view BackendKindName(BackendKind kind);  // "cpu", "cuda"

// Memory a backend allocated for its kernels (KernelBackend::Allocate): host memory for the CPU
// backend, device memory of the backend's device for CUDA. Move-only RAII: the destructor frees it
// with the matching call (host free; cudaFree with the device made current, the caller's current
// device restored) and never throws. An empty buffer (default, moved from, or 0 bytes) has
// data() == nullptr.
class BackendBuffer {
 public:
  // How a backend frees what it allocated; must not throw. `device` is the backend's (-1: host).
  using Release = void (*)(void* data, int device) noexcept;

  BackendBuffer() = default;
  // For backends: takes ownership of `data` (`size` bytes), freed by `release(data, device)`.
  BackendBuffer(void* data, std::size_t size, Release release, int device)
      : data_(data), size_(size), release_(release), device_(device) {}
  BackendBuffer(BackendBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        release_(std::exchange(other.release_, nullptr)),
        device_(other.device_) {}
  BackendBuffer& operator=(BackendBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      release_ = std::exchange(other.release_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { Reset(); }

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] bool empty() const { return data_ == nullptr; }

 private:
  void Reset() noexcept {
    if (data_ != nullptr && release_ != nullptr) release_(data_, device_);
    data_ = nullptr;
    size_ = 0;
    release_ = nullptr;
  }

  void* data_ = nullptr;
  std::size_t size_ = 0;
  Release release_ = nullptr;
  int device_ = -1;
};

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  [[nodiscard]] virtual BackendKind kind() const = 0;
  // True when the kernels may be given host pointers as they are (CPU); false when their
  // arguments must be in backend memory (CUDA: Allocate + Upload).
  [[nodiscard]] virtual bool host_addressable() const = 0;

  // `bytes` of memory the backend's kernels address: 64-byte aligned host memory (CPU), device
  // memory of the backend's device (CUDA, cudaMalloc: 256-byte aligned). 0 bytes gives an empty
  // buffer. kResourceExhausted when the memory cannot be had; kCudaError for other CUDA failures.
  [[nodiscard]] virtual Result<BackendBuffer> Allocate(std::size_t bytes) = 0;
  // Copies `bytes` host bytes from `src` to `dst` (memory the kernels address: a BackendBuffer, a
  // pool), ordered after the work enqueued before it; returns once the copy has completed (see
  // Completion above). kInvalidArgument for a null pointer with bytes > 0; kCudaError.
  [[nodiscard]] virtual Status Upload(void* dst, const void* src, std::size_t bytes) = 0;
  // Copies `bytes` from `src` (memory the kernels address) to host memory `dst`, ordered after the
  // work enqueued before it; `dst` is filled once Synchronize() returns (see Completion above).
  // kInvalidArgument for a null pointer with bytes > 0; kCudaError.
  [[nodiscard]] virtual Status Download(void* dst, const void* src, std::size_t bytes) = 0;

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
