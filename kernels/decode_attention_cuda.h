// CUDA launcher of paged decode attention (kernels/cuda/decode_attention.cu). Pure C++: no CUDA
// header; the stream is a cudaStream_t passed as void* (nullptr: the legacy default stream).
// Defined only when the build has CUDA (KVMESH_HAVE_CUDA); the CPU twin is cpu::DecodeAttention in
// kernels/decode_attention.h, which states the semantics, shapes and supported set.
//
// Every pointer in the arguments (pool components, q, out, lse, kv_lens, block_table) and the
// workspace is device memory (or managed memory), owned by the caller and valid until the stream
// has run the kernels. Nothing is allocated.
//
// Completion: validates with CanImplementDecodeAttention(args, workspace) (kInvalidArgument /
// kNotSupported, nothing enqueued), enqueues the split kernel and, when num_splits > 1, the
// combine kernel on `stream`, and returns; out and lse are complete when the stream reaches that
// point. A launch failure is kCudaError. Values that live in device memory (kv_lens, block ids)
// cannot be checked on the host: see the REQUIRES in kernels/decode_attention.h.
//
// Thread safety: reentrant; concurrent launches must not share a workspace or an output.
#pragma once

#include "common/status.h"
#include "kernels/decode_attention.h"
#include "kernels/kernel_types.h"

namespace kvmesh::cuda {

Status LaunchDecodeAttention(const DecodeAttentionArgs& args, Workspace workspace, void* stream);

}  // namespace kvmesh::cuda
