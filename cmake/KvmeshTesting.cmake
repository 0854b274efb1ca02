# kvmesh_add_test(NAME SOURCES ... [LIBS ...] LABELS ...)
#
# One GoogleTest executable, registered as one ctest test of the same name carrying the given
# labels: cpu, gpu, integration, multigpu, tsan. GPU tests skip themselves when no device is present
# (GTEST_SKIP), so `ctest -L gpu` is safe on any machine, and ctest reports what ran:
#   - every binary links tests/kernels/gpu_test_main.cc instead of gtest_main; a gpu-labelled one
#     exits 77 (SKIP_RETURN_CODE) when no test failed and any skipped, so ctest counts it as
#     skipped, not passed (a binary whose device tests skipped is not a GPU check that passed);
#   - any other binary exits 77 when all its tests skipped and none failed.
#   (Not SKIP_REGULAR_EXPRESSION on "[  PASSED  ] 0 tests": ctest lets it win over the exit
#   status, and a binary whose only test fails prints that line too — it was reported skipped.)
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
  # Every binary gets tests/kernels/gpu_test_main.cc as its main (exit 77 = skipped; see there):
  # one object library for gpu binaries (any skip is a skip), one for the others (all skipped).
  if("gpu" IN_LIST T_LABELS)
    set(main_lib kvmesh_gpu_test_main)
  else()
    set(main_lib kvmesh_test_main)
  endif()
  if(NOT TARGET ${main_lib})
    add_library(${main_lib} OBJECT ${PROJECT_SOURCE_DIR}/tests/kernels/gpu_test_main.cc)
    target_link_libraries(${main_lib} PRIVATE GTest::gtest)
    if(main_lib STREQUAL "kvmesh_gpu_test_main")
      target_compile_definitions(${main_lib} PRIVATE KVMESH_TEST_ANY_SKIP_IS_SKIPPED=1)
    endif()
  endif()
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock ${main_lib})
  add_test(NAME ${name} COMMAND ${name} --gtest_brief=1)
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" SKIP_RETURN_CODE 77)
  if("tsan" IN_LIST T_LABELS)
    add_dependencies(kvmesh_tsan_tests ${name})
  endif()
  if("gpu" IN_LIST T_LABELS)
    add_dependencies(kvmesh_gpu_tests ${name})
  endif()
endfunction()
