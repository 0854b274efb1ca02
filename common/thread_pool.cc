#include "common/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

namespace kvmesh {

ThreadPool::ThreadPool(int num_threads, std::string_view name, Kind kind) {
  if (num_threads < 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(num_threads);
  const std::string thread_name(name.substr(0, 15));  // the kernel keeps 15 bytes
  for (int i = 0; i < num_threads; ++i) {
    workers_.emplace_back([this, thread_name, kind] {
      if (!thread_name.empty()) pthread_setname_np(pthread_self(), thread_name.c_str());
      if (kind == Kind::kBackground) {
        const sched_param param{};  // SCHED_BATCH takes priority 0; no privilege needed
        pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
      }
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Submit(std::function<void()> task) {
  if (workers_.empty()) {
    task();
    return;
  }
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      AwaitCondition(cv_, mu_, [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || !queue_.empty();
      });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(std::int64_t n, std::int64_t min_chunk,
                             const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<std::int64_t>(1, min_chunk);
  const std::int64_t max_chunks = static_cast<std::int64_t>(workers_.size()) + 1;
  const std::int64_t chunks = std::clamp<std::int64_t>(n / min_chunk, 1, max_chunks * 4);
  if (chunks == 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  // Chunks are claimed from a shared counter by the helpers and by the caller; the caller then
  // waits until every claimed chunk has finished. Work left unclaimed is done by the caller, so
  // nested calls and a busy pool cannot deadlock.
  struct Shared {
    std::atomic<std::int64_t> next{0};
    std::atomic<std::int64_t> done{0};
    Mutex mu;
    std::condition_variable cv;
  };
  auto shared = std::make_shared<Shared>();
  const std::int64_t per_chunk = (n + chunks - 1) / chunks;
  auto run_chunks = [shared, per_chunk, n, chunks, &fn]() {
    while (true) {
      const std::int64_t c = shared->next.fetch_add(1);
      if (c >= chunks) return;
      const std::int64_t begin = c * per_chunk;
      const std::int64_t end = std::min(n, begin + per_chunk);
      if (begin < end) fn(begin, end);
      if (shared->done.fetch_add(1) + 1 == chunks) {
        MutexLock lock(&shared->mu);
        shared->cv.notify_all();
      }
    }
  };
  const std::int64_t helpers =
      std::min<std::int64_t>(static_cast<std::int64_t>(workers_.size()), chunks - 1);
  for (std::int64_t i = 0; i < helpers; ++i) Submit(run_chunks);
  run_chunks();
  MutexLock lock(&shared->mu);
  AwaitCondition(shared->cv, shared->mu, [&] { return shared->done.load() == chunks; });
}

}  // namespace kvmesh
