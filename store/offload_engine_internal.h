// Internal to the offload engine (store/offload_engine.cc, offload_engine_onboard.cc): its
// counters, the state of one onboard, and the clock helpers they share. Not a public header.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "store/offload_engine.h"

namespace kvmesh::offload_internal {

using SteadyClock = std::chrono::steady_clock;

inline std::int64_t NanosSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count();
}

struct TrafficCounters {
  std::atomic<std::int64_t> blocks{0}, bytes{0}, ns{0};
  const CopyObserver* observer = nullptr;  // the options' on_copy, when set
  CopyDirection direction = CopyDirection::kOffload;
  KvTier tier = KvTier::kHost;
  void Bind(const CopyObserver& o, CopyDirection d, KvTier t) {
    observer = o ? &o : nullptr;
    direction = d;
    tier = t;
  }
  void Add(std::int64_t n_bytes, std::int64_t n_ns) { Add(1, n_bytes, n_ns); }
  // Copy time of blocks counted already (a staging copy after their tier reads); not observed.
  void AddTime(std::int64_t n_ns) { ns.fetch_add(n_ns, std::memory_order_relaxed); }
  // n_blocks copied in one go (a restore range): the observer is told how many.
  void Add(std::int64_t n_blocks, std::int64_t n_bytes, std::int64_t n_ns) {
    blocks.fetch_add(n_blocks, std::memory_order_relaxed);
    bytes.fetch_add(n_bytes, std::memory_order_relaxed);
    ns.fetch_add(n_ns, std::memory_order_relaxed);
    if (observer != nullptr) (*observer)(direction, tier, n_blocks, n_bytes, n_ns);
  }
  [[nodiscard]] TierTraffic Load() const {
    TierTraffic t;
    t.blocks = blocks.load(std::memory_order_relaxed);
    t.bytes = bytes.load(std::memory_order_relaxed);
    t.copy_s = static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9;
    return t;
  }
};

// A restore's ranges: at least this many bytes of blocks each.
inline constexpr std::int64_t kOnboardRangeBytes = 1 << 20;

}  // namespace kvmesh::offload_internal

namespace kvmesh {

struct OffloadEngine::Counters {
  offload_internal::TrafficCounters offload, spill, onboard_host, onboard_disk;
  std::atomic<std::int64_t> evictions_seen{0}, skipped_priority{0}, skipped_clean{0},
      offload_failed{0}, spill_skipped_clean{0}, spill_failed{0}, onboard_missing{0},
      onboard_corrupt{0}, onboard_failed{0}, listener_ns{0}, lookup_ns{0}, offload_helped{0};
};

struct OffloadEngine::OnboardJob {
  std::vector<ContentId> ids;
  std::vector<BlockId> blocks;
  std::vector<Status> status;  // [ids]
  std::vector<KvTier> source;  // [ids]
  std::atomic<std::int64_t> remaining{0};
  std::function<void(OnboardResult)> done;
};

}  // namespace kvmesh
