// GhostTable: a bounded history of items that left a cache, by content fingerprint — what the
// learned eviction policy (learned_policy.h) remembers about an evicted block so that, when the
// block comes back, its earlier reuse still counts and its return is observed.
//
// A ring of at most `capacity` entries in insertion order (the oldest is overwritten when full) and
// an open-addressing index from fingerprint to ring slot (flat_node_index.h). Insert and Take are
// O(1) amortised; memory grows with use up to capacity entries (about 64 bytes each) and no more.
// Fingerprints are 64-bit; two items with one fingerprint share a history entry (harmless: it only
// orders evictions).
//
// Internal to pool/. Thread safety: externally synchronised.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pool/flat_node_index.h"

namespace kvmesh {

class GhostTable {
 public:
  struct Entry {
    std::uint64_t fingerprint = 0;
    std::uint64_t stamp = 0;  // the item's last use
    std::uint32_t uses = 0;   // uses it had seen
    std::uint16_t cls = 0;    // the learned policy's class at its last use
  };

  // capacity 0: remembers nothing.
  explicit GhostTable(std::size_t capacity) : capacity_(capacity) {}

  // Remembers `e` (replacing an entry with the same fingerprint), forgetting the oldest entry when
  // full.
  void Insert(const Entry& e);
  // The entry for `fingerprint`, removed; nullopt when none.
  std::optional<Entry> Take(std::uint64_t fingerprint);

  [[nodiscard]] std::size_t size() const { return index_.size(); }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }

 private:
  struct Slot {
    Entry entry;
    bool live = false;
  };
  static std::uint64_t Hash(std::uint64_t fingerprint);
  [[nodiscard]] std::uint32_t Find(std::uint64_t fingerprint) const;

  std::size_t capacity_;
  std::vector<Slot> ring_;  // [min(inserted, capacity)]
  std::size_t next_ = 0;    // ring slot the next insert writes
  FlatNodeIndex index_;     // Hash(fingerprint) -> ring slot of a live entry
};

}  // namespace kvmesh
