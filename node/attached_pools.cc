#include "node/attached_pools.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "common/strings.h"

#if KVMESH_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#endif

namespace kvmesh {

std::string CudaUuidString(const std::string& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    const auto b = static_cast<unsigned char>(uuid[i]);
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

namespace {

// The received descriptors: each one is taken by a mapping or closed here, on every path.
class ReceivedFds {
 public:
  explicit ReceivedFds(std::vector<int> fds) : fds_(std::move(fds)) {}
  ~ReceivedFds() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  ReceivedFds(const ReceivedFds&) = delete;
  ReceivedFds& operator=(const ReceivedFds&) = delete;

  [[nodiscard]] std::size_t size() const { return fds_.size(); }
  // Hands descriptor `i` over (to SharedMemory::Map, which closes it on error).
  int Take(std::size_t i) { return std::exchange(fds_[i], -1); }

 private:
  std::vector<int> fds_;
};

// Where a memory object's bytes live, as described: host (-1) or the node's device ordinal.
struct DescribedObject {
  std::uint64_t bytes = 0;
  bool cuda = false;
  int node_device = -1;
};

std::string DeviceName(const rpc::MemoryObject& mo) {
  return mo.device_uuid().empty()
             ? StrCat("CUDA device ", mo.device())
             : StrCat("CUDA device ", mo.device(), " (", CudaUuidString(mo.device_uuid()), ")");
}

Result<DescribedObject> DescribeObject(const rpc::MemoryObject& mo, std::size_t index) {
  const std::string where = StrCat("memory object ", index);
  DescribedObject d;
  d.bytes = mo.bytes();
  if (mo.bytes() == 0) return Status::Corruption(StrCat(where, ": bytes is 0"));
  switch (mo.kind()) {
    case rpc::MemoryObject::KIND_MEMFD: return d;
    case rpc::MemoryObject::KIND_CUDA_IPC:
      if (mo.cuda_ipc_handle().size() != AttachedPools::kCudaIpcHandleBytes) {
        return Status::Corruption(StrCat(where, ": cuda_ipc_handle has ",
                                         mo.cuda_ipc_handle().size(), " bytes, not ",
                                         AttachedPools::kCudaIpcHandleBytes));
      }
      if (!mo.device_uuid().empty() && mo.device_uuid().size() != AttachedPools::kDeviceUuidBytes) {
        return Status::Corruption(StrCat(where, ": device_uuid has ", mo.device_uuid().size(),
                                         " bytes, not ", AttachedPools::kDeviceUuidBytes));
      }
      if (mo.device() < 0) {
        return Status::Corruption(StrCat(where, ": CUDA IPC memory on device ", mo.device()));
      }
      d.cuda = true;
      d.node_device = mo.device();
      return d;
    default:
      return Status::Corruption(
          StrCat(where, ": kind ", static_cast<int>(mo.kind()), " is not memfd or CUDA IPC"));
  }
}

Status CheckComponent(const rpc::PoolDescriptor& d, const rpc::PoolComponentMemory& m,
                      const PagedTensorLayout& l, const std::vector<DescribedObject>& objects) {
  const std::string where = StrCat("pool ", d.pool(), " component ", m.component());
  if (m.memory_index() >= objects.size()) {
    return Status::Corruption(StrCat(where, ": memory_index ", m.memory_index(), " of ",
                                     objects.size(), " memory objects"));
  }
  if (l.BytesPerBlock() <= 0 ||
      static_cast<std::uint64_t>(l.BytesPerBlock()) != m.bytes_per_block()) {
    return Status::Corruption(StrCat(where, ": layout gives ", l.BytesPerBlock(),
                                     " bytes per block, bytes_per_block says ",
                                     m.bytes_per_block()));
  }
  if (d.num_blocks() <= 0 ||
      m.bytes_per_block() * static_cast<std::uint64_t>(d.num_blocks()) != m.bytes()) {
    return Status::Corruption(StrCat(where, ": bytes ", m.bytes(), " is not ", d.num_blocks(),
                                     " blocks of ", m.bytes_per_block()));
  }
  const std::uint64_t size = objects[m.memory_index()].bytes;
  if (m.offset() > size || m.bytes() > size - m.offset()) {
    return Status::Corruption(StrCat(where, ": [", m.offset(), ", +", m.bytes(),
                                     ") lies outside its memory object of ", size, " bytes"));
  }
  // One place per pool, and the pool says which.
  const int device = objects[m.memory_index()].cuda ? objects[m.memory_index()].node_device : -1;
  if (d.device() != device) {
    return Status::Corruption(StrCat(
        where, ": the pool's device is ", d.device(), " but its memory object ", m.memory_index(),
        " is ", device < 0 ? std::string("host memory") : StrCat("on CUDA device ", device)));
  }
  return Status::Ok();
}

}  // namespace

#if KVMESH_HAVE_CUDA

namespace {

// The local ordinal of the node's device: by UUID when the node sent one, else its ordinal.
Result<int> LocalDevice(const rpc::MemoryObject& mo, std::size_t index) {
  const std::string where = StrCat("memory object ", index, " on ", DeviceName(mo));
  int count = 0;
  KVMESH_RETURN_IF_ERROR(
      cuda::CudaCallStatus(cudaGetDeviceCount(&count), StrCat(where, ": cudaGetDeviceCount")));
  if (!mo.device_uuid().empty()) {
    for (int i = 0; i < count; ++i) {
      cudaDeviceProp prop{};
      KVMESH_RETURN_IF_ERROR(cuda::CudaCallStatus(cudaGetDeviceProperties(&prop, i),
                                                  StrCat(where, ": cudaGetDeviceProperties ", i)));
      static_assert(sizeof(prop.uuid.bytes) == AttachedPools::kDeviceUuidBytes);
      if (std::memcmp(prop.uuid.bytes, mo.device_uuid().data(), sizeof(prop.uuid.bytes)) == 0) {
        return i;
      }
    }
    return Status::FailedPrecondition(
        StrCat("memory object ", index, ": no CUDA device here has uuid ",
               CudaUuidString(mo.device_uuid()), " (the node's device ", mo.device(), "; ", count,
               " devices visible here)"));
  }
  if (mo.device() >= count) {
    return Status::CudaError(
        StrCat(where, ": no such device here (", count, " CUDA devices visible)"));
  }
  return mo.device();
}

}  // namespace

class AttachedPools::DeviceMapping {
 public:
  DeviceMapping(int device, void* data) : device_(device), data_(data) {}
  // Errors cannot be reported from a destructor; a mapping that fails to close goes with the
  // process (the node's memory is unaffected either way).
  ~DeviceMapping() {
    const cuda::ScopedDevice current(device_);
    if (current.ok()) (void)cudaIpcCloseMemHandle(data_);
    (void)cudaGetLastError();  // not a later launch's error
  }
  DeviceMapping(const DeviceMapping&) = delete;
  DeviceMapping& operator=(const DeviceMapping&) = delete;

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] int device() const { return device_; }

  static Result<std::unique_ptr<DeviceMapping, DeviceMappingDeleter>> Open(
      const rpc::MemoryObject& mo, std::size_t index) {
    static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);
    KVMESH_ASSIGN_OR_RETURN(const int device, LocalDevice(mo, index));
    const cuda::ScopedDevice current(device);
    KVMESH_RETURN_IF_ERROR(
        cuda::CudaCallStatus(current.status(), StrCat("cudaSetDevice ", device))
            .WithContext(StrCat("memory object ", index, " on ", DeviceName(mo))));
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, mo.cuda_ipc_handle().data(), sizeof(handle));
    void* data = nullptr;
    KVMESH_RETURN_IF_ERROR(cuda::CudaCallStatus(
        cudaIpcOpenMemHandle(&data, handle, cudaIpcMemLazyEnablePeerAccess),
        StrCat("cudaIpcOpenMemHandle of memory object ", index, " (", mo.bytes(), " bytes on ",
               DeviceName(mo), ", local device ", device, ")")));
    return std::unique_ptr<DeviceMapping, DeviceMappingDeleter>(new DeviceMapping(device, data));
  }

 private:
  int device_;
  void* data_;
};

#else  // !KVMESH_HAVE_CUDA

class AttachedPools::DeviceMapping {
 public:
  [[nodiscard]] void* data() const { return nullptr; }
  [[nodiscard]] int device() const { return -1; }

  static Result<std::unique_ptr<DeviceMapping, DeviceMappingDeleter>> Open(
      const rpc::MemoryObject& mo, std::size_t index) {
    return Status::NotSupported(StrCat("memory object ", index, " is CUDA IPC memory on ",
                                       DeviceName(mo), ": this build has no CUDA"));
  }
};

#endif  // KVMESH_HAVE_CUDA

void AttachedPools::DeviceMappingDeleter::operator()(DeviceMapping* mapping) const noexcept {
  delete mapping;
}

Result<AttachedPools> AttachedPools::Map(const rpc::AttachResponse& attach, std::vector<int> fds) {
  ReceivedFds received(std::move(fds));
  // 1. The memory objects as described (no CUDA call, nothing mapped yet).
  std::vector<DescribedObject> objects;
  std::size_t memfds = 0;
  for (int i = 0; i < attach.memory_size(); ++i) {
    KVMESH_ASSIGN_OR_RETURN(DescribedObject o,
                            DescribeObject(attach.memory(i), static_cast<std::size_t>(i)));
    if (!o.cuda) ++memfds;
    objects.push_back(o);
  }
  if (memfds > received.size()) {
    return Status::Corruption(StrCat("the node described ", memfds,
                                     " memfd memory objects and sent ", received.size(),
                                     " descriptors"));
  }
  // 2. Every pool against those descriptions.
  AttachedPools out;
  out.attach_ = attach;
  for (const rpc::PoolDescriptor& d : attach.pools()) {
    KvPoolView view;
    view.layout.dtype = static_cast<KvDtype>(d.dtype());
    view.num_blocks = d.num_blocks();
    view.pool_scale = d.pool_scale();
    for (const rpc::PoolComponentMemory& m : d.components()) {
      if (m.component() >= static_cast<std::uint32_t>(kNumKvComponents)) {
        return Status::Corruption(StrCat("pool ", d.pool(), ": component ", m.component()));
      }
      PagedTensorLayout& l = view.layout.components[m.component()];
      l.order = static_cast<KvLayout>(m.order());
      l.num_layers = m.num_layers();
      l.kv_factor = m.kv_factor();
      l.num_heads = m.num_heads();
      l.tokens_per_block = m.tokens_per_block();
      l.inner = m.inner();
      l.bits = m.bits();
      KVMESH_RETURN_IF_ERROR(CheckComponent(d, m, l, objects));
    }
    if (!view.layout.data().present()) {
      return Status::Corruption(StrCat("pool ", d.pool(), " has no data component"));
    }
    out.views_.push_back(view);
  }
  // 3. Map them, in order (on error, what was mapped is released with `out`).
  std::vector<void*> bases;
  std::vector<int> local_devices;
  std::size_t next_fd = 0;
  for (int i = 0; i < attach.memory_size(); ++i) {
    const rpc::MemoryObject& mo = attach.memory(i);
    if (!objects[static_cast<std::size_t>(i)].cuda) {
      KVMESH_ASSIGN_OR_RETURN(SharedMemory m,
                              SharedMemory::Map(received.Take(next_fd++), mo.bytes()));
      bases.push_back(m.data());
      local_devices.push_back(-1);
      out.memory_.push_back(std::move(m));
    } else {
      KVMESH_ASSIGN_OR_RETURN(auto m, DeviceMapping::Open(mo, static_cast<std::size_t>(i)));
      bases.push_back(m->data());
      local_devices.push_back(m->device());
      out.device_memory_.push_back(std::move(m));
    }
  }
  // 4. The views' addresses.
  for (int p = 0; p < attach.pools_size(); ++p) {
    const rpc::PoolDescriptor& d = attach.pools(p);
    KvPoolView& view = out.views_[static_cast<std::size_t>(p)];
    int device = -1;
    for (const rpc::PoolComponentMemory& m : d.components()) {
      view.base[m.component()] = static_cast<std::uint8_t*>(bases[m.memory_index()]) + m.offset();
      device = local_devices[m.memory_index()];
    }
    out.devices_.push_back(device);
  }
  return out;
}

}  // namespace kvmesh
