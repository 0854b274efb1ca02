// KVMESH_HOST_DEVICE marks functions compiled for both the host and the device (when nvcc compiles
// the translation unit). Headers that use it stay free of CUDA headers, so plain C++ code can
// include them.
#pragma once

#if defined(__CUDACC__)
#define KVMESH_HOST_DEVICE __host__ __device__
#define KVMESH_FORCEINLINE __forceinline__
#else
#define KVMESH_HOST_DEVICE
#define KVMESH_FORCEINLINE inline __attribute__((always_inline))
#endif
