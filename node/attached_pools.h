// AttachedPools: an engine's view of a node's pools — the memory objects of an AttachResponse
// mapped into this process, one KvPoolView per pool over them.
//
// What is mapped, per MemoryObject kind:
//   KIND_MEMFD     host memory: a memfd whose descriptor came with the response (SCM_RIGHTS),
//   mapped
//                  MAP_SHARED (node/shared_memory.h). The pool's device is -1.
//   KIND_CUDA_IPC  device memory the node allocated (cudaMalloc) and exported: the 64-byte
//                  cudaIpcMemHandle_t is opened with cudaIpcOpenMemHandle
//                  (cudaIpcMemLazyEnablePeerAccess) on the local device that is the node's device:
//                  the one whose UUID is `device_uuid` when the node sent it (16 bytes,
//                  cudaDeviceProp::uuid; this process may number devices differently, e.g. under
//                  another CUDA_VISIBLE_DEVICES), else ordinal `device`. The pool's device is that
//                  local ordinal; its views hold device pointers (give them to a CUDA backend of
//                  that device, kernels/backend.h). Only in a build with CUDA (KVMESH_HAVE_CUDA),
//                  and only in another process than the node's: CUDA refuses to open a handle in
//                  the process that exported it.
// Components lie at `offset` inside their memory object, for both kinds.
//
// Everything the node sent is checked before it is used as an address, and before any CUDA call:
// each memory object's kind and size (a CUDA handle of 64 bytes, a device UUID of 0 or 16 bytes);
// each component's layout must describe exactly bytes_per_block bytes, bytes_per_block *
// num_blocks must equal its `bytes`, and [offset, offset + bytes) must lie inside its memory object
// (the object's size as described: an IPC allocation's real size cannot be read back through the
// runtime API, so a CUDA object's `bytes` is the node's word); a pool must have a data component,
// all of its components in memory of one place (host, or one device), and its `device` must be
// that place's (-1, or the memory object's `device`). A description that fails is kCorruption
// naming the pool or memory object and the field. Errors of the mapping itself:
//   kNotSupported       a CUDA IPC object in a build without CUDA ("this build has no CUDA");
//   kCudaError          no such device (no device at all, or an ordinal past the last), or a CUDA
//                       call failed (the message names the device and the call);
//   kFailedPrecondition no local device has the object's device_uuid (the message names it);
//   kIoError, kInvalidArgument  a memfd that cannot be mapped or is smaller than described.
// Nothing is left mapped after an error.
//
// Lifetime: move-only; the views are valid while the object lives. Destruction unmaps the memfds
// and closes the IPC mappings (cudaIpcCloseMemHandle, with the mapping's device made current).
// The memory itself is the node's in both cases: the node allocated it and frees it; the engine
// only maps it. An engine that crashes leaves nothing behind but the blocks it was writing — its
// mappings go with its process (the kernel unmaps the memfds, the driver closes the IPC
// mappings), and the node releases the sequences of its closed connection
// (node/engine_service.h).
//
// Thread safety: immutable after Map; the memory is shared (engine_service.h says who writes
// which block when). Map changes no thread's current CUDA device (it restores the caller's).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/paged_kv_layout.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "node/shared_memory.h"

namespace kvmesh {

// "GPU-" and a CUDA device UUID (16 raw bytes) in the form nvidia-smi prints (8-4-4-4-12 hex).
std::string CudaUuidString(const std::string& uuid);

class AttachedPools {
 public:
  static constexpr std::size_t kCudaIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)
  static constexpr std::size_t kDeviceUuidBytes = 16;     // sizeof(cudaUUID_t)

  // Maps the memory objects of `attach`. `fds` are the descriptors of its KIND_MEMFD objects, in
  // the order of attach.memory (CUDA IPC objects have none); ownership is taken of all of them,
  // also on error.
  static Result<AttachedPools> Map(const rpc::AttachResponse& attach, std::vector<int> fds);

  AttachedPools() = default;
  AttachedPools(AttachedPools&&) noexcept = default;
  AttachedPools& operator=(AttachedPools&&) noexcept = default;

  [[nodiscard]] const rpc::AttachResponse& description() const { return attach_; }
  [[nodiscard]] const std::vector<KvPoolView>& views() const { return views_; }
  [[nodiscard]] const KvPoolView& view(int pool) const { return views_[pool]; }
  [[nodiscard]] int num_pools() const { return static_cast<int>(views_.size()); }
  // The local CUDA device ordinal the pool's memory is on, -1 for host memory. (Local: found by
  // UUID when the node sent one, so it may differ from the description's `device`.)
  [[nodiscard]] int device(int pool) const { return devices_[pool]; }

 private:
  class DeviceMapping;  // one cudaIpcOpenMemHandle mapping (attached_pools.cc)
  struct DeviceMappingDeleter {
    void operator()(DeviceMapping* mapping) const noexcept;
  };

  rpc::AttachResponse attach_;
  std::vector<SharedMemory> memory_;
  std::vector<std::unique_ptr<DeviceMapping, DeviceMappingDeleter>> device_memory_;
  std::vector<KvPoolView> views_;
  std::vector<int> devices_;  // per pool: local device ordinal, -1 for host
};

}  // namespace kvmesh
