# kvmesh_add_test(NAME SOURCES ... [LIBS ...] LABELS ...)
#
# One GoogleTest executable, registered as one ctest test of the same name carrying the given
# labels: cpu, gpu, integration, multigpu, tsan. GPU tests skip themselves when no device is present
# (GTEST_SKIP), so `ctest -L gpu` is safe on any machine, and ctest reports what ran:
#   - a gpu-labelled binary links tests/kernels/gpu_test_main.cc instead of gtest_main: when no
#     test failed and any skipped it exits 77 (SKIP_RETURN_CODE), so ctest counts it as skipped,
#     not passed (a binary whose device tests skipped is not a GPU check that passed);
#   - any other binary whose tests all skipped ("[  PASSED  ] 0 tests") is skipped too.
# (One ctest entry per binary, not per test case: gtest_discover_tests in CMake 3.25 cannot give a
# test more than one label.)
add_custom_target(kvmesh_tsan_tests)  # every test labelled tsan; scripts/test builds it under TSan
add_custom_target(kvmesh_gpu_tests)   # every test labelled gpu; scripts/gpu-check builds it

function(kvmesh_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    message(FATAL_ERROR "kvmesh_add_test(${name}): give LABELS (cpu, gpu, integration, ...)")
  endif()
  add_executable(${name} ${T_SOURCES})
  if("gpu" IN_LIST T_LABELS)
    if(NOT TARGET kvmesh_gpu_test_main)
      add_library(kvmesh_gpu_test_main OBJECT ${PROJECT_SOURCE_DIR}/tests/kernels/gpu_test_main.cc)
      target_link_libraries(kvmesh_gpu_test_main PRIVATE GTest::gtest)
    endif()
    target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock kvmesh_gpu_test_main)
  else()
    target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  endif()
  add_test(NAME ${name} COMMAND ${name} --gtest_brief=1)
  set_tests_properties(${name} PROPERTIES
    LABELS "${T_LABELS}"
    SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
  if("gpu" IN_LIST T_LABELS)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
  if("tsan" IN_LIST T_LABELS)
    add_dependencies(kvmesh_tsan_tests ${name})
  endif()
  if("gpu" IN_LIST T_LABELS)
    add_dependencies(kvmesh_gpu_tests ${name})
  endif()
endfunction()
