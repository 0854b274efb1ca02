#include "pool/ghost_table.h"

namespace kvmesh {

std::uint64_t GhostTable::Hash(std::uint64_t z) {
  // splitmix64's finaliser: fingerprints from tests (0, 1, 2, ...) spread like digests do.
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint32_t GhostTable::Find(std::uint64_t fingerprint) const {
  return index_.Find(Hash(fingerprint), [&](std::uint32_t slot) {
    return ring_[slot].live && ring_[slot].entry.fingerprint == fingerprint;
  });
}

void GhostTable::Insert(const Entry& e) {
  if (capacity_ == 0) return;
  (void)Take(e.fingerprint);  // at most one entry per fingerprint
  if (ring_.size() < capacity_) {
    ring_.push_back({});
    next_ = ring_.size() - 1;
  }
  Slot& s = ring_[next_];
  if (s.live) index_.Erase(Hash(s.entry.fingerprint), static_cast<std::uint32_t>(next_));
  s.entry = e;
  s.live = true;
  index_.Insert(Hash(e.fingerprint), static_cast<std::uint32_t>(next_));
  next_ = (next_ + 1) % capacity_;
}

std::optional<GhostTable::Entry> GhostTable::Take(std::uint64_t fingerprint) {
  if (index_.size() == 0) return std::nullopt;
  const std::uint32_t slot = Find(fingerprint);
  if (slot == FlatNodeIndex::kEmpty) return std::nullopt;
  Slot& s = ring_[slot];
  index_.Erase(Hash(fingerprint), slot);
  s.live = false;
  return s.entry;
}

}  // namespace kvmesh
