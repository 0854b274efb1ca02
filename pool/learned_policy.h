// LearnedPolicy ("learned"): eviction within a priority by the chance of reuse the cache has
// observed for items like the one at hand, combined with recency.
//
// Order. Lowest priority first, exactly as PriorityLruPolicy: priorities are the user's word and
// are never traded against anything. Within a priority, the entry with the smallest
//
//     score = last_use + 2·tau·ln(p(class))
//
// goes first (ties: the older last_use). This is the order of the estimated probability that the
// item is used again, under the model "an item of class c is used again with probability p(c),
// after an exponentially distributed time of mean tau": P(reuse | c, age a) = p(c)·exp(-a/tau),
// whose logarithm ln p(c) - a/tau orders entries the same way at every moment — so a static heap
// key serves (O(log n)), and aging needs no re-keying. With equal p the order is exactly LRU's.
//
// What is learned, from the observations of eviction_policy.h only:
//   class     at each release (end of a use): (uses before this one, capped at 8; whether the item
//             was a leaf — had no cached children; floor(log2(depth + 1)), capped at 7): 144
//             classes. Outside a tree (host tier) only the use count varies.
//   p(class)  reuses / releases of that class: a release counts once, and a reuse is credited to
//             the class of the item's previous release when the item is used again — pinned while
//             cached, or admitted again while its ghost (below) remembers it. Both counts are
//             halved every 16 × capacity releases (at least 4096), so that the estimate follows a
//             workload that changes; shrunk toward the pooled rate with 2 pseudo-releases; at least
//             1/1024.
//   tau       the mean age (in use stamps) at which reuses are observed, an exponential moving
//             average over about the last 1024 reuses, times 2: observed ages are cut off at the
//             end of the observation window (cache + ghost), which biases their mean low — the
//             ages of an exponential of mean tau seen through a window of 1.6 tau average tau/2;
//             2 undoes that much without assuming more about the window. Starts at the capacity.
//   ghost     a GhostTable (ghost_table.h) of the last 8 × capacity retired items (at most 2^22):
//             fingerprint, use count, class and last use, so that an evicted block that returns
//             keeps its history and its return is observed. Reuse distances in the Mooncake
//             conversation trace reach about 5 pool turnovers at 5,860 blocks; 8 covers them.
// The parameters are properties of the estimator (prior weight, averaging windows, history length,
// the log2 bucketing), not fitted to one trace; docs/kvctl.md ("Eviction") gives the figures on the
// Mooncake trace and on synthetic workloads of other shapes.
//
// What it does with the replay's old position rules, from observation alone: a request's partial
// last block is a leaf at release that (in the Mooncake trace) is almost never reused, so its class
// learns p ≈ 0.01 and it goes first; a shared system prompt is reused by every request and keeps a
// high p; where those patterns do not hold, nothing is inferred.
//
// A parent never goes before its cached children: the block cache only inserts leaves.
//
// State: per entry 40 bytes (indexed by entry, grows to the largest entry), the 144-class table,
// and the ghost — all bounded by the entry space and the capacity. Deterministic: the same calls
// give the same order.
//
// Thread safety: externally synchronised.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "pool/entry_heap.h"
#include "pool/eviction_policy.h"
#include "pool/ghost_table.h"

namespace kvmesh {

class LearnedPolicy final : public EvictionPolicy {
 public:
  static constexpr int kUseBuckets = 9;    // uses 0..7, 8+
  static constexpr int kDepthBuckets = 8;  // floor(log2(depth + 1)), capped
  static constexpr int kClasses = kUseBuckets * 2 * kDepthBuckets;
  static constexpr double kTauFactor = 2.0;
  static constexpr double kTauAlpha = 1.0 / 1024;
  static constexpr double kPriorWeight = 2.0;
  static constexpr double kMinProbability = 1.0 / 1024;
  static constexpr std::int64_t kHalvingPerCapacity = 16;
  static constexpr std::int64_t kMinHalvingPeriod = 4096;
  static constexpr std::int64_t kGhostPerCapacity = 8;
  static constexpr std::int64_t kMaxGhostEntries = std::int64_t{1} << 22;

  explicit LearnedPolicy(const EvictionPolicyOptions& options);

  [[nodiscard]] EvictionPolicyKind kind() const override { return EvictionPolicyKind::kLearned; }
  void Insert(EvictionEntry entry, int priority, std::uint64_t last_use) override;
  void Erase(EvictionEntry entry) override { heap_.Erase(entry); }
  void SetPriority(EvictionEntry entry, int priority) override;
  [[nodiscard]] bool Contains(EvictionEntry entry) const override { return heap_.Contains(entry); }
  [[nodiscard]] std::optional<EvictionEntry> Victim() const override { return heap_.Top(); }
  [[nodiscard]] std::size_t size() const override { return heap_.size(); }

  void OnAdmit(EvictionEntry entry, std::uint64_t fingerprint, std::int32_t depth) override;
  void OnAcquire(EvictionEntry entry) override;
  void OnRelease(EvictionEntry entry, std::uint64_t stamp, bool leaf) override;
  void OnRetire(EvictionEntry entry) override;

  // ---- What it has learned (tests, benchmarks).
  static int ClassOf(std::uint32_t uses, bool leaf, std::int32_t depth);
  // p(class) as the score uses it now.
  [[nodiscard]] double ReuseProbability(int cls) const;
  // tau as the score uses it (kTauFactor included), in use stamps.
  [[nodiscard]] double tau() const { return kTauFactor * tau_; }
  [[nodiscard]] std::size_t ghost_entries() const { return ghost_.size(); }
  [[nodiscard]] std::uint64_t observed_reuses() const { return observed_reuses_; }

 private:
  struct Key {
    std::uint64_t hi;  // priority << 57 | biased score
    std::uint64_t lo;  // last_use
    friend bool operator<(const Key& a, const Key& b) {
      return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
    }
  };
  struct EntryState {
    std::uint64_t fingerprint = 0;
    std::uint64_t stamp = 0;  // last release
    std::int64_t score = 0;   // at the last release
    std::uint32_t uses = 0;   // releases seen (with the ghost's history), capped
    std::int32_t depth = 0;
    std::uint16_t cls = 0;  // at the last release
    bool admitted = false;
    bool released = false;  // stamp, score and cls are valid
    bool credited = false;  // the reuse since the last release was counted
  };

  EntryState& State(EvictionEntry entry);
  void Credit(int cls, std::uint64_t last_use);
  [[nodiscard]] std::int64_t Score(int cls, std::uint64_t stamp) const;
  static Key MakeKey(int priority, std::int64_t score, std::uint64_t last_use);

  BasicEntryHeap<Key> heap_;
  std::vector<EntryState> state_;  // [max entry + 1]
  std::array<double, kClasses> releases_{};
  std::array<double, kClasses> reuses_{};
  double total_releases_ = 0;
  double total_reuses_ = 0;
  double tau_;             // mean observed reuse age (stamps), before kTauFactor
  std::uint64_t now_ = 0;  // the largest stamp seen
  std::int64_t halving_period_;
  std::int64_t since_halving_ = 0;
  std::uint64_t observed_reuses_ = 0;
  GhostTable ghost_;
};

}  // namespace kvmesh
