// EngineLane: the progress thread's loop, its sleep on the worker's event fd, the command queue.
#include "transfer/engine_lane.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace kvmesh::internal {

Status EngineLane::Start() {
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

void EngineLane::Wake() const {
  const std::uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN: the counter is already non-zero, the thread will wake anyway.
  }
}

void EngineLane::Stop() {
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

bool EngineLane::DrainCommands(bool* ran) {
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

void EngineLane::Loop(std::promise<Status>* started) {
  thread_id_ = std::this_thread::get_id();
  core_ = std::make_unique<EngineCore>(options_, thread_id_);
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

void EngineLane::Sleep() {
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

}  // namespace kvmesh::internal
