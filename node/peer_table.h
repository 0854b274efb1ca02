// PeerTable: the other kvnodes this node knows — who they are, where their control plane listens,
// their UCX worker address and what they hold — shared by the cluster pieces of node/: membership
// (static list or etcd) writes it; the prefix directory, remote prefix fetch and the
// prefill → decode handoff read it.
//
//   writer   Membership (a static `cluster.peers` list, or etcd leases): Upsert when a member is
//            seen or changes, Remove when it leaves or its lease lapses.
//   readers  Snapshot() for a consistent view; Subscribe() for changes (called after each change,
//            outside the table's lock, in the writer's thread; must not block).
//
// A PeerInfo is what a member advertises about itself; nothing in it is trusted for memory
// access: the control plane authenticates a peer before any UCX address is used, and every block
// received is verified (bundle checksum bound to content id and geometry).
//
// Thread safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_annotations.h"

namespace kvmesh {

enum class NodeRole : std::uint8_t { kMixed = 0, kPrefill = 1, kDecode = 2, kCache = 3 };

struct PeerInfo {
  std::string node_id;                 // unique in the cluster (NodeConfig::node_id)
  std::string control_address;         // "host:port" of its TCP control plane
  std::vector<std::byte> ucx_address;  // its TransferEngine's worker address; empty: none yet
  NodeRole role = NodeRole::kMixed;
  std::string namespace_digest_hex;  // its block namespace: only equal namespaces share blocks
  std::uint64_t incarnation = 0;     // changes when the node restarts (e.g. its etcd lease id)
  friend bool operator==(const PeerInfo&, const PeerInfo&) = default;
};

class PeerTable {
 public:
  using Listener = std::function<void(const std::vector<PeerInfo>& members)>;

  explicit PeerTable(std::string self_id) : self_id_(std::move(self_id)) {}

  [[nodiscard]] const std::string& self_id() const { return self_id_; }

  // Adds or replaces the member `info.node_id` (not this node itself: ignored).
  void Upsert(PeerInfo info) KVMESH_EXCLUDES(mu_);
  void Remove(const std::string& node_id) KVMESH_EXCLUDES(mu_);
  // Replaces every member at once (a full listing from the membership source).
  void ReplaceAll(std::vector<PeerInfo> members) KVMESH_EXCLUDES(mu_);

  // Every member but this node, sorted by node id.
  [[nodiscard]] std::vector<PeerInfo> Snapshot() const KVMESH_EXCLUDES(mu_);
  [[nodiscard]] std::shared_ptr<const PeerInfo> Find(const std::string& node_id) const
      KVMESH_EXCLUDES(mu_);
  // `listener` is called with the new member list after every change, for the table's lifetime.
  void Subscribe(Listener listener) KVMESH_EXCLUDES(mu_);

 private:
  void Notify() KVMESH_EXCLUDES(mu_);

  const std::string self_id_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const PeerInfo>> members_ KVMESH_GUARDED_BY(mu_);
  std::vector<Listener> listeners_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
