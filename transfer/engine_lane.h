// EngineLane: one lane of a TransferEngine (transfer/transfer_engine.h, "Lanes") — a progress
// thread that creates and alone touches its EngineCore (UCX context, worker, endpoints,
// registrations), and the command queue through which every other thread hands it work.
//
// Thread safety: Run may be called from any thread; it runs `fn` on the progress thread (inline
// when called there) and waits for it. address(), stats() and OnThread() are thread-safe. Internal
// to kvmesh_transfer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "transfer/engine_core.h"
#include "transfer/transfer_engine.h"

namespace kvmesh::internal {

class EngineLane {
 public:
  explicit EngineLane(const TransferEngineOptions& options) : options_(options) {}
  ~EngineLane() { Stop(); }
  EngineLane(const EngineLane&) = delete;
  EngineLane& operator=(const EngineLane&) = delete;

  // Starts the progress thread, which creates the EngineCore: its Init status.
  Status Start();

  // Runs `fn(core)` on the progress thread and returns its result; inline when called there.
  template <typename Fn>
  auto Run(Fn&& fn) -> decltype(fn(std::declval<EngineCore&>())) {
    using R = decltype(fn(std::declval<EngineCore&>()));
    if (std::this_thread::get_id() == thread_id_) return fn(*core_);
    std::optional<R> result;
    Command command;
    command.fn = [&] { result.emplace(fn(*core_)); };
    {
      MutexLock lock(&mu_);
      queue_.push_back(&command);
      pending_.store(true, std::memory_order_release);
    }
    Wake();
    {
      MutexLock lock(&mu_);
      AwaitCondition(cv_, mu_, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return command.done; });
    }
    return std::move(*result);
  }

  [[nodiscard]] const WorkerAddress& address() const { return address_; }
  [[nodiscard]] TransferStats stats() const { return core_->stats().Snapshot(); }
  [[nodiscard]] bool OnThread() const { return std::this_thread::get_id() == thread_id_; }

 private:
  struct Command {
    std::function<void()> fn;
    bool done = false;  // guarded by EngineLane::mu_
  };

  void Wake() const;
  void Stop();
  // Runs the queued commands; returns false when the engine is stopping.
  bool DrainCommands(bool* ran);
  void Loop(std::promise<Status>* started);
  // Sleeps on the worker's event fd and the wake fd until an event, the next deadline or idle_tick.
  void Sleep();

  const TransferEngineOptions options_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::thread::id thread_id_;
  std::unique_ptr<EngineCore> core_;  // owned by the progress thread
  WorkerAddress address_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<Command*> queue_ KVMESH_GUARDED_BY(mu_);
  std::vector<Command*> batch_;  // progress thread only
  bool stop_ KVMESH_GUARDED_BY(mu_) = false;
  std::atomic<bool> pending_{false};  // a command or the stop is queued
};

}  // namespace kvmesh::internal
