// CUDA launchers of the append kernels (kernels/cuda/append_kv.cu). Pure C++: no CUDA header; the
// stream is a cudaStream_t passed as void* (nullptr: the legacy default stream). Defined only when
// the build has CUDA (KVMESH_HAVE_CUDA); the CPU twins are cpu::AppendKv / cpu::AppendIndexK in
// kernels/append_kv.h, which states the semantics and shapes. The bytes written are identical.
//
// Every pointer in the arguments (pool components, k, v, index_k, cu_tokens, start_pos,
// block_table) is device memory (or managed memory), owned by the caller and valid until the stream
// has run the kernel. Nothing is allocated.
//
// Completion: validates with CanImplementAppendKv / CanImplementAppendIndexK (kInvalidArgument /
// kNotSupported, nothing enqueued), enqueues one kernel on `stream` and returns; the pool is
// written when the stream reaches that point. A launch failure is kCudaError with the CUDA error
// text (kernels/cuda/cuda_status.h: an error is reported by the call that saw it, never again by a
// later launch). The index arrays live in device memory and are not read on the host: a row whose
// block id or position is out of range is skipped by the kernel (see "Validation" in
// kernels/append_kv.h).
//
// Rows: the kernel counts the rows (tokens × kv_factor × num_kv_heads, or × quant blocks for the
// indexer) from cu_tokens on the device, in 64 bits; total_tokens only sizes the grid, so a wrong
// or zero hint launches too few or too many CTAs (looping or idle), never skips or clamps rows. An
// empty batch with total_tokens 0 still costs one short launch.
//
// Mapping: a group of 1..32 lanes per (token, kv, head) row, 16 elements per lane, 16-byte loads
// and stores when the inputs, strides and pool allow it; the per-row amax (fp8, int8) is a shuffle
// reduction of the FP32 bit patterns (max is exact, so the order does not change the bytes).
//
// Thread safety: reentrant; concurrent launches must not write the same (block, slot).
#pragma once

#include "common/status.h"
#include "kernels/append_kv.h"

namespace kvmesh::cuda {

Status LaunchAppendKv(const AppendKvArgs& args, void* stream);
Status LaunchAppendIndexK(const AppendIndexKArgs& args, void* stream);

}  // namespace kvmesh::cuda
