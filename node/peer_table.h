// PeerTable: the other kvnodes this node knows — who they are, where their control plane listens,
// their UCX worker address and what they hold — shared by the cluster pieces of node/: membership
// (static list or etcd) writes it; the prefix directory, remote prefix fetch and the
// prefill → decode handoff read it.
//
//   writer   Membership (a static `cluster.peers` list, or etcd leases): Upsert when a member is
//            seen or changes, Remove when it leaves or its lease lapses.
//   readers  Snapshot() for a consistent view; Subscribe() for changes (called after each change,
//            outside the table's lock, in the writer's thread; must not block); stats() for what
//            an operator sees (kvctl status, /metrics): members that joined, left or rejoined,
//            and the health of the membership source, which Membership reports with SetHealth.
//
// Every member that joins, leaves or comes back with a new incarnation is logged (info).
//
// Contacts: nodes outside the membership that this node hands requests off to, or that hand off
// to it (a decode node named with its address in HandOffTo, node/engine_service.h; the prefill node
// of a handoff received, node/handoff.h). SetContact records a contact's control address for peer
// sessions only: a contact is not a member — not in Snapshot, Find, the listeners' lists or the
// counts, so it never changes the directory's homes — and a member of the same id always wins
// (Resolve). At most kMaxContacts are kept; a new one beyond that drops the one set longest ago.
//
// A PeerInfo is what a member advertises about itself; nothing in it is trusted for memory
// access: the control plane authenticates a peer before any UCX address is used, and every block
// received is verified (bundle checksum bound to content id and geometry).
//
// Thread safety: thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

// What the membership source last said about itself (Membership::Start sets the kind; etcd
// membership updates the rest after every step).
struct MembershipHealth {
  std::string kind = "none";  // none, static, etcd
  bool ok = true;             // etcd: its last step succeeded; false: the table keeps its last view
  std::string error;          // while !ok: the failing call's error
  std::int64_t lease = 0;     // etcd: this node's lease (its incarnation); 0: none now
  std::int64_t joins = 0;     // etcd: leases this node was granted (1 + rejoins after a lapse)
  std::int64_t failures = 0;  // etcd: failed steps, each retried with backoff
  // When the member list was last read from the source (static: at start); none yet: nullopt.
  std::optional<std::chrono::steady_clock::time_point> last_view;
};

struct PeerTableStats {
  std::int64_t members = 0;   // other members now (this node not counted)
  std::int64_t joined = 0;    // members that appeared in the table
  std::int64_t left = 0;      // members that went (left, lease lapsed, removed)
  std::int64_t rejoined = 0;  // seen again with a new incarnation (a restart, a lapsed lease)
  MembershipHealth health;
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
  // The member `node_id`; null when it is not one (contacts are not members).
  [[nodiscard]] std::shared_ptr<const PeerInfo> Find(const std::string& node_id) const
      KVMESH_EXCLUDES(mu_);

  static constexpr std::size_t kMaxContacts = 1024;
  // Records (or moves) the contact `node_id` at `control_address`; a member of that id, or this
  // node itself, is left alone (ignored).
  void SetContact(const std::string& node_id, const std::string& control_address)
      KVMESH_EXCLUDES(mu_);
  // Where to reach `node_id` for a peer session: the member, else the contact; null: neither.
  [[nodiscard]] std::shared_ptr<const PeerInfo> Resolve(const std::string& node_id) const
      KVMESH_EXCLUDES(mu_);
  [[nodiscard]] std::size_t contacts() const KVMESH_EXCLUDES(mu_);
  // `listener` is called with the new member list after every change, for the table's lifetime.
  void Subscribe(Listener listener) KVMESH_EXCLUDES(mu_);

  void SetHealth(MembershipHealth health) KVMESH_EXCLUDES(mu_);
  [[nodiscard]] PeerTableStats stats() const KVMESH_EXCLUDES(mu_);

 private:
  // Counts and logs one member's change: joined (no `was`), left (no `now`) or rejoined (a new
  // incarnation); any other change (a UCX address learnt) is not counted.
  void Note(const PeerInfo* was, const PeerInfo* now) KVMESH_REQUIRES(mu_);
  void Notify() KVMESH_EXCLUDES(mu_);

  const std::string self_id_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const PeerInfo>> members_ KVMESH_GUARDED_BY(mu_);
  std::vector<Listener> listeners_ KVMESH_GUARDED_BY(mu_);
  // Contacts, and the order they were last set in (front: longest ago).
  std::map<std::string, std::shared_ptr<const PeerInfo>> contacts_ KVMESH_GUARDED_BY(mu_);
  std::deque<std::string> contact_order_ KVMESH_GUARDED_BY(mu_);
  std::int64_t joined_ KVMESH_GUARDED_BY(mu_) = 0;
  std::int64_t left_ KVMESH_GUARDED_BY(mu_) = 0;
  std::int64_t rejoined_ KVMESH_GUARDED_BY(mu_) = 0;
  MembershipHealth health_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
