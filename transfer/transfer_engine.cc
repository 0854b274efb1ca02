// TransferEngine: the progress thread, the command queue that hands it work, and the public API.
#include "transfer/transfer_engine.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "transfer/engine_core.h"

namespace kvmesh {

class TransferEngine::Impl {
 public:
  explicit Impl(const TransferEngineOptions& options) : options_(options) {}
  ~Impl() { Stop(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status Start() {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Status::IoError("eventfd failed");
    std::promise<Status> started;
    std::future<Status> result = started.get_future();
    thread_ = std::thread([this, &started] { Loop(&started); });
    Status status = result.get();
    if (!status.ok()) {
      thread_.join();
      return status;
    }
    return Status::Ok();
  }

  // Runs `fn(core)` on the progress thread and returns its result; inline when called there.
  template <typename Fn>
  auto Run(Fn&& fn) -> decltype(fn(std::declval<internal::EngineCore&>())) {
    using R = decltype(fn(std::declval<internal::EngineCore&>()));
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

 private:
  struct Command {
    std::function<void()> fn;
    bool done = false;  // guarded by Impl::mu_
  };

  void Wake() const {
    const std::uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0) {
      // EAGAIN: the counter is already non-zero, the thread will wake anyway.
    }
  }

  void Stop() {
    if (!thread_.joinable()) {
      if (wake_fd_ >= 0) close(wake_fd_);
      wake_fd_ = -1;
      return;
    }
    {
      MutexLock lock(&mu_);
      stop_ = true;
      pending_.store(true, std::memory_order_release);
    }
    Wake();
    thread_.join();
    close(wake_fd_);
    wake_fd_ = -1;
  }

  // Runs the queued commands; returns false when the engine is stopping.
  bool DrainCommands(bool* ran) {
    *ran = false;
    // The lock is taken only when something was queued: the loop runs this every iteration.
    if (!pending_.load(std::memory_order_acquire)) return true;
    {
      MutexLock lock(&mu_);
      pending_.store(false, std::memory_order_relaxed);
      batch_.swap(queue_);  // both keep their capacity: no allocation per iteration
      if (stop_ && batch_.empty()) return false;
    }
    *ran = !batch_.empty();
    for (Command* command : batch_) {
      command->fn();
      core_->FlushCompletions();
      MutexLock lock(&mu_);
      command->done = true;
    }
    if (!batch_.empty()) cv_.notify_all();
    batch_.clear();
    return true;
  }

  void Loop(std::promise<Status>* started) {
    thread_id_ = std::this_thread::get_id();
    core_ = std::make_unique<internal::EngineCore>(options_, thread_id_);
    Status status = core_->Init();
    if (!status.ok()) {
      core_.reset();
      started->set_value(std::move(status));
      return;
    }
    address_ = core_->address();
    started->set_value(Status::Ok());  // `started` is gone after this line

    // The clock is read only when an iteration found nothing to do (no cost on the busy path).
    auto idle_since = std::chrono::steady_clock::now();
    bool idle = false;
    while (true) {
      bool ran = false;
      if (!DrainCommands(&ran)) break;
      const unsigned events = core_->RunOnce();
      if (events > 0 || ran) {
        idle = false;
        continue;
      }
      const auto now = std::chrono::steady_clock::now();
      if (!idle) {
        idle = true;
        idle_since = now;
      } else if (now - idle_since > options_.busy_poll) {
        Sleep();
        idle = false;
      }
    }
    core_->Shutdown();
    core_.reset();  // every UCX object is destroyed on this thread
  }

  // Sleeps on the worker's event fd and the wake fd until an event, the next deadline or idle_tick.
  void Sleep() {
    Result<bool> armed = core_->worker().Arm();
    if (!armed.ok()) {
      KVMESH_LOG_ERROR("transfer worker_arm_failed status {}", armed.status().ToString());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    if (!*armed) return;  // events pending
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options_.idle_tick);
    const TimePoint deadline = core_->NextDeadline();
    if (deadline != TimePoint::max()) {
      const auto until = deadline - core_->clock().Now();
      timeout = std::min(
          timeout, std::chrono::ceil<std::chrono::milliseconds>(std::max(until, Nanos::zero())));
    }
    pollfd fds[2] = {{core_->worker().event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    poll(fds, 2, static_cast<int>(timeout.count()));
    if ((fds[1].revents & POLLIN) != 0) {
      std::uint64_t value = 0;
      if (read(wake_fd_, &value, sizeof(value)) < 0) {
        // EAGAIN: another reader got it first; nothing to do.
      }
    }
  }

  const TransferEngineOptions options_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::thread::id thread_id_;
  std::unique_ptr<internal::EngineCore> core_;  // owned by the progress thread
  WorkerAddress address_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<Command*> queue_ KVMESH_GUARDED_BY(mu_);
  std::vector<Command*> batch_;  // progress thread only
  bool stop_ KVMESH_GUARDED_BY(mu_) = false;
  std::atomic<bool> pending_{false};  // a command or the stop is queued
};

namespace {

Status ValidateOptions(const TransferEngineOptions& options) {
  if (options.max_grants == 0 || options.max_slices_per_operation == 0 ||
      options.send_window_slices == 0 || options.send_window_bytes == 0) {
    return Status::InvalidArgument(
        "max_grants, max_slices_per_operation, send_window_slices and send_window_bytes must be "
        "positive");
  }
  if (options.idle_tick.count() <= 0) return Status::InvalidArgument("idle_tick must be positive");
  if (options.busy_poll.count() < 0) return Status::InvalidArgument("busy_poll is negative");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<TransferEngine>> TransferEngine::Create(
    const TransferEngineOptions& options) {
  KVMESH_RETURN_IF_ERROR(ValidateOptions(options));
  auto impl = std::make_unique<Impl>(options);
  KVMESH_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<TransferEngine>(new TransferEngine(std::move(impl)));
}

TransferEngine::TransferEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TransferEngine::~TransferEngine() = default;

const WorkerAddress& TransferEngine::address() const { return impl_->address(); }

Status TransferEngine::Connect(PeerId peer, const WorkerAddress& address) {
  return impl_->Run([&](internal::EngineCore& core) { return core.Connect(peer, address); });
}

Status TransferEngine::Disconnect(PeerId peer) {
  return impl_->Run([&](internal::EngineCore& core) { return core.Disconnect(peer); });
}

Result<RegionId> TransferEngine::RegisterRegion(void* base, std::size_t length) {
  return impl_->Run([&](internal::EngineCore& core) { return core.RegisterRegion(base, length); });
}

Status TransferEngine::DeregisterRegion(RegionId region) {
  return impl_->Run([&](internal::EngineCore& core) { return core.DeregisterRegion(region); });
}

Result<TransferOp> TransferEngine::Grant(const GrantRequest& request) {
  return impl_->Run([&](internal::EngineCore& core) { return core.Grant(request); });
}

Status TransferEngine::CancelGrant(TransferId transfer) {
  return impl_->Run([&](internal::EngineCore& core) { return core.CancelGrant(transfer); });
}

Result<TransferOp> TransferEngine::Send(const SendRequest& request) {
  return impl_->Run([&](internal::EngineCore& core) { return core.Send(request); });
}

Status TransferEngine::CancelSend(PeerId peer, TransferId transfer) {
  return impl_->Run([&](internal::EngineCore& core) { return core.CancelSend(peer, transfer); });
}

TransferStats TransferEngine::stats() const { return impl_->stats(); }

}  // namespace kvmesh
