#include "node/peer_table.h"

#include <algorithm>

#include "common/log.h"

namespace kvmesh {

void PeerTable::Upsert(PeerInfo info) {
  if (info.node_id == self_id_) return;
  {
    MutexLock lock(&mu_);
    auto it = members_.find(info.node_id);
    if (it != members_.end() && *it->second == info) return;  // no change
    auto now = std::make_shared<const PeerInfo>(std::move(info));
    Note(it == members_.end() ? nullptr : it->second.get(), now.get());
    // The key first: in `m[k] = f(...)` the right side is evaluated first (C++17).
    const std::string id = now->node_id;
    members_[id] = std::move(now);
  }
  Notify();
}

void PeerTable::Remove(const std::string& node_id) {
  {
    MutexLock lock(&mu_);
    auto it = members_.find(node_id);
    if (it == members_.end()) return;
    Note(it->second.get(), nullptr);
    members_.erase(it);
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
    for (const auto& [id, info] : next) {
      auto was = members_.find(id);
      Note(was == members_.end() ? nullptr : was->second.get(), info.get());
    }
    for (const auto& [id, info] : members_) {
      if (!next.contains(id)) Note(info.get(), nullptr);
    }
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

void PeerTable::SetContact(const std::string& node_id, const std::string& control_address) {
  if (node_id == self_id_) return;
  MutexLock lock(&mu_);
  if (members_.contains(node_id)) return;
  auto it = contacts_.find(node_id);
  if (it != contacts_.end() && it->second->control_address == control_address) return;
  if (it != contacts_.end()) {
    contact_order_.erase(std::find(contact_order_.begin(), contact_order_.end(), node_id));
  } else if (contacts_.size() >= kMaxContacts) {
    contacts_.erase(contact_order_.front());
    contact_order_.pop_front();
  }
  auto info = std::make_shared<PeerInfo>();
  info->node_id = node_id;
  info->control_address = control_address;
  contacts_[node_id] = std::move(info);
  contact_order_.push_back(node_id);
}

std::shared_ptr<const PeerInfo> PeerTable::Resolve(const std::string& node_id) const {
  MutexLock lock(&mu_);
  if (auto it = members_.find(node_id); it != members_.end()) return it->second;
  auto it = contacts_.find(node_id);
  return it == contacts_.end() ? nullptr : it->second;
}

std::size_t PeerTable::contacts() const {
  MutexLock lock(&mu_);
  return contacts_.size();
}

void PeerTable::Subscribe(Listener listener) {
  MutexLock lock(&mu_);
  listeners_.push_back(std::move(listener));
}

void PeerTable::SetHealth(MembershipHealth health) {
  MutexLock lock(&mu_);
  health_ = std::move(health);
}

PeerTableStats PeerTable::stats() const {
  MutexLock lock(&mu_);
  PeerTableStats s;
  s.members = static_cast<std::int64_t>(members_.size());
  s.joined = joined_;
  s.left = left_;
  s.rejoined = rejoined_;
  s.health = health_;
  return s;
}

void PeerTable::Note(const PeerInfo* was, const PeerInfo* now) {
  if (was == nullptr && now != nullptr) {
    ++joined_;
    KVMESH_LOG_INFO("cluster member joined node {} address {} incarnation {}", now->node_id,
                    now->control_address, now->incarnation);
  } else if (was != nullptr && now == nullptr) {
    ++left_;
    KVMESH_LOG_INFO("cluster member left node {} address {}", was->node_id, was->control_address);
  } else if (was != nullptr && was->incarnation != now->incarnation) {
    ++rejoined_;
    KVMESH_LOG_INFO(
        "cluster member rejoined node {} address {} incarnation {} (was {}: it restarted, or its "
        "lease lapsed)",
        now->node_id, now->control_address, now->incarnation, was->incarnation);
  }
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
