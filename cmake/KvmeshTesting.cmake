# kvmesh_add_test(NAME SOURCES ... [LIBS ...] [LABELS ...])
#
# One GoogleTest executable; its tests are discovered when ctest runs (not at build time) and carry
# the given labels: cpu, gpu, integration, multigpu, tsan. GPU tests skip themselves when no device
# is present, so `ctest -L gpu` is safe on any machine.
include(GoogleTest)

function(kvmesh_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    message(FATAL_ERROR "kvmesh_add_test(${name}): give LABELS (cpu, gpu, integration, ...)")
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 120
    PROPERTIES LABELS "${T_LABELS}")
endfunction()
