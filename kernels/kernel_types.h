// Types shared by the kernel argument structs: activation dtypes (what the engine hands in and gets
// back, as opposed to the cache dtype of a pool) and caller-owned workspace.
//
// Memory spaces: every pointer in a kernel's argument struct lives in the memory of the backend
// that runs it — host memory for the CPU backend, device memory for the CUDA backend — unless the
// field's comment says otherwise.
//
// Thread-safe (values).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/host_device.h"

namespace kvmesh {

// Dtype of activations: queries, new K/V handed to append, attention outputs.
enum class ActDtype : std::uint8_t { kFP32 = 0, kBF16 = 1, kFP16 = 2 };

KVMESH_HOST_DEVICE constexpr int ActDtypeBytes(ActDtype d) { return d == ActDtype::kFP32 ? 4 : 2; }
std::string_view ActDtypeName(ActDtype d);  // "fp32", "bf16", "fp16"

// Scratch memory a kernel may use, owned by the caller (kernels never allocate). Size it with the
// kernel's ...WorkspaceBytes(args).
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

}  // namespace kvmesh
