#include "transfer/transfer_op.h"

#include "common/check.h"

namespace kvmesh::internal {

bool TransferOpState::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status TransferOpState::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_) {
    KVMESH_CHECK(std::this_thread::get_id() != engine_thread_)
        << "waiting for a transfer on the engine's own progress thread would never return";
  }
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

bool TransferOpState::WaitFor(Nanos timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_) {
    KVMESH_CHECK(std::this_thread::get_id() != engine_thread_)
        << "waiting for a transfer on the engine's own progress thread would never return";
  }
  return cv_.wait_for(lock, timeout, [this] { return done_; });
}

Status TransferOpState::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  KVMESH_CHECK(done_) << "status() of a transfer that has not completed";
  return status_;
}

void TransferOpState::Complete(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    KVMESH_CHECK(!done_) << "transfer " << id_.value << " completed twice";
    done_ = true;
    status_ = status;
  }
  cv_.notify_all();
  if (on_complete_) on_complete_(id_, status);
}

}  // namespace kvmesh::internal
