#include "node/device_memory.h"

#include <utility>

#include "common/log.h"
#include "common/strings.h"
#include "common/units.h"
#include "node/attached_pools.h"

#if defined(KVMESH_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_status.h"
#endif

namespace kvmesh {

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : device_(std::exchange(other.device_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      ipc_handle_(std::move(other.ipc_handle_)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    ipc_handle_ = std::move(other.ipc_handle_);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() { Reset(); }

#if defined(KVMESH_HAVE_CUDA)

using cuda::ScopedDevice;

Result<CudaDeviceInfo> QueryCudaDevice(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  if (device < 0 || device >= count) {
    return Status::NotFound(
        StrCat("CUDA device ", device, " does not exist (this process sees ", count, ")"));
  }
  cudaDeviceProp prop{};
  if (const cudaError_t err = cudaGetDeviceProperties(&prop, device); err != cudaSuccess) {
    return cuda::CudaCallStatus(err, StrCat("cudaGetDeviceProperties(", device, ")"));
  }
  CudaDeviceInfo info;
  info.ordinal = device;
  info.name = prop.name;
  info.uuid.assign(reinterpret_cast<const char*>(prop.uuid.bytes), sizeof(prop.uuid.bytes));
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess) {
    info.pci_bus_id = bus;
  } else {
    (void)cudaGetLastError();
  }
  return info;
}

Result<DeviceMemory> DeviceMemory::Allocate(int device, std::size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("device memory of 0 bytes");
  const ScopedDevice scope(device);
  if (scope.status() != cudaSuccess) {
    return cuda::CudaCallStatus(scope.status(), StrCat("cudaSetDevice(", device, ")"));
  }
  DeviceMemory m;
  m.device_ = device;
  if (const cudaError_t err = cudaMalloc(&m.data_, bytes); err != cudaSuccess) {
    m.data_ = nullptr;
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      return Status::ResourceExhausted(
          StrCat("cudaMalloc of ", FormatBytes(static_cast<std::int64_t>(bytes)),
                 " on CUDA device ", device, " failed: out of device memory"));
    }
    return cuda::CudaCallStatus(err,
                                StrCat("cudaMalloc of ", bytes, " bytes on CUDA device ", device));
  }
  m.size_ = bytes;
  // Blocks start zeroed, as the host pools' memfds do (an engine never reads a block it did not
  // write or was not given, but a zeroed pool keeps kvctl inspect and the tests deterministic).
  if (const cudaError_t err = cudaMemset(m.data_, 0, bytes); err != cudaSuccess) {
    return cuda::CudaCallStatus(err, StrCat("cudaMemset on CUDA device ", device));
  }
  if (const cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
    return cuda::CudaCallStatus(err, StrCat("cudaDeviceSynchronize on CUDA device ", device));
  }
  cudaIpcMemHandle_t handle{};
  if (const cudaError_t err = cudaIpcGetMemHandle(&handle, m.data_); err != cudaSuccess) {
    return cuda::CudaCallStatus(err, StrCat("cudaIpcGetMemHandle on CUDA device ", device));
  }
  m.ipc_handle_.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return m;
}

void DeviceMemory::Reset() {
  if (data_ == nullptr) return;
  const ScopedDevice scope(device_);
  const cudaError_t err = scope.status() == cudaSuccess ? cudaFree(data_) : scope.status();
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    KVMESH_LOG_WARN("device memory not freed device {} bytes {} error {}", device_, size_,
                    cudaGetErrorString(err));
  }
  data_ = nullptr;
  size_ = 0;
  device_ = -1;
  ipc_handle_.clear();
}

#else  // !KVMESH_HAVE_CUDA

Result<CudaDeviceInfo> QueryCudaDevice(int device) {
  return Status::NotSupported(
      StrCat("CUDA device ", device, ": this build of kvmesh has no CUDA (nvcc was not found)"));
}

Result<DeviceMemory> DeviceMemory::Allocate(int device, std::size_t /*bytes*/) {
  return Status::NotSupported(
      StrCat("CUDA device ", device, ": this build of kvmesh has no CUDA (nvcc was not found)"));
}

void DeviceMemory::Reset() {}

#endif

}  // namespace kvmesh
