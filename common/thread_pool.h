// ThreadPool: a fixed set of worker threads for the CPU backend's kernels and for blocking work
// that must not run on an event loop (copies, RocksDB writes).
//
// Submit() queues a task; ParallelFor() splits [0, n) into chunks, runs them on the workers and on
// the calling thread, and returns when all are done. A pool of 0 workers runs everything on the
// caller (deterministic, used by tests). Tasks must not throw.
//
// Thread safety: thread-safe. ParallelFor may be called from several threads at once; calling it
// from inside a task of the same pool is allowed (the caller takes part, so it cannot deadlock).
// The destructor drains the queue and joins the workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"

namespace kvmesh {

class ThreadPool {
 public:
  enum class Kind {
    kNormal,
    // Work nobody waits on at once (tier copies, RocksDB writes): the workers run under
    // SCHED_BATCH, so that waking one does not preempt the thread that queued the work (on a busy
    // core that thread, e.g. an admission, keeps running and the worker takes the next free
    // slot). Where the policy cannot be set, the workers run as kNormal.
    kBackground,
  };
  // `num_threads` workers; the default is std::thread::hardware_concurrency(). `name`: the
  // workers' thread name as top -H, ps and /proc show it (at most 15 bytes are kept; empty: the
  // creating thread's).
  explicit ThreadPool(int num_threads = -1, std::string_view name = {}, Kind kind = Kind::kNormal);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int num_threads() const { return static_cast<int>(workers_.size()); }

  void Submit(std::function<void()> task) KVMESH_EXCLUDES(mu_);

  // Calls fn(begin, end) over chunks covering [0, n) of at least `min_chunk` items each.
  void ParallelFor(std::int64_t n, std::int64_t min_chunk,
                   const std::function<void(std::int64_t, std::int64_t)>& fn) KVMESH_EXCLUDES(mu_);

 private:
  void WorkerLoop();

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ KVMESH_GUARDED_BY(mu_);
  bool stopping_ KVMESH_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvmesh
