// CUDA launchers of the conversion kernels (kernels/cuda/conversions_kernels.cu). Pure C++: no CUDA
// header; the stream is a cudaStream_t passed as void* (nullptr: the legacy default stream).
// Defined only when the build has CUDA (KVMESH_HAVE_CUDA); the CPU twins are in
// kernels/convert_arrays.h and produce the same bytes.
//
// Arguments are those of kernels/convert_arrays.h; every pointer in them is device memory (or
// managed memory), owned by the caller and valid until the stream has run the kernel. Nothing is
// allocated.
//
// Completion: each launcher validates the arguments with CanImplement* (kInvalidArgument), enqueues
// one kernel on `stream` and returns; the outputs are complete when the stream reaches that point.
// A launch failure is kCudaError with the CUDA error text. Errors inside the kernel surface at the
// next synchronisation of the stream.
//
// Thread safety: reentrant; concurrent launches must not write the same output memory.
#pragma once

#include "common/status.h"
#include "kernels/convert_arrays.h"

namespace kvmesh::cuda {

// One thread per element (grid-stride).
Status LaunchConvertElements(const ConvertElementsArgs& args, void* stream);

// One thread per head vector. A test and utility kernel: the append kernel quantises in place in
// the pool with its own thread mapping and calls the same kernels/quantize.h functions.
Status LaunchQuantizeHeads(const QuantizeHeadsArgs& args, void* stream);
Status LaunchDequantizeHeads(const DequantizeHeadsArgs& args, void* stream);

}  // namespace kvmesh::cuda
