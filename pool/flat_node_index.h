// FlatNodeIndex: an open-addressing hash index from a 64-bit hash to prefix-tree node indices.
//
// Several nodes may share a hash; lookups give every candidate to a predicate that compares the
// full key, so the index never decides identity. Linear probing with backward-shift deletion (no
// tombstones), power-of-two capacity, load factor at most 1/2. Insert and Erase are amortised
// O(1) and allocate only when the table grows.
//
// Used by pool/ (prefix tree, ghost table) and store/ (slot_map.h, the host tier). Thread safety:
// externally synchronised.
#pragma once

#include <cstdint>
#include <vector>

#include "common/check.h"

namespace kvmesh {

class FlatNodeIndex {
 public:
  static constexpr std::uint32_t kEmpty = 0xFFFFFFFFu;

  FlatNodeIndex() : slots_(16) {}

  [[nodiscard]] std::size_t size() const { return size_; }

  // The first node with this hash for which match(node) is true, or kEmpty.
  template <typename Match>
  std::uint32_t Find(std::uint64_t hash, Match&& match) const {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.node == kEmpty) return kEmpty;
      if (s.hash == hash && match(s.node)) return s.node;
    }
  }

  void Insert(std::uint64_t hash, std::uint32_t node) {
    KVMESH_DCHECK(node != kEmpty);
    if (2 * (size_ + 1) > slots_.size()) Grow();
    Place(hash, node);
    ++size_;
  }

  // REQUIRES: (hash, node) was inserted.
  void Erase(std::uint64_t hash, std::uint32_t node) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash & mask;
    while (!(slots_[i].node == node && slots_[i].hash == hash)) {
      KVMESH_CHECK(slots_[i].node != kEmpty) << "erasing node " << node << " not in the index";
      i = (i + 1) & mask;
    }
    // Backward shift: move later members of the probe run into the hole when their home slot
    // does not lie cyclically in (hole, their slot].
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask; slots_[j].node != kEmpty; j = (j + 1) & mask) {
      const std::size_t home = slots_[j].hash & mask;
      const bool home_in_range =
          hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!home_in_range) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t node = kEmpty;
  };

  void Place(std::uint64_t hash, std::uint32_t node) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash & mask;
    while (slots_[i].node != kEmpty) i = (i + 1) & mask;
    slots_[i] = Slot{hash, node};
  }

  void Grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.node != kEmpty) Place(s.hash, s.node);
    }
  }

  std::vector<Slot> slots_;  // power-of-two size
  std::size_t size_ = 0;
};

}  // namespace kvmesh
