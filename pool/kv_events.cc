#include "pool/kv_events.h"

#include <algorithm>

#include "common/check.h"

namespace kvmesh {

std::string_view KvEventTypeName(KvEventType type) {
  switch (type) {
    case KvEventType::kStored: return "stored";
    case KvEventType::kRemoved: return "removed";
    case KvEventType::kTierChanged: return "tier_changed";
  }
  return "unknown";
}

std::string_view KvTierName(KvTier tier) {
  switch (tier) {
    case KvTier::kNone: return "none";
    case KvTier::kPrimary: return "primary";
    case KvTier::kHost: return "host";
    case KvTier::kDisk: return "disk";
  }
  return "unknown";
}

KvEventBuffer::KvEventBuffer(std::size_t capacity) : capacity_(capacity), ring_(capacity) {
  KVMESH_CHECK(capacity > 0) << "event buffer capacity must be positive";
}

std::uint64_t KvEventBuffer::Push(std::span<KvEvent> events) {
  MutexLock lock(&mu_);
  for (KvEvent& e : events) {
    e.seq = ++last_seq_;
    ring_[(e.seq - 1) % ring_.size()] = e;
  }
  return events.empty() ? 0 : last_seq_;
}

KvEventBatch KvEventBuffer::Poll(std::uint64_t from_seq, std::size_t max_events) const {
  MutexLock lock(&mu_);
  KvEventBatch batch;
  from_seq = std::max<std::uint64_t>(from_seq, 1);
  const std::uint64_t cap = ring_.size();
  const std::uint64_t oldest = last_seq_ > cap ? last_seq_ - cap + 1 : 1;
  if (from_seq < oldest) {
    batch.lost = KvEventGap{from_seq, oldest - 1};
    from_seq = oldest;
  }
  const std::uint64_t end =
      std::min<std::uint64_t>(last_seq_ + 1, from_seq + static_cast<std::uint64_t>(max_events));
  if (end > from_seq) batch.events.reserve(end - from_seq);
  for (std::uint64_t s = from_seq; s < end; ++s) batch.events.push_back(ring_[(s - 1) % cap]);
  batch.next_seq = std::max(end, from_seq);
  return batch;
}

std::uint64_t KvEventBuffer::last_seq() const {
  MutexLock lock(&mu_);
  return last_seq_;
}

std::uint64_t KvEventBuffer::overwritten() const {
  MutexLock lock(&mu_);
  return last_seq_ > ring_.size() ? last_seq_ - ring_.size() : 0;
}

}  // namespace kvmesh
