// TransferOp: the caller's handle to one grant or one send of a TransferEngine — a shared,
// copyable handle to its completion.
//
// An operation completes exactly once, with OK or an error, on the engine's progress thread: the
// status is set, waiters wake, then the operation's on_complete callback (if any) runs. When an
// operation has completed, UCX holds no reference to its memory (transfer_engine.h says what that
// means for each side).
//
// Thread safety: thread-safe. Any number of threads may wait on copies of one handle. Waiting on
// the engine's progress thread (e.g. inside an on_complete callback) for an operation that has not
// completed is a deadlock and is checked (KVMESH_CHECK).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "transfer/transfer_types.h"

namespace kvmesh {

using TransferCallback = std::function<void(TransferId, const Status&)>;

namespace internal {

// The shared state behind TransferOp. The engine completes it; callers read it.
class TransferOpState {
 public:
  TransferOpState(TransferId id, TransferCallback on_complete, std::thread::id engine_thread)
      : id_(id), on_complete_(std::move(on_complete)), engine_thread_(engine_thread) {}

  [[nodiscard]] TransferId id() const { return id_; }
  [[nodiscard]] bool done() const;
  Status Wait();
  [[nodiscard]] bool WaitFor(Nanos timeout);
  [[nodiscard]] Status status() const;

  // Called once by the engine, on its thread, with no engine lock held.
  void Complete(const Status& status);

 private:
  const TransferId id_;
  TransferCallback on_complete_;
  const std::thread::id engine_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  Status status_;      // guarded by mu_
};

}  // namespace internal

class TransferOp {
 public:
  TransferOp() = default;  // an empty handle: valid() is false
  explicit TransferOp(std::shared_ptr<internal::TransferOpState> state)
      : state_(std::move(state)) {}

  [[nodiscard]] bool valid() const { return state_ != nullptr; }
  // The transfer id (for a grant: the id the engine chose, to hand to the sender).
  [[nodiscard]] TransferId id() const { return state_->id(); }
  [[nodiscard]] bool done() const { return state_->done(); }
  // Blocks until the operation completed; returns its status.
  Status Wait() const { return state_->Wait(); }
  // Waits at most `timeout`; true when the operation completed. It does not cancel anything.
  [[nodiscard]] bool WaitFor(Nanos timeout) const { return state_->WaitFor(timeout); }
  // REQUIRES: done().
  [[nodiscard]] Status status() const { return state_->status(); }

 private:
  std::shared_ptr<internal::TransferOpState> state_;
};

}  // namespace kvmesh
