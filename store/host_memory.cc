#include "store/host_memory.h"

#include <cstring>

#include "common/log.h"
#include "common/strings.h"

#if KVMESH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvmesh {
namespace {

#if KVMESH_HAVE_CUDA
bool CudaDevicePresent() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error for later callers
    return false;
  }
  return count > 0;
}
#endif

void Prefault(std::byte* p, std::size_t size) {
  constexpr std::size_t kPage = 4096;
  for (std::size_t off = 0; off < size; off += kPage) p[off] = std::byte{0};
}

}  // namespace

std::string_view HostMemoryKindName(HostMemoryKind kind) {
  switch (kind) {
    case HostMemoryKind::kAuto: return "auto";
    case HostMemoryKind::kPinned: return "pinned";
    case HostMemoryKind::kAligned: return "aligned";
  }
  return "unknown";
}

Result<HostMemory> HostMemory::Allocate(std::size_t size, HostMemoryKind kind, bool prefault) {
  HostMemory mem;
  mem.size_ = size;
  if (size == 0) return mem;
  if (kind != HostMemoryKind::kAligned) {
#if KVMESH_HAVE_CUDA
    if (CudaDevicePresent()) {
      void* p = nullptr;
      const cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
      if (err == cudaSuccess) {
        mem.pinned_ = static_cast<std::byte*>(p);
        return mem;
      }
      cudaGetLastError();
      if (kind == HostMemoryKind::kPinned) {
        return Status::CudaError(
            StrCat("cudaHostAlloc of ", size, " bytes failed: ", cudaGetErrorString(err)));
      }
      KVMESH_LOG_WARN(
          "host memory pinned allocation failed bytes {} error {}, using aligned memory", size,
          cudaGetErrorString(err));
    } else if (kind == HostMemoryKind::kPinned) {
      return Status::NotSupported("pinned host memory: no CUDA device present");
    }
#else
    if (kind == HostMemoryKind::kPinned) {
      return Status::NotSupported("pinned host memory: built without CUDA");
    }
#endif
  }
  KVMESH_ASSIGN_OR_RETURN(mem.aligned_, AlignedBuffer::Allocate(size));
  if (prefault) Prefault(mem.aligned_.data(), size);
  return mem;
}

void HostMemory::Reset() {
#if KVMESH_HAVE_CUDA
  if (pinned_ != nullptr) {
    const cudaError_t err = cudaFreeHost(pinned_);
    if (err != cudaSuccess) {
      KVMESH_LOG_ERROR("host memory cudaFreeHost failed error {}", cudaGetErrorString(err));
    }
  }
#endif
  pinned_ = nullptr;
  aligned_ = AlignedBuffer();
  size_ = 0;
}

}  // namespace kvmesh
