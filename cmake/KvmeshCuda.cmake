# CUDA detection. KVMESH_WITH_CUDA=AUTO enables the CUDA language when nvcc is found, ON requires
# it, OFF never looks. Sets KVMESH_HAVE_CUDA, and KVMESH_HAVE_NCCL when NCCL is found with it.
# Architectures default to 90 (H100/H200); override with -DCMAKE_CUDA_ARCHITECTURES=... on the
# configure line.
set(KVMESH_HAVE_CUDA OFF)
set(KVMESH_HAVE_NCCL OFF)
if(NOT KVMESH_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # CMake < 3.26 does not know nvcc's C++20 flag; nvcc >= 12 accepts -std=c++20.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(KVMESH_HAVE_CUDA ON)
    # NCCL (transfer/nccl_link.h): the toolkit's copy, or a system one (Debian's libnccl-dev).
    find_path(KVMESH_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(KVMESH_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(KVMESH_NCCL_INCLUDE_DIR AND KVMESH_NCCL_LIBRARY)
      set(KVMESH_HAVE_NCCL ON)
    endif()
  elseif(KVMESH_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVMESH_WITH_CUDA=ON but no CUDA compiler was found: put nvcc on PATH or set CUDACXX")
  endif()
endif()
