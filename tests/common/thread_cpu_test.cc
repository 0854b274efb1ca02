// ThreadCpuSnapshot / CpuByThreadName: a named pool's busy worker shows up under its name with the
// CPU it used; the arithmetic of two snapshots (new threads, reused thread ids, order).
#include "common/thread_cpu.h"

#include <gtest/gtest.h>
#include <time.h>

#include <cstdint>
#include <future>

#include "common/thread_pool.h"

namespace kvmesh {
namespace {

double CpuOf(const std::vector<std::pair<std::string, double>>& by_name, const std::string& name) {
  for (const auto& [n, s] : by_name) {
    if (n == name) return s;
  }
  return -1;
}

TEST(ThreadCpuTest, NamedPoolWorkersShowTheirCpuUnderTheirName) {
  const auto before = ThreadCpuSnapshot();
  ASSERT_FALSE(before.empty());
  ThreadPool busy(1, "kvm-test-busy");
  ThreadPool idle(1, "a-thread-name-longer-than-15");
  std::promise<void> done;
  busy.Submit([&done] {
    // 150 ms of this thread's CPU time (not wall time: a loaded machine only makes it take longer).
    volatile std::uint64_t x = 0;
    timespec ts{};
    do {
      for (int i = 0; i < 100000; ++i) x = x + 1;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    } while (static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9 < 0.15);
    done.set_value();
  });
  done.get_future().wait();
  const auto by_name = CpuByThreadName(before, ThreadCpuSnapshot());
  EXPECT_GT(CpuOf(by_name, "kvm-test-busy"), 0.05);
  EXPECT_GE(CpuOf(by_name, "a-thread-name-l"), 0.0);  // 15 bytes kept
  EXPECT_LT(CpuOf(by_name, "a-thread-name-l"), 0.05);
  EXPECT_EQ(CpuOf(by_name, "a-thread-name-longer-than-15"), -1);
}

TEST(ThreadCpuTest, DifferenceOfTwoSnapshots) {
  const std::vector<ThreadCpu> before = {{1, "main", 1.0}, {2, "copy", 0.5}, {3, "old", 2.0}};
  const std::vector<ThreadCpu> after = {
      {1, "main", 1.5},   // 0.5
      {2, "copy", 0.75},  // 0.25
      {3, "new", 0.4},    // thread id reused by another thread: from zero
      {4, "copy", 0.1},   // a second "copy" thread, started in between
  };
  const auto d = CpuByThreadName(before, after);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].first, "main");
  EXPECT_DOUBLE_EQ(d[0].second, 0.5);
  EXPECT_EQ(d[1].first, "new");
  EXPECT_DOUBLE_EQ(d[1].second, 0.4);
  EXPECT_EQ(d[2].first, "copy");
  EXPECT_DOUBLE_EQ(d[2].second, 0.35);
}

}  // namespace
}  // namespace kvmesh
