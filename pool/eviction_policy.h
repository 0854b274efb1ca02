// EvictionPolicy: orders the evictable entries of the block manager and names the next victim.
//
// An entry is a small dense integer chosen by the caller (the block manager uses prefix-tree node
// indices). The caller inserts an entry when it becomes evictable and erases it when it stops
// being evictable (pinned, freed, no longer a leaf); the policy never decides evictability, only
// order. Each entry carries a priority (0..100) and a last-use stamp: a logical time, larger is
// more recent, unique per caller (ties never happen).
//
//   PriorityLruPolicy (default): lowest priority first; within a priority the least recently used
//                                first. Key = (priority, last_use).
//   LruPolicy:                   least recently used first; priorities are ignored.
//
// Both are an indexed 4-ary min-heap in flat vectors: Insert, Erase and SetPriority are
// O(log n), Victim is O(1), and no operation allocates once the vectors have grown (the position
// index grows to the largest entry id seen). An entry may be re-inserted with an old stamp (a
// parent node that becomes a leaf again), so the order is by stamp, not by insertion.
//
// Thread safety: externally synchronised (the block manager calls it under its mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvmesh {

inline constexpr int kMinPriority = 0;
inline constexpr int kMaxPriority = 100;
inline constexpr int kDefaultPriority = 35;

enum class EvictionPolicyKind : std::uint8_t { kPriorityLru = 0, kLru = 1 };

// "priority-lru", "lru".
std::string_view EvictionPolicyName(EvictionPolicyKind kind);
// Accepts the names above (case-insensitive); kInvalidArgument otherwise.
Result<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name);

using EvictionEntry = std::uint32_t;

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
};

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind);

// An indexed 4-ary min-heap of (key, entry); the base of both policies.
class EntryHeap {
 public:
  [[nodiscard]] bool Contains(EvictionEntry entry) const {
    return entry < pos_.size() && pos_[entry] != kAbsent;
  }
  void Push(EvictionEntry entry, std::uint64_t key);
  void Erase(EvictionEntry entry);
  void SetKey(EvictionEntry entry, std::uint64_t key);
  [[nodiscard]] std::uint64_t Key(EvictionEntry entry) const { return items_[pos_[entry]].key; }
  [[nodiscard]] std::optional<EvictionEntry> Top() const {
    if (items_.empty()) return std::nullopt;
    return items_.front().entry;
  }
  [[nodiscard]] std::size_t size() const { return items_.size(); }

 private:
  static constexpr std::uint32_t kAbsent = 0xFFFFFFFFu;
  struct Item {
    std::uint64_t key;
    EvictionEntry entry;
  };
  void SiftUp(std::size_t i);
  void SiftDown(std::size_t i);
  void Place(std::size_t i, const Item& item) {
    items_[i] = item;
    pos_[item.entry] = static_cast<std::uint32_t>(i);
  }

  std::vector<Item> items_;
  std::vector<std::uint32_t> pos_;  // [max entry + 1]: index in items_, or kAbsent
};

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
