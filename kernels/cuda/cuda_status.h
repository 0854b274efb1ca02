// CUDA runtime errors as Status values for the launchers of kernels/cuda (host code, nvcc or the
// host compiler with the CUDA runtime headers).
//
// CUDA reports an error twice: as the return value of the runtime call that failed, and as the
// calling thread's "last error", which cudaGetLastError reads and clears. A kernel launch reports
// only the second way, so a launcher reads the last error after its launch — and would report as
// its own any error an earlier, unrelated call left there (review finding: a failed
// cudaFuncSetAttribute in one launcher became the next launcher's launch error). Hence:
//   - CudaCallStatus turns a runtime call's return value into a Status AND clears the last error,
//     so a failure is reported once, by the call that saw it;
//   - a launcher calls ClearStaleCudaError right before its launch (an error left there came from a
//     runtime call whose caller already got it as a return value) and LaunchStatus right after.
// Sticky errors (a kernel fault) make every later call fail anyway; they are reported by each.
//
// Thread safety: the last error is per host thread; these functions are reentrant.
#pragma once

#include <cuda_runtime.h>

#include <string_view>

#include "common/status.h"
#include "common/strings.h"

namespace kvmesh::cuda {

// kCudaError "what: cudaErrorX: text", or OK; clears the thread's last error when err is an error.
[[nodiscard]] inline Status CudaCallStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // reported here, as this call's return value: not again by a launcher
  return Status::CudaError(
      StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Makes `device` current on the calling thread for the object's lifetime and restores the caller's
// current device when it goes (frees, destructors and calls on another device's objects must not
// leave another device current). status(): cudaSetDevice's result (its error cleared).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) : known_(cudaGetDevice(&previous_) == cudaSuccess) {
    status_ = cudaSetDevice(device);
    if (status_ != cudaSuccess) (void)cudaGetLastError();
  }
  ~ScopedDevice() {
    if (known_) (void)cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  [[nodiscard]] cudaError_t status() const { return status_; }
  [[nodiscard]] bool ok() const { return status_ == cudaSuccess; }

 private:
  int previous_ = -1;
  bool known_ = false;
  cudaError_t status_ = cudaSuccess;
};

// Clears an error that earlier runtime calls left as the thread's last error (see above).
inline void ClearStaleCudaError() { (void)cudaGetLastError(); }

// The error of the kernel launch just made (and clears it), or OK.
[[nodiscard]] inline Status LaunchStatus(std::string_view launcher) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(
      StrCat(launcher, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

}  // namespace kvmesh::cuda
