#include "pool/eviction_policy.h"

#include <array>

#include "common/check.h"
#include "common/strings.h"
#include "pool/learned_policy.h"

namespace kvmesh {
namespace {

constexpr int kStampBits = 56;
constexpr std::uint64_t kStampMask = (std::uint64_t{1} << kStampBits) - 1;

std::uint64_t PriorityKey(int priority, std::uint64_t stamp) {
  return (static_cast<std::uint64_t>(priority) << kStampBits) | stamp;
}

constexpr std::array<EvictionPolicyKind, 3> kAllPolicies = {
    EvictionPolicyKind::kLru, EvictionPolicyKind::kPriorityLru, EvictionPolicyKind::kLearned};

}  // namespace

std::string_view EvictionPolicyName(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kPriorityLru: return "priority-lru";
    case EvictionPolicyKind::kLru: return "lru";
    case EvictionPolicyKind::kLearned: return "learned";
  }
  return "unknown";
}

Result<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  const std::string lower = AsciiLower(name);
  for (EvictionPolicyKind kind : kAllPolicies) {
    if (lower == EvictionPolicyName(kind)) return kind;
  }
  return Status::InvalidArgument(
      StrCat("eviction policy '", name, "' is not one of lru, priority-lru, learned"));
}

std::span<const EvictionPolicyKind> AllEvictionPolicies() { return kAllPolicies; }

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind,
                                                   const EvictionPolicyOptions& options) {
  switch (kind) {
    case EvictionPolicyKind::kPriorityLru: return std::make_unique<PriorityLruPolicy>();
    case EvictionPolicyKind::kLru: return std::make_unique<LruPolicy>();
    case EvictionPolicyKind::kLearned: return std::make_unique<LearnedPolicy>(options);
  }
  KVMESH_CHECK(false) << "unknown eviction policy " << static_cast<int>(kind);
  return nullptr;
}

void PriorityLruPolicy::Insert(EvictionEntry entry, int priority, std::uint64_t last_use) {
  KVMESH_DCHECK(priority >= kMinPriority && priority <= kMaxPriority) << priority;
  KVMESH_DCHECK(last_use <= kStampMask) << last_use;
  heap_.Push(entry, PriorityKey(priority, last_use));
}

void PriorityLruPolicy::SetPriority(EvictionEntry entry, int priority) {
  KVMESH_DCHECK(priority >= kMinPriority && priority <= kMaxPriority) << priority;
  heap_.SetKey(entry, PriorityKey(priority, heap_.KeyOf(entry) & kStampMask));
}

void LruPolicy::Insert(EvictionEntry entry, int /*priority*/, std::uint64_t last_use) {
  heap_.Push(entry, last_use);
}

}  // namespace kvmesh
