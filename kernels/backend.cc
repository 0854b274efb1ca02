// Backend names, and MakeCudaBackend for builds without CUDA (the CUDA build defines it in
// kernels/cuda/cuda_backend.cc).
#include "kernels/backend.h"

#include "common/strings.h"

namespace kvmesh {

std::string_view BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
  }
  return "unknown";
}

#if !defined(KVMESH_HAVE_CUDA)
Result<std::unique_ptr<KernelBackend>> MakeCudaBackend(int device) {
  return Status::NotSupported(
      StrCat("cuda backend on device ", device, ": kvmesh was built without CUDA"));
}
#endif

}  // namespace kvmesh
