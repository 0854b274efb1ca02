#include "pool/move_out.h"

#include "common/check.h"

namespace kvmesh {

void MoveOutTicket::Complete() {
  if (queue_ == nullptr) return;
  MoveOutQueue* q = std::exchange(queue_, nullptr);
  q->Complete(pool_, block_, kind_);
}

MoveOutQueue::~MoveOutQueue() {
  MutexLock lock(&mu_);
  KVMESH_CHECK(outstanding_ == 0) << outstanding_ << " move-out tickets outstanding";
}

MoveOutTicket MoveOutQueue::Issue(PoolId pool, BlockId block, MoveOutKind kind) {
  MutexLock lock(&mu_);
  ++outstanding_;
  return MoveOutTicket(this, pool, block, kind);
}

void MoveOutQueue::Withdraw(MoveOutTicket& ticket) {
  KVMESH_CHECK(ticket.queue_ == this) << "withdrawing a ticket of another queue";
  ticket.queue_ = nullptr;
  MutexLock lock(&mu_);
  --outstanding_;
  if (outstanding_ == 0) cv_.notify_all();
}

void MoveOutQueue::Complete(PoolId pool, BlockId block, MoveOutKind kind) {
  MutexLock lock(&mu_);
  if (kind == MoveOutKind::kClaim) {
    claims_done_.push_back({pool, block});
  } else {
    completed_.push_back({pool, block});
    ++completions_;
  }
  --outstanding_;
  pending_.store(static_cast<std::int64_t>(completed_.size()), std::memory_order_release);
  cv_.notify_all();
}

void MoveOutQueue::AwaitClaim(PoolId pool, BlockId block) {
  MutexLock lock(&mu_);
  const auto done = [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
    for (std::size_t i = 0; i < claims_done_.size(); ++i) {
      if (claims_done_[i].pool == pool && claims_done_[i].block == block) {
        claims_done_.erase(claims_done_.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    }
    return false;
  };
  AwaitCondition(cv_, mu_, done);
}

std::uint64_t MoveOutQueue::TakeCompleted(std::vector<MovedOutBlock>* out) {
  MutexLock lock(&mu_);
  out->insert(out->end(), completed_.begin(), completed_.end());
  completed_.clear();
  pending_.store(0, std::memory_order_release);
  return completions_;
}

void MoveOutQueue::AwaitCompletions(std::uint64_t target) {
  MutexLock lock(&mu_);
  AwaitCondition(cv_, mu_, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
    return completions_ >= target || outstanding_ == 0;
  });
}

std::uint64_t MoveOutQueue::completions() const {
  MutexLock lock(&mu_);
  return completions_;
}

void MoveOutQueue::AwaitCompletion() {
  MutexLock lock(&mu_);
  AwaitCondition(cv_, mu_, [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
    return !completed_.empty() || outstanding_ == 0;
  });
}

void MoveOutQueue::AwaitAllCompleted() {
  MutexLock lock(&mu_);
  AwaitCondition(cv_, mu_, [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return outstanding_ == 0; });
}

std::int64_t MoveOutQueue::outstanding() const {
  MutexLock lock(&mu_);
  return outstanding_;
}

}  // namespace kvmesh
