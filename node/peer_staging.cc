#include "node/peer_staging.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/strings.h"

namespace kvmesh {

StagingLease::StagingLease(StagingLease&& other) noexcept
    : arena_(std::exchange(other.arena_, nullptr)), slots_(std::move(other.slots_)) {
  other.slots_.clear();
}

StagingLease& StagingLease::operator=(StagingLease&& other) noexcept {
  if (this != &other) {
    Release();
    arena_ = std::exchange(other.arena_, nullptr);
    slots_ = std::move(other.slots_);
    other.slots_.clear();
  }
  return *this;
}

StagingLease::~StagingLease() { Release(); }

void StagingLease::Release() {
  if (arena_ != nullptr && !slots_.empty()) arena_->Give(slots_);
  slots_.clear();
  arena_ = nullptr;
}

std::span<std::byte> StagingLease::bytes(std::size_t i) const {
  return {arena_->memory_ + static_cast<std::size_t>(slots_[i]) * arena_->slot_bytes_,
          arena_->slot_bytes_};
}

Slice StagingLease::slice(std::size_t i, std::uint64_t length) const {
  return Slice{arena_->region_, static_cast<std::uint64_t>(slots_[i]) * arena_->slot_bytes_,
               length};
}

Result<std::unique_ptr<StagingArena>> StagingArena::Create(TransferEngine* engine,
                                                           std::uint64_t slot_bytes,
                                                           std::uint32_t slots) {
  if (slot_bytes == 0 || slots == 0) {
    return Status::InvalidArgument("staging arena: slot_bytes and slots must be positive");
  }
  constexpr std::uint64_t kAlign = 4096;
  slot_bytes = (slot_bytes + kAlign - 1) / kAlign * kAlign;
  std::unique_ptr<StagingArena> a(new StagingArena());
  a->engine_ = engine;
  a->slot_bytes_ = slot_bytes;
  a->slots_ = slots;
  const std::size_t total = static_cast<std::size_t>(slot_bytes) * slots;
  a->memory_ = static_cast<std::byte*>(std::aligned_alloc(kAlign, total));
  if (a->memory_ == nullptr) {
    return Status::ResourceExhausted(StrCat("staging arena: cannot allocate ", total, " bytes"));
  }
  std::memset(a->memory_, 0, total);
  KVMESH_ASSIGN_OR_RETURN(a->region_, engine->RegisterRegion(a->memory_, total));
  MutexLock lock(&a->mu_);  // not shared yet; the lock keeps the analysis simple
  a->free_.reserve(slots);
  for (std::uint32_t i = slots; i > 0; --i) a->free_.push_back(i - 1);
  return a;
}

StagingArena::~StagingArena() {
  if (region_.valid()) {
    Status st = engine_->DeregisterRegion(region_);
    if (!st.ok()) KVMESH_LOG_ERROR("staging deregister failed error {}", st.ToString());
  }
  std::free(memory_);
}

Result<StagingLease> StagingArena::Acquire(std::size_t n,
                                           std::chrono::steady_clock::time_point deadline) {
  if (n == 0 || n > slots_) {
    return Status::InvalidArgument(StrCat("staging: ", n, " slots asked, ", slots_, " exist"));
  }
  MutexLock lock(&mu_);
  const auto wait = std::max(deadline - std::chrono::steady_clock::now(),
                             std::chrono::steady_clock::duration::zero());
  if (!AwaitConditionFor(cv_, mu_, wait,
                         [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return free_.size() >= n; })) {
    return Status::TimedOut(StrCat("staging: ", n, " slots not free in time"));
  }
  std::vector<std::uint32_t> taken(free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
  free_.resize(free_.size() - n);
  return StagingLease(this, std::move(taken));
}

std::uint32_t StagingArena::free_slots() const {
  MutexLock lock(&mu_);
  return static_cast<std::uint32_t>(free_.size());
}

void StagingArena::Give(std::span<const std::uint32_t> slots) {
  {
    MutexLock lock(&mu_);
    free_.insert(free_.end(), slots.begin(), slots.end());
  }
  cv_.notify_all();
}

}  // namespace kvmesh
