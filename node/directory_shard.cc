#include "node/directory_shard.h"

#include <algorithm>
#include <cstring>

namespace kvmesh {

std::uint64_t NodeIdHash(std::string_view node_id) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (const char c : node_id) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint64_t RendezvousScore(const ContentId& id, std::uint64_t node_hash) {
  std::uint64_t x = 0;
  std::memcpy(&x, id.bytes.data(), sizeof(x));
  x ^= node_hash;
  // splitmix64's finaliser: every input bit reaches every output bit.
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

HomeRing::HomeRing(std::vector<std::string> members) : ids_(std::move(members)) {
  std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
  hashes_.reserve(ids_.size());
  for (const std::string& id : ids_) hashes_.push_back(NodeIdHash(id));
}

const std::string& HomeRing::HomeOf(const ContentId& id) const {
  std::size_t best = 0;
  std::uint64_t best_score = 0;
  for (std::size_t i = 0; i < ids_.size(); ++i) {
    const std::uint64_t s = RendezvousScore(id, hashes_[i]);
    if (i == 0 || s > best_score) {
      best = i;
      best_score = s;
    }
  }
  return ids_[best];
}

void DirectoryShard::Apply(const std::string& node_id, const std::vector<HoldingUpdate>& updates) {
  std::lock_guard lock(mu_);
  for (const HoldingUpdate& u : updates) {
    if (u.removed) {
      auto it = entries_.find(u.id);
      if (it == entries_.end()) continue;
      it->second.erase(node_id);
      if (it->second.empty()) entries_.erase(it);
    } else {
      entries_[u.id][node_id] = u.tier;
    }
  }
}

void DirectoryShard::DropNode(const std::string& node_id) {
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it->second.erase(node_id);
    it = it->second.empty() ? entries_.erase(it) : std::next(it);
  }
}

std::size_t DirectoryShard::DropNotHomedAt(const HomeRing& ring, const std::string& self) {
  std::lock_guard lock(mu_);
  std::size_t dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (ring.empty() || ring.HomeOf(it->first) != self) {
      it = entries_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

std::vector<BlockHolder> DirectoryShard::Holders(const ContentId& id) const {
  std::vector<BlockHolder> out;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return out;
    for (const auto& [node, tier] : it->second) out.push_back({node, tier});
  }
  std::stable_sort(out.begin(), out.end(), [](const BlockHolder& a, const BlockHolder& b) {
    return static_cast<int>(a.tier) < static_cast<int>(b.tier);
  });
  return out;
}

std::size_t DirectoryShard::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

std::optional<HolderTier> Holdings::Best(const State& s) {
  if (s.primary_pools != 0) return HolderTier::kPool;
  if (s.host) return HolderTier::kHost;
  if (s.disk) return HolderTier::kDisk;
  return std::nullopt;
}

std::vector<HoldingUpdate> Holdings::Apply(const std::vector<KvEvent>& events) {
  std::lock_guard lock(mu_);
  // The best tier of each touched id before the batch, to report only real changes.
  std::unordered_map<ContentId, std::optional<HolderTier>, ContentIdHash> before;
  std::vector<ContentId> order;
  for (const KvEvent& e : events) {
    State& s = held_[e.content_id];
    if (before.emplace(e.content_id, Best(s)).second) order.push_back(e.content_id);
    ApplyOne(e, s);
  }
  std::vector<HoldingUpdate> out;
  for (const ContentId& id : order) {
    auto it = held_.find(id);
    const std::optional<HolderTier> now = Best(it->second);
    if (!now) held_.erase(it);
    if (now == before[id]) continue;
    out.push_back(now ? HoldingUpdate{id, false, *now}
                      : HoldingUpdate{id, true, HolderTier::kPool});
  }
  return out;
}

std::vector<HoldingUpdate> Holdings::Replace(const std::vector<KvEvent>& snapshot) {
  std::unordered_map<ContentId, State, ContentIdHash> now;
  now.reserve(snapshot.size());
  for (const KvEvent& e : snapshot) ApplyOne(e, now[e.content_id]);
  std::lock_guard lock(mu_);
  std::vector<HoldingUpdate> out;
  for (const auto& [id, s] : held_) {
    const std::optional<HolderTier> was = Best(s);
    auto it = now.find(id);
    const std::optional<HolderTier> is = it == now.end() ? std::nullopt : Best(it->second);
    if (was == is) continue;
    out.push_back(is ? HoldingUpdate{id, false, *is} : HoldingUpdate{id, true, HolderTier::kPool});
  }
  for (auto it = now.begin(); it != now.end();) {
    const std::optional<HolderTier> is = Best(it->second);
    if (!is) {
      it = now.erase(it);
      continue;
    }
    if (!held_.contains(it->first)) out.push_back({it->first, false, *is});
    ++it;
  }
  held_ = std::move(now);
  return out;
}

void Holdings::ApplyOne(const KvEvent& e, State& s) {
  const int bit = std::clamp(e.pool.value, 0, kTrackedPools - 1);
  switch (e.type) {
    case KvEventType::kStored: s.primary_pools |= std::uint64_t{1} << bit; break;
    case KvEventType::kRemoved: s.primary_pools &= ~(std::uint64_t{1} << bit); break;
    case KvEventType::kTierChanged:
      if (e.previous_tier == KvTier::kHost) s.host = false;
      if (e.previous_tier == KvTier::kDisk) s.disk = false;
      if (e.tier == KvTier::kHost) s.host = true;
      if (e.tier == KvTier::kDisk) s.disk = true;
      break;
  }
}

std::size_t Holdings::size() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

std::vector<HoldingUpdate> Holdings::All() const {
  std::lock_guard lock(mu_);
  std::vector<HoldingUpdate> out;
  out.reserve(held_.size());
  for (const auto& [id, s] : held_) {
    if (std::optional<HolderTier> t = Best(s)) out.push_back({id, false, *t});
  }
  return out;
}

}  // namespace kvmesh
