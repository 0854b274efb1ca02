// Clock: the time source, injected so that expiry (retention durations, transfer deadlines) is
// tested deterministically.
//
// Time is a monotonic count of nanoseconds since an arbitrary origin. SystemClock reads
// std::chrono::steady_clock; ManualClock returns what the test set and moves only when told.
//
// Thread safety: both implementations are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvmesh {

using Nanos = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Nanos>;

class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual TimePoint Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  [[nodiscard]] TimePoint Now() const override {
    return std::chrono::time_point_cast<Nanos>(std::chrono::steady_clock::now());
  }
  // A process-wide instance for callers that take a `Clock*` and were given none.
  static SystemClock* Default();
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = TimePoint(Nanos(1'000'000'000)))
      : now_ns_(start.time_since_epoch().count()) {}
  [[nodiscard]] TimePoint Now() const override {
    return TimePoint(Nanos(now_ns_.load(std::memory_order_acquire)));
  }
  void Advance(Nanos delta) { now_ns_.fetch_add(delta.count(), std::memory_order_acq_rel); }
  void Set(TimePoint t) { now_ns_.store(t.time_since_epoch().count(), std::memory_order_release); }

 private:
  std::atomic<std::int64_t> now_ns_;
};

}  // namespace kvmesh
