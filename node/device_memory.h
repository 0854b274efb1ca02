// DeviceMemory: one allocation of CUDA device memory that another process can map — the node's GPU
// pools. The node allocates one per rank pool (cudaMalloc on the pool's device, zeroed) and exports
// it to an attaching engine as a CUDA IPC handle (cudaIpcGetMemHandle); the engine opens the handle
// (node/attached_pools.h) and reads and writes the pool in place, so no KV byte is copied through a
// socket, exactly as with the host pools' memfds (node/shared_memory.h).
//
// What an IPC handle gives: the importing process maps the same device pages; it cannot free or
// resize them. The memory belongs to the node: it stays allocated while the node runs, whatever
// an engine does, and is freed when the node's DeviceMemory dies (an engine still mapping it then
// keeps the pages alive until it closes its mapping or exits, by the CUDA IPC rules; its view of
// the pool is then no longer the node's). A crashed engine's mappings go with its process.
//
// Device identity: ordinals depend on CUDA_VISIBLE_DEVICES and may differ between two processes;
// the device's UUID does not. The node sends both (MemoryObject.device, .device_uuid) and an
// engine finds the device by its UUID.
//
// Without CUDA in the build every call returns kNotSupported.
//
// Move-only RAII: the destructor frees with the device made current (and the caller's current
// device restored); errors there are logged, never thrown. Thread safety: externally synchronised;
// the memory itself is shared, with the block manager's contracts saying who writes which block
// when (node/engine_service.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/result.h"

namespace kvmesh {

// What the node says about one CUDA device.
struct CudaDeviceInfo {
  int ordinal = -1;
  std::string name;  // "NVIDIA H200"
  std::string uuid;  // 16 raw bytes (cudaDeviceProp::uuid)
  std::string pci_bus_id;
};

// kNotFound for an ordinal this process does not see; kCudaError when the query fails.
Result<CudaDeviceInfo> QueryCudaDevice(int device);

class DeviceMemory {
 public:
  // `bytes` (> 0) of device memory on `device`, zeroed. kResourceExhausted when the device cannot
  // give them (the message gives the bytes and the device), kCudaError for other failures.
  static Result<DeviceMemory> Allocate(int device, std::size_t bytes);

  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] int device() const { return device_; }
  // The cudaIpcMemHandle_t of the allocation (64 bytes), made at Allocate.
  [[nodiscard]] const std::string& ipc_handle() const { return ipc_handle_; }

 private:
  void Reset();

  int device_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::string ipc_handle_;
};

}  // namespace kvmesh
