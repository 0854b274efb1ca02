// main() of the tests labelled gpu (cmake/KvmeshTesting.cmake links it instead of gtest_main):
// GoogleTest's, except that a run in which no test failed but some skipped (no CUDA device) exits
// with kSkippedExitCode, which ctest (SKIP_RETURN_CODE) counts as skipped rather than passed — so
// `ctest -L gpu` on a machine without a GPU says the GPU checks did not run, instead of "100% tests
// passed". A failure still fails the run, skipped tests or not.
#include <gtest/gtest.h>

namespace {
constexpr int kSkippedExitCode = 77;  // KvmeshTesting.cmake: SKIP_RETURN_CODE
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  return ::testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? kSkippedExitCode : 0;
}
