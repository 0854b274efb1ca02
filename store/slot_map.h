// SlotMap: a hash map whose entries live in one dense vector of slots, found through an
// open-addressing index (pool/flat_node_index.h) — the index of a tier that holds hundreds of
// thousands of blocks and looks one up on every read.
//
// Why not std::unordered_map: its lookup follows a bucket, the node before the first of the bucket
// and then the node (three dependent cache misses into nodes scattered over the heap), and each
// insert allocates. Here a lookup is a probe of the flat index (hash and slot side by side) and
// one read of the slot; inserts allocate only when the vectors grow. Measured on the RocksDB
// tier's 4 KiB reads (bench/rocksdb_tier_bench): the index lookup took 0.7 us of a 10.9 us get.
//
// A slot number names an entry for as long as it is in the map (an eviction order keyed by slot,
// for example); an erased entry's slot is reused by a later insert.
//
// Pointers and references to values are invalidated by Insert (the slot vector may grow); slot
// numbers are not.
//
// Thread safety: externally synchronised.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/check.h"
#include "pool/flat_node_index.h"

namespace kvmesh {

// Hash: std::uint64_t operator()(const K&) const, well mixed in its low bits (the index uses
// them as the home position).
template <typename K, typename V, typename Hash>
class SlotMap {
 public:
  static constexpr std::uint32_t kNone = FlatNodeIndex::kEmpty;

  [[nodiscard]] std::size_t size() const { return index_.size(); }

  // The slot holding `key`, or kNone.
  [[nodiscard]] std::uint32_t Find(const K& key) const {
    return index_.Find(Hash()(key), [&](std::uint32_t s) { return slots_[s].key == key; });
  }
  // The value of `key`, or nullptr.
  [[nodiscard]] V* Get(const K& key) {
    const std::uint32_t s = Find(key);
    return s == kNone ? nullptr : &slots_[s].value;
  }
  [[nodiscard]] const V* Get(const K& key) const {
    const std::uint32_t s = Find(key);
    return s == kNone ? nullptr : &slots_[s].value;
  }

  // Adds `key` with `value`; returns its slot. REQUIRES: Find(key) == kNone.
  std::uint32_t Insert(const K& key, V value) {
    KVMESH_DCHECK(Find(key) == kNone) << "key already in the map";
    std::uint32_t s;
    if (free_.empty()) {
      KVMESH_CHECK_LT(slots_.size(), std::size_t{kNone}) << "slot map full";
      s = static_cast<std::uint32_t>(slots_.size());
      slots_.push_back(Slot{key, std::move(value), true});
    } else {
      s = free_.back();
      free_.pop_back();
      slots_[s] = Slot{key, std::move(value), true};
    }
    index_.Insert(Hash()(key), s);
    return s;
  }

  // Removes the entry in `slot`. REQUIRES: live(slot).
  void Erase(std::uint32_t slot) {
    KVMESH_DCHECK(live(slot)) << "erasing free slot " << slot;
    Slot& s = slots_[slot];
    index_.Erase(Hash()(s.key), slot);
    s.live = false;
    s.value = V{};
    free_.push_back(slot);
  }

  [[nodiscard]] bool live(std::uint32_t slot) const {
    return slot < slots_.size() && slots_[slot].live;
  }
  // REQUIRES: live(slot).
  [[nodiscard]] const K& key(std::uint32_t slot) const { return slots_[slot].key; }
  [[nodiscard]] V& value(std::uint32_t slot) { return slots_[slot].value; }
  [[nodiscard]] const V& value(std::uint32_t slot) const { return slots_[slot].value; }

  // f(key, value) for every entry, in slot order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.live) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    K key;
    V value;
    bool live = false;
  };

  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
  FlatNodeIndex index_;
};

}  // namespace kvmesh
