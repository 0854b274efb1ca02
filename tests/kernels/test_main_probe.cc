// A test binary whose one test passes, skips or fails as KVMESH_PROBE says ("pass", "skip",
// "fail"): the test_main_exit_codes ctest (tests/CMakeLists.txt) runs it in each mode and checks
// the exit status the shared main gives (0, 77, 1) — a failing binary must never read as skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

TEST(TestMainProbe, DoesWhatItIsTold) {
  const char* mode = std::getenv("KVMESH_PROBE");
  const std::string m = mode == nullptr ? "pass" : mode;
  if (m == "skip") GTEST_SKIP() << "probe asked to skip";
  if (m == "fail") FAIL() << "probe asked to fail";
}
