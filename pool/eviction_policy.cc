#include "pool/eviction_policy.h"

#include <algorithm>

#include "common/check.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

constexpr int kStampBits = 56;
constexpr std::uint64_t kStampMask = (std::uint64_t{1} << kStampBits) - 1;
constexpr std::size_t kArity = 4;

std::uint64_t PriorityKey(int priority, std::uint64_t stamp) {
  return (static_cast<std::uint64_t>(priority) << kStampBits) | stamp;
}

}  // namespace

std::string_view EvictionPolicyName(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kPriorityLru: return "priority-lru";
    case EvictionPolicyKind::kLru: return "lru";
  }
  return "unknown";
}

Result<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  const std::string lower = AsciiLower(name);
  if (lower == "priority-lru") return EvictionPolicyKind::kPriorityLru;
  if (lower == "lru") return EvictionPolicyKind::kLru;
  return Status::InvalidArgument(
      StrCat("eviction policy '", name, "' is not one of priority-lru, lru"));
}

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kPriorityLru: return std::make_unique<PriorityLruPolicy>();
    case EvictionPolicyKind::kLru: return std::make_unique<LruPolicy>();
  }
  KVMESH_CHECK(false) << "unknown eviction policy " << static_cast<int>(kind);
  return nullptr;
}

void EntryHeap::Push(EvictionEntry entry, std::uint64_t key) {
  KVMESH_DCHECK(!Contains(entry)) << "entry " << entry << " already in the heap";
  if (entry >= pos_.size()) pos_.resize(std::max<std::size_t>(entry + 1, pos_.size() * 2), kAbsent);
  items_.push_back({key, entry});
  pos_[entry] = static_cast<std::uint32_t>(items_.size() - 1);
  SiftUp(items_.size() - 1);
}

void EntryHeap::Erase(EvictionEntry entry) {
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

void EntryHeap::SetKey(EvictionEntry entry, std::uint64_t key) {
  const std::size_t i = pos_[entry];
  const std::uint64_t old = items_[i].key;
  items_[i].key = key;
  if (key < old) {
    SiftUp(i);
  } else {
    SiftDown(i);
  }
}

void EntryHeap::SiftUp(std::size_t i) {
  const Item item = items_[i];
  while (i > 0) {
    const std::size_t parent = (i - 1) / kArity;
    if (items_[parent].key <= item.key) break;
    Place(i, items_[parent]);
    i = parent;
  }
  Place(i, item);
}

void EntryHeap::SiftDown(std::size_t i) {
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
    if (items_[best].key >= item.key) break;
    Place(i, items_[best]);
    i = best;
  }
  Place(i, item);
}

void PriorityLruPolicy::Insert(EvictionEntry entry, int priority, std::uint64_t last_use) {
  KVMESH_DCHECK(priority >= kMinPriority && priority <= kMaxPriority) << priority;
  KVMESH_DCHECK(last_use <= kStampMask) << last_use;
  heap_.Push(entry, PriorityKey(priority, last_use));
}

void PriorityLruPolicy::SetPriority(EvictionEntry entry, int priority) {
  KVMESH_DCHECK(priority >= kMinPriority && priority <= kMaxPriority) << priority;
  heap_.SetKey(entry, PriorityKey(priority, heap_.Key(entry) & kStampMask));
}

void LruPolicy::Insert(EvictionEntry entry, int /*priority*/, std::uint64_t last_use) {
  heap_.Push(entry, last_use);
}

}  // namespace kvmesh
