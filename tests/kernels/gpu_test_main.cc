// main() of every kvmesh test binary (cmake/KvmeshTesting.cmake links it instead of gtest_main):
// GoogleTest's, except for how a run in which tests skipped ends, so that ctest (SKIP_RETURN_CODE
// 77) reports what ran instead of "100% tests passed":
//   - a binary labelled gpu (built with KVMESH_TEST_ANY_SKIP_IS_SKIPPED) whose tests did not fail
//     but some skipped (no CUDA device) exits 77: its device checks did not run;
//   - any other binary exits 77 only when every test skipped (e.g. no etcd binary) and none failed.
// A failure always fails the run. (ctest's SKIP_REGULAR_EXPRESSION is not used: it wins over the
// exit status, so a binary whose only test FAILED — which also prints "[  PASSED  ] 0 tests" —
// was counted as skipped.)
#include <gtest/gtest.h>

namespace {
constexpr int kSkippedExitCode = 77;  // KvmeshTesting.cmake: SKIP_RETURN_CODE
#ifdef KVMESH_TEST_ANY_SKIP_IS_SKIPPED
constexpr bool kAnySkipIsSkipped = true;
#else
constexpr bool kAnySkipIsSkipped = false;
#endif
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (u.failed_test_count() > 0) return 1;
  const bool skipped = kAnySkipIsSkipped
                           ? u.skipped_test_count() > 0
                           : u.skipped_test_count() > 0 && u.successful_test_count() == 0;
  return skipped ? kSkippedExitCode : 0;
}
