#include "pool/learned_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/check.h"

namespace kvmesh {
namespace {

constexpr int kScoreBits = 57;
constexpr std::uint64_t kScoreMask = (std::uint64_t{1} << kScoreBits) - 1;
constexpr std::int64_t kScoreBias = std::int64_t{1} << 56;  // last_use < 2^56, scores below it

std::int64_t Capacity(const EvictionPolicyOptions& o) {
  return std::max<std::int64_t>(o.capacity, 0);
}

}  // namespace

LearnedPolicy::LearnedPolicy(const EvictionPolicyOptions& options)
    : tau_(static_cast<double>(Capacity(options) > 0 ? Capacity(options) : kMinHalvingPeriod)),
      halving_period_(std::max(kMinHalvingPeriod, kHalvingPerCapacity * Capacity(options))),
      ghost_(static_cast<std::size_t>(
          std::min(kMaxGhostEntries, kGhostPerCapacity * Capacity(options)))) {}

int LearnedPolicy::ClassOf(std::uint32_t uses, bool leaf, std::int32_t depth) {
  const int u = static_cast<int>(std::min<std::uint32_t>(uses, kUseBuckets - 1));
  const auto d1 = static_cast<std::uint32_t>(std::max(depth, 0)) + 1;
  const int d = std::min(static_cast<int>(std::bit_width(d1)) - 1, kDepthBuckets - 1);
  return (u * 2 + (leaf ? 1 : 0)) * kDepthBuckets + d;
}

double LearnedPolicy::ReuseProbability(int cls) const {
  const double pooled = (total_reuses_ + 1.0) / (total_releases_ + 2.0);
  const double p = (reuses_[cls] + kPriorWeight * pooled) / (releases_[cls] + kPriorWeight);
  return std::clamp(p, kMinProbability, 1.0);
}

std::int64_t LearnedPolicy::Score(int cls, std::uint64_t stamp) const {
  const double offset = kTauFactor * tau_ * std::log(ReuseProbability(cls));
  return static_cast<std::int64_t>(stamp) + std::llround(offset);
}

LearnedPolicy::Key LearnedPolicy::MakeKey(int priority, std::int64_t score,
                                          std::uint64_t last_use) {
  const std::int64_t biased =
      std::clamp<std::int64_t>(score + kScoreBias, 0, static_cast<std::int64_t>(kScoreMask));
  return Key{
      (static_cast<std::uint64_t>(priority) << kScoreBits) | static_cast<std::uint64_t>(biased),
      last_use};
}

LearnedPolicy::EntryState& LearnedPolicy::State(EvictionEntry entry) {
  if (entry >= state_.size()) state_.resize(std::max<std::size_t>(entry + 1, state_.size() * 2));
  return state_[entry];
}

void LearnedPolicy::Insert(EvictionEntry entry, int priority, std::uint64_t last_use) {
  KVMESH_DCHECK(priority >= kMinPriority && priority <= kMaxPriority) << priority;
  KVMESH_DCHECK(last_use < (std::uint64_t{1} << 56)) << last_use;
  now_ = std::max(now_, last_use);
  const EntryState& s = State(entry);
  // An entry released at this stamp has its score; one the caller never reported gets the score
  // of an item of its use count seen nowhere else.
  const std::int64_t score =
      s.released && s.stamp == last_use ? s.score : Score(ClassOf(s.uses, true, s.depth), last_use);
  heap_.Push(entry, MakeKey(priority, score, last_use));
}

void LearnedPolicy::SetPriority(EvictionEntry entry, int priority) {
  KVMESH_DCHECK(priority >= kMinPriority && priority <= kMaxPriority) << priority;
  const Key old = heap_.KeyOf(entry);
  heap_.SetKey(
      entry,
      Key{(static_cast<std::uint64_t>(priority) << kScoreBits) | (old.hi & kScoreMask), old.lo});
}

void LearnedPolicy::Credit(int cls, std::uint64_t last_use) {
  reuses_[cls] += 1;
  total_reuses_ += 1;
  ++observed_reuses_;
  const double age = static_cast<double>(now_ >= last_use ? now_ - last_use : 0);
  tau_ += (age - tau_) * kTauAlpha;
}

void LearnedPolicy::OnAdmit(EvictionEntry entry, std::uint64_t fingerprint, std::int32_t depth) {
  EntryState& s = State(entry);
  s = EntryState{};
  s.fingerprint = fingerprint;
  s.depth = depth;
  s.admitted = true;
  if (std::optional<GhostTable::Entry> g = ghost_.Take(fingerprint)) {
    s.uses = g->uses;  // the block came back: its history still counts, and so does its return
    Credit(g->cls, g->stamp);
  }
}

void LearnedPolicy::OnAcquire(EvictionEntry entry) {
  EntryState& s = State(entry);
  if (!s.released || s.credited) return;
  s.credited = true;
  Credit(s.cls, s.stamp);
}

void LearnedPolicy::OnRelease(EvictionEntry entry, std::uint64_t stamp, bool leaf) {
  EntryState& s = State(entry);
  s.admitted = true;  // a caller that skipped OnAdmit: an item without history
  now_ = std::max(now_, stamp);
  const int cls = ClassOf(s.uses, leaf, s.depth);
  releases_[cls] += 1;
  total_releases_ += 1;
  s.cls = static_cast<std::uint16_t>(cls);
  s.stamp = stamp;
  s.score = Score(cls, stamp);
  s.released = true;
  s.credited = false;
  if (s.uses < kUseBuckets) ++s.uses;
  if (++since_halving_ >= halving_period_) {
    since_halving_ = 0;
    for (double& r : releases_) r *= 0.5;
    for (double& r : reuses_) r *= 0.5;
    total_releases_ *= 0.5;
    total_reuses_ *= 0.5;
  }
}

void LearnedPolicy::OnRetire(EvictionEntry entry) {
  KVMESH_DCHECK(!heap_.Contains(entry)) << "retiring entry " << entry << " still evictable";
  EntryState& s = State(entry);
  if (s.released) {
    ghost_.Insert(GhostTable::Entry{s.fingerprint, s.stamp, s.uses, s.cls});
  }
  s = EntryState{};
}

}  // namespace kvmesh
