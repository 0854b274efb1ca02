// CUDA launcher of the block copy (kernels/cuda/block_copy.cu). Pure C++: no CUDA header; the
// stream is a cudaStream_t passed as void* (nullptr: the legacy default stream). Defined only when
// the build has CUDA (KVMESH_HAVE_CUDA). The CPU twin is cpu::BlockCopy in kernels/block_copy.h,
// which states the semantics; the bytes written are identical.
//
// Memory: the component bases of `src` and `dst` are device memory or pinned host memory
// (cudaHostAlloc / cudaHostRegister: with unified addressing a pinned host pointer is valid on the
// device), in any combination — so one kernel gathers scattered device blocks into a pinned
// staging buffer (offload), scatters them back (onboard), or copies between two device pools.
// `pairs` is HOST memory: the launcher validates the pairs with CanImplementBlockCopy and passes
// them to the kernel by value (at most kBlockCopyPairsPerLaunch per launch; longer lists become
// several launches on the same stream), so the array may be reused as soon as the call returns.
//
// Completion: validates (kInvalidArgument, nothing enqueued), enqueues the kernel(s) on `stream`
// and returns; the destination is written when the stream reaches that point. The source must not
// change and the destination must not be read until then. A launch failure is kCudaError.
//
// Mapping: one CTA per (pair, 64 KiB piece of a component); whole blocks in the same order are one
// contiguous run per component, copied with 16-byte vectors (narrower when an address or size is
// not 16-byte aligned); partial blocks copy contiguous token runs; HND <-> NHD copies row by row.
//
// Thread safety: reentrant; concurrent copies must not write the same destination blocks.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/block_copy.h"

namespace kvmesh::cuda {

inline constexpr std::int64_t kBlockCopyPairsPerLaunch = 128;

Status LaunchBlockCopy(const BlockCopyArgs& args, void* stream);

}  // namespace kvmesh::cuda
