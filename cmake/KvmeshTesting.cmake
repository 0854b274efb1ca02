# kvmesh_add_test(NAME SOURCES ... [LIBS ...] LABELS ...)
#
# One GoogleTest executable, registered as one ctest test of the same name carrying the given
# labels: cpu, gpu, integration, multigpu, tsan. GPU tests skip themselves when no device is present
# (GTEST_SKIP), so `ctest -L gpu` is safe on any machine; a binary whose tests all skipped is
# reported as skipped. (One ctest entry per binary, not per test case: gtest_discover_tests in CMake
# 3.25 cannot give a test more than one label.)
add_custom_target(kvmesh_tsan_tests)  # every test labelled tsan; scripts/test builds it under TSan

function(kvmesh_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    message(FATAL_ERROR "kvmesh_add_test(${name}): give LABELS (cpu, gpu, integration, ...)")
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name} --gtest_brief=1)
  set_tests_properties(${name} PROPERTIES
    LABELS "${T_LABELS}"
    SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
  if("tsan" IN_LIST T_LABELS)
    add_dependencies(kvmesh_tsan_tests ${name})
  endif()
endfunction()
