// EvictionPolicy: orders the evictable entries of a cache and names the next victim.
//
// An entry is a small dense integer chosen by the caller (the block manager uses prefix-tree node
// indices, the host tier its slot indices). The caller inserts an entry when it becomes evictable
// and erases it when it stops being evictable (pinned, freed, no longer a leaf); the policy never
// decides evictability, only order. Each entry carries a priority (0..100) and a last-use stamp: a
// logical time, larger is more recent, unique per caller (ties never happen).
//
//   PriorityLruPolicy ("priority-lru"): lowest priority first; within a priority the least
//                                recently used first. Key = (priority, last_use).
//   LruPolicy ("lru"):           least recently used first; priorities are ignored.
//   LearnedPolicy ("learned", the default, learned_policy.h): lowest priority first, exactly as
//                                priority-lru; within a priority, recency combined with the reuse
//                                the cache has observed for items like this one (their reuse
//                                count, whether they were a leaf, their depth). Never reorders
//                                priorities.
//
// Priorities are the user's word (an engine's retention ranges): every policy but lru honours them
// exactly. What a policy infers on its own it infers from what the cache observes — the
// notifications below — never from where a block sits in a request.
//
// Observations (OnAdmit, OnAcquire, OnRelease, OnRetire): the caller reports every item's life —
// admitted (stored), a use begins (pinned from 0 pins), a use ends (unpinned to 0, with the stamp
// a following Insert passes), retired (left the cache). The LRU policies ignore them; the learned
// policy learns from them. They are independent of Insert/Erase: an interior tree node is used and
// released without ever being a candidate.
//
// Cost: every policy keeps an indexed 4-ary min-heap (entry_heap.h): Insert, Erase and
// SetPriority are O(log n), Victim is O(1); the observations are O(1). No operation allocates once
// the vectors have grown; the learned policy's state is bounded (learned_policy.h). An entry may be
// re-inserted with an old stamp (a parent node that becomes a leaf again), so the order is by
// stamp, not by insertion.
//
// Thread safety: externally synchronised (the block manager calls it under its mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "common/result.h"
#include "pool/entry_heap.h"

namespace kvmesh {

inline constexpr int kMinPriority = 0;
inline constexpr int kMaxPriority = 100;
inline constexpr int kDefaultPriority = 35;

enum class EvictionPolicyKind : std::uint8_t { kPriorityLru = 0, kLru = 1, kLearned = 2 };

// What a cache uses when its configuration names none (the coming kvnode `eviction_policy` key,
// `kvctl replay`): the learned policy, which honours priorities exactly like priority-lru and
// was never more than 0.005 below lru in any measured workload (docs/kvctl.md, "Eviction").
inline constexpr EvictionPolicyKind kDefaultEvictionPolicy = EvictionPolicyKind::kLearned;

// "priority-lru", "lru", "learned".
std::string_view EvictionPolicyName(EvictionPolicyKind kind);
// Accepts the names above (case-insensitive); kInvalidArgument naming them otherwise.
Result<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name);
// Every kind: lru, priority-lru, learned.
std::span<const EvictionPolicyKind> AllEvictionPolicies();

struct EvictionPolicyOptions {
  // Items the cache holds when full (its blocks or slots); 0 when unbounded. Sizes the learned
  // policy's history of retired items and its learning horizon.
  std::int64_t capacity = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  [[nodiscard]] virtual EvictionPolicyKind kind() const = 0;

  // REQUIRES: !Contains(entry); kMinPriority <= priority <= kMaxPriority; last_use < 2^56.
  virtual void Insert(EvictionEntry entry, int priority, std::uint64_t last_use) = 0;
  // REQUIRES: Contains(entry).
  virtual void Erase(EvictionEntry entry) = 0;
  // Changes the priority, keeping the stamp. REQUIRES: Contains(entry).
  virtual void SetPriority(EvictionEntry entry, int priority) = 0;

  [[nodiscard]] virtual bool Contains(EvictionEntry entry) const = 0;
  // The entry to evict next (not removed), or nullopt when empty.
  [[nodiscard]] virtual std::optional<EvictionEntry> Victim() const = 0;
  [[nodiscard]] virtual std::size_t size() const = 0;

  // ---- Observations (see the header comment); no-ops for the LRU policies.
  // The entry names a newly cached item. `fingerprint` names its content across evictions (the
  // first 8 bytes of a content id); `depth` is its block index in its prompts (0 outside a tree).
  // REQUIRES: the entry is not admitted.
  virtual void OnAdmit(EvictionEntry /*entry*/, std::uint64_t /*fingerprint*/,
                       std::int32_t /*depth*/) {}
  // A use of an admitted item begins (its pins went from 0 to 1); not called for the use that
  // admitted it.
  virtual void OnAcquire(EvictionEntry /*entry*/) {}
  // A use ended at `stamp` (the last_use a following Insert passes). `leaf`: the item had no
  // cached children then (always true outside a tree).
  virtual void OnRelease(EvictionEntry /*entry*/, std::uint64_t /*stamp*/, bool /*leaf*/) {}
  // The item left the cache (evicted, claimed or erased). REQUIRES: !Contains(entry).
  virtual void OnRetire(EvictionEntry /*entry*/) {}
};

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind,
                                                   const EvictionPolicyOptions& options = {});

class PriorityLruPolicy final : public EvictionPolicy {
 public:
  [[nodiscard]] EvictionPolicyKind kind() const override {
    return EvictionPolicyKind::kPriorityLru;
  }
  void Insert(EvictionEntry entry, int priority, std::uint64_t last_use) override;
  void Erase(EvictionEntry entry) override { heap_.Erase(entry); }
  void SetPriority(EvictionEntry entry, int priority) override;
  [[nodiscard]] bool Contains(EvictionEntry entry) const override { return heap_.Contains(entry); }
  [[nodiscard]] std::optional<EvictionEntry> Victim() const override { return heap_.Top(); }
  [[nodiscard]] std::size_t size() const override { return heap_.size(); }

 private:
  EntryHeap heap_;
};

class LruPolicy final : public EvictionPolicy {
 public:
  [[nodiscard]] EvictionPolicyKind kind() const override { return EvictionPolicyKind::kLru; }
  void Insert(EvictionEntry entry, int priority, std::uint64_t last_use) override;
  void Erase(EvictionEntry entry) override { heap_.Erase(entry); }
  void SetPriority(EvictionEntry, int) override {}
  [[nodiscard]] bool Contains(EvictionEntry entry) const override { return heap_.Contains(entry); }
  [[nodiscard]] std::optional<EvictionEntry> Victim() const override { return heap_.Top(); }
  [[nodiscard]] std::size_t size() const override { return heap_.size(); }

 private:
  EntryHeap heap_;
};

}  // namespace kvmesh
