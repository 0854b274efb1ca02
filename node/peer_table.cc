#include "node/peer_table.h"

namespace kvmesh {

void PeerTable::Upsert(PeerInfo info) {
  if (info.node_id == self_id_) return;
  {
    MutexLock lock(&mu_);
    auto it = members_.find(info.node_id);
    if (it != members_.end() && *it->second == info) return;  // no change
    // The key first: in `m[k] = f(std::move(info))` the right side is evaluated first (C++17),
    // which would leave the key moved-from (empty).
    const std::string id = info.node_id;
    members_[id] = std::make_shared<const PeerInfo>(std::move(info));
  }
  Notify();
}

void PeerTable::Remove(const std::string& node_id) {
  {
    MutexLock lock(&mu_);
    if (members_.erase(node_id) == 0) return;
  }
  Notify();
}

void PeerTable::ReplaceAll(std::vector<PeerInfo> members) {
  {
    MutexLock lock(&mu_);
    std::map<std::string, std::shared_ptr<const PeerInfo>> next;
    for (PeerInfo& m : members) {
      if (m.node_id == self_id_) continue;
      const std::string id = m.node_id;
      next[id] = std::make_shared<const PeerInfo>(std::move(m));
    }
    bool same = next.size() == members_.size();
    for (auto a = next.begin(), b = members_.begin(); same && a != next.end(); ++a, ++b) {
      same = a->first == b->first && *a->second == *b->second;
    }
    if (same) return;
    members_ = std::move(next);
  }
  Notify();
}

std::vector<PeerInfo> PeerTable::Snapshot() const {
  MutexLock lock(&mu_);
  std::vector<PeerInfo> out;
  out.reserve(members_.size());
  for (const auto& [id, info] : members_) out.push_back(*info);
  return out;
}

std::shared_ptr<const PeerInfo> PeerTable::Find(const std::string& node_id) const {
  MutexLock lock(&mu_);
  auto it = members_.find(node_id);
  return it == members_.end() ? nullptr : it->second;
}

void PeerTable::Subscribe(Listener listener) {
  MutexLock lock(&mu_);
  listeners_.push_back(std::move(listener));
}

void PeerTable::Notify() {
  std::vector<Listener> listeners;
  {
    MutexLock lock(&mu_);
    listeners = listeners_;
  }
  const std::vector<PeerInfo> members = Snapshot();
  for (const Listener& l : listeners) l(members);
}

}  // namespace kvmesh
