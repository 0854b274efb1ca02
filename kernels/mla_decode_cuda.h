// CUDA launcher of MLA decode (kernels/cuda/mla_decode.cu). Pure C++: no CUDA header; the stream is
// a cudaStream_t passed as void* (nullptr: the legacy default stream). Defined only when the build
// has CUDA (KVMESH_HAVE_CUDA); the CPU twin is cpu::MlaDecode in kernels/mla_decode.h, which states
// the semantics, shapes and supported set.
//
// Every pointer in the arguments and the workspace is device memory (or managed memory), owned by
// the caller and valid until the stream has run the kernels. Nothing is allocated.
//
// Completion: validates with CanImplementMlaDecode(args, workspace) (nothing enqueued on error),
// enqueues the split kernel and, when num_splits > 1, the combine kernel on `stream`, and returns.
// A launch failure is kCudaError.
//
// Thread safety: reentrant; concurrent launches must not share a workspace or an output.
#pragma once

#include "common/status.h"
#include "kernels/kernel_types.h"
#include "kernels/mla_decode.h"

namespace kvmesh::cuda {

Status LaunchMlaDecode(const MlaDecodeArgs& args, Workspace workspace, void* stream);

}  // namespace kvmesh::cuda
