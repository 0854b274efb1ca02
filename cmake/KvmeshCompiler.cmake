# Compiler flags shared by every kvmesh target.
#
# -ffp-contract=off: quantisation must round exactly as the brief states on the CPU and on the GPU;
# a fused multiply-add changes the last bit, so contraction is off on the CPU side (the GPU side uses
# __fmul_rn/__fdiv_rn where it matters).
set(KVMESH_CXX_WARNINGS -Wall -Wextra -Wnon-virtual-dtor -Wimplicit-fallthrough -Wcast-qual
    -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND KVMESH_CXX_WARNINGS -Wthread-safety)
endif()
if(KVMESH_WERROR)
  list(APPEND KVMESH_CXX_WARNINGS -Werror)
endif()

add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:${KVMESH_CXX_WARNINGS}>"
  "$<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>")

if(KVMESH_HAVE_CUDA)
  # Host code inside .cu files follows the same rule; device code uses explicit _rn intrinsics.
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>"
    "$<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>")
  if(KVMESH_WERROR)
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>")
  endif()
endif()

if(KVMESH_SANITIZE)
  if(KVMESH_HAVE_CUDA)
    message(FATAL_ERROR "KVMESH_SANITIZE needs KVMESH_WITH_CUDA=OFF (nvcc does not build sanitized code)")
  endif()
  add_compile_options(-fsanitize=${KVMESH_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${KVMESH_SANITIZE})
endif()

# KVMESH_FUZZ (fuzz/, docs/fuzzing.md): every object gets libFuzzer's coverage instrumentation, so
# that the fuzzers see the branches of the code they drive; only the fuzz executables link the
# libFuzzer runtime (-fsanitize=fuzzer, in fuzz/CMakeLists.txt).
if(KVMESH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KVMESH_FUZZ needs clang (-DCMAKE_CXX_COMPILER=clang++)")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
endif()
