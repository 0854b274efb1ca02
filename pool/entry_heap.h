// EntryHeap: an indexed 4-ary min-heap of (key, entry) in flat vectors, the base of every eviction
// policy (eviction_policy.h). Entries are small dense integers; the position index grows to the
// largest entry seen. Push, Erase and SetKey are O(log n), Top is O(1), and nothing allocates once
// the vectors have grown. Keys are compared with operator<; equal keys are allowed (their order
// is then unspecified, so callers that need a total order put a tie-breaker in the key).
//
// Internal to pool/. Thread safety: externally synchronised.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/check.h"

namespace kvmesh {

using EvictionEntry = std::uint32_t;

template <typename Key>
class BasicEntryHeap {
 public:
  [[nodiscard]] bool Contains(EvictionEntry entry) const {
    return entry < pos_.size() && pos_[entry] != kAbsent;
  }
  void Push(EvictionEntry entry, const Key& key) {
    KVMESH_DCHECK(!Contains(entry)) << "entry " << entry << " already in the heap";
    if (entry >= pos_.size()) {
      pos_.resize(std::max<std::size_t>(entry + 1, pos_.size() * 2), kAbsent);
    }
    items_.push_back({key, entry});
    pos_[entry] = static_cast<std::uint32_t>(items_.size() - 1);
    SiftUp(items_.size() - 1);
  }
  void Erase(EvictionEntry entry) {
    KVMESH_DCHECK(Contains(entry)) << "entry " << entry << " not in the heap";
    const std::size_t i = pos_[entry];
    pos_[entry] = kAbsent;
    const Item last = items_.back();
    items_.pop_back();
    if (i == items_.size()) return;
    Place(i, last);
    SiftUp(i);
    SiftDown(pos_[last.entry]);
  }
  // REQUIRES: Contains(entry).
  void SetKey(EvictionEntry entry, const Key& key) {
    const std::size_t i = pos_[entry];
    const bool smaller = key < items_[i].key;
    items_[i].key = key;
    if (smaller) {
      SiftUp(i);
    } else {
      SiftDown(i);
    }
  }
  // REQUIRES: Contains(entry).
  [[nodiscard]] const Key& KeyOf(EvictionEntry entry) const { return items_[pos_[entry]].key; }
  [[nodiscard]] std::optional<EvictionEntry> Top() const {
    if (items_.empty()) return std::nullopt;
    return items_.front().entry;
  }
  [[nodiscard]] std::size_t size() const { return items_.size(); }

 private:
  static constexpr std::uint32_t kAbsent = 0xFFFFFFFFu;
  static constexpr std::size_t kArity = 4;
  struct Item {
    Key key;
    EvictionEntry entry;
  };
  void Place(std::size_t i, const Item& item) {
    items_[i] = item;
    pos_[item.entry] = static_cast<std::uint32_t>(i);
  }
  void SiftUp(std::size_t i) {
    const Item item = items_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (!(item.key < items_[parent].key)) break;
      Place(i, items_[parent]);
      i = parent;
    }
    Place(i, item);
  }
  void SiftDown(std::size_t i) {
    const Item item = items_[i];
    const std::size_t n = items_.size();
    while (true) {
      const std::size_t first = i * kArity + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t last = std::min(first + kArity, n);
      for (std::size_t c = first + 1; c < last; ++c) {
        if (items_[c].key < items_[best].key) best = c;
      }
      if (!(items_[best].key < item.key)) break;
      Place(i, items_[best]);
      i = best;
    }
    Place(i, item);
  }

  std::vector<Item> items_;
  std::vector<std::uint32_t> pos_;  // [max entry + 1]: index in items_, or kAbsent
};

using EntryHeap = BasicEntryHeap<std::uint64_t>;

}  // namespace kvmesh
