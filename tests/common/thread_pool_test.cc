#include "common/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <future>
#include <string>
#include <vector>

namespace kvmesh {
namespace {

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  for (int threads : {0, 1, 3}) {
    ThreadPool pool(threads);
    for (std::int64_t n : {1, 7, 1000, 100003}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, 16, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
    }
  }
}

TEST(ThreadPoolTest, NestedParallelForDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> sum{0};
  pool.ParallelFor(8, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      pool.ParallelFor(100, 1, [&](std::int64_t b2, std::int64_t e2) { sum.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(sum.load(), 800);
}

TEST(ThreadPoolTest, SubmittedTasksRunBeforeDestruction) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 100; ++i) pool.Submit([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 100);
}

// What a worker of the pool sees of itself: its scheduling policy and its thread name.
std::pair<int, std::string> WorkerSelf(ThreadPool& pool) {
  std::promise<std::pair<int, std::string>> seen;
  pool.Submit([&seen] {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    seen.set_value({sched_getscheduler(0), name});
  });
  return seen.get_future().get();
}

TEST(ThreadPoolTest, WorkersCarryTheirNameAndBackgroundWorkersRunAsBatch) {
  ThreadPool normal(1, "kvm-test-normal");
  ThreadPool background(1, "kvm-test-background-long", ThreadPool::Kind::kBackground);
  const auto [normal_policy, normal_name] = WorkerSelf(normal);
  EXPECT_EQ(normal_policy, SCHED_OTHER);
  EXPECT_EQ(normal_name, "kvm-test-normal");
  const auto [background_policy, background_name] = WorkerSelf(background);
  EXPECT_EQ(background_policy, SCHED_BATCH);
  EXPECT_EQ(background_name, "kvm-test-backgr");  // the kernel keeps 15 bytes
}

}  // namespace
}  // namespace kvmesh
