// PeerSessions: this node's authenticated sessions with other kvnodes and its TransferEngine — the
// one place where UCX worker addresses are exchanged.
//
// Establishing a link to peer X (Link(X), the requesting side):
//   1. X's control address comes from the PeerTable (PeerTable::Resolve: a member, which membership
//      fills in, or a contact, which a handoff outside the membership names; tests Upsert);
//   2. NodeClient::Connect with role CLIENT_ROLE_PEER, client_name = this node's id and the shared
//      secret: the challenge–response of node/auth.h, both ways;
//   3. only then PeerHello{node id, UCX address, namespace digest, geometry fingerprints}; X checks
//      the session's role and that the claimed node id is the session's client name, connects its
//      engine to us (AcceptHello) and answers with its own; we check its node id and namespace and
//      connect our engine to it.
// So a UCX address reaches a node only over a session that proved the secret, and the engine
// accepts data only from endpoints it connected itself (a UCX endpoint from any other address is
// refused by the engine: TransferStats::rejected_unknown_peer).
//
// PeerIds: one per node id, stable for the process's lifetime (a restarted peer keeps its id and is
// connected again with its new address). A failed link (kPeerUnreachable from a call, or the
// caller's MarkFailed after a failed transfer) is dropped; the next Link connects again, so a peer
// that comes back is used again without restarting this node.
//
// Memory: the engine is created here, with two staging arenas (send and receive) registered once
// at start, and the pools' memory registered once too (options.pool_memory): a holder sends a
// pooled block's bytes straight from its pool (node/peer_service.h), and a requester receives
// them straight into hidden reserved blocks, verified there before they are published
// (node/remote_fetch.h). UCX writes into pool memory only through a grant of reserved blocks.
//
// Thread safety: thread-safe. A PeerLink serialises its calls (one request at a time per link).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/content_id.h"
#include "common/result.h"
#include "common/thread_annotations.h"
#include "node/client.h"
#include "node/peer_staging.h"
#include "node/peer_table.h"
#include "node/request_handler.h"
#include "node/secret.h"
#include "store/block_bundle.h"
#include "transfer/transfer_engine.h"

namespace kvmesh {

struct PeerSessionsOptions {
  std::string self_id;
  std::shared_ptr<const PresentedSecret> secret;  // read at each new link
  ContentId namespace_digest;
  std::vector<GeometryFingerprint> fingerprints;  // per pool, in pool order
  // Per pool, the fingerprint of the same pool in the other layout order (HND <-> NHD); empty:
  // peers must have equal fingerprints. A peer whose every pool is in the other order is accepted
  // (OtherOrder says so): its bundles must be decoded in its order and converted (node/handoff.h).
  std::vector<GeometryFingerprint> other_order_fingerprints;
  ContentId other_order_namespace_digest;  // our key namespace in the other layout order
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds request_timeout{2000};  // of one peer RPC
  std::uint64_t staging_slot_bytes = 0;             // >= the largest bundle of any pool
  std::uint32_t staging_slots = 64;                 // per arena (send, receive)
  // The pools' component arrays, registered with the engine at Create (sends read from them,
  // grants of reserved blocks write into them); they must stay mapped until the PeerSessions is
  // destroyed.
  std::vector<std::span<std::byte>> pool_memory;
  TransferEngineOptions transfer;
};

struct PeerSessionStats {
  std::int64_t links_opened = 0;
  std::int64_t link_failures = 0;    // connect, handshake or hello failed, or the link broke
  std::int64_t hellos_accepted = 0;  // peers that connected to us
  std::int64_t hellos_refused = 0;
};

// One authenticated control-plane session to a peer, after the hello.
class PeerLink {
 public:
  // `incarnation`: the member's as the table had it when the link opened (its etcd lease).
  PeerLink(std::string node_id, PeerId id, std::string address, std::uint64_t incarnation,
           std::unique_ptr<NodeClient> client);
  [[nodiscard]] const std::string& node_id() const { return node_id_; }
  [[nodiscard]] PeerId id() const { return id_; }
  [[nodiscard]] const std::string& address() const { return address_; }
  [[nodiscard]] std::uint64_t incarnation() const { return incarnation_; }
  // One request and its response. kPeerUnreachable when the link broke (it stays broken).
  Result<rpc::Response> Call(rpc::Request request) KVMESH_EXCLUDES(mu_);
  [[nodiscard]] bool broken() const KVMESH_EXCLUDES(mu_);

 private:
  const std::string node_id_;
  const PeerId id_;
  const std::string address_;
  const std::uint64_t incarnation_;
  mutable Mutex mu_;
  std::unique_ptr<NodeClient> client_ KVMESH_GUARDED_BY(mu_);
};

class PeerSessions {
 public:
  // Creates the transfer engine and the staging arenas. `peers` must outlive this object.
  static Result<std::unique_ptr<PeerSessions>> Create(PeerSessionsOptions options,
                                                      const PeerTable* peers);
  ~PeerSessions();
  PeerSessions(const PeerSessions&) = delete;
  PeerSessions& operator=(const PeerSessions&) = delete;

  [[nodiscard]] const PeerSessionsOptions& options() const { return options_; }
  TransferEngine& engine() { return *engine_; }
  StagingArena& send_staging() { return *send_staging_; }
  StagingArena& receive_staging() { return *receive_staging_; }
  // The slice for [p, p + length) when it lies inside one of options().pool_memory; nullopt
  // otherwise (then the bytes must be copied into send staging first).
  [[nodiscard]] std::optional<Slice> PoolSlice(const void* p, std::uint64_t length) const;

  // A live link to `node_id` (connecting and saying hello when there is none or it broke).
  // kNotFound: not in the peer table; kPeerUnreachable / kPermissionDenied / kTimedOut: connect,
  // handshake or hello failed; kFailedPrecondition: another namespace or geometry. Connecting,
  // the handshake and the hello together take at most `within` when it is positive (a handoff's
  // time left, which may be longer than a fetch's), else the options' connect_timeout and then
  // request_timeout.
  Result<std::shared_ptr<PeerLink>> Link(const std::string& node_id,
                                         std::chrono::milliseconds within = {})
      KVMESH_EXCLUDES(mu_);
  // Drops the link (the next Link connects and says hello again). `transfer_failed`: a transfer
  // to or from the peer failed on its engine connection (kPeerUnreachable), which is then
  // forgotten and made again by that hello. Otherwise (a call timed out, the control connection
  // broke) the engine connection is kept: re-making it force-closes the one both sides share
  // (UCX matches the two nodes' endpoints), failing the peer's connection too, and two nodes that
  // only waited for each other (one stopped a while) then re-made theirs in turn, each closing the
  // other's, and never fetched again. A peer that restarted has a new address: its hello
  // connects again anyway.
  void MarkFailed(const std::string& node_id, bool transfer_failed) KVMESH_EXCLUDES(mu_);

  // The node side of PeerHello, for a session of role PEER whose client name is the claimed id.
  // kPermissionDenied: another role or a node id that is not the session's client name.
  Result<rpc::PeerHelloResponse> AcceptHello(const SessionInfo& session,
                                             const rpc::PeerHelloRequest& hello)
      KVMESH_EXCLUDES(mu_);
  // The PeerId of a node that said hello (either way) and whose engine connection is up.
  Result<PeerId> ConnectedPeer(const std::string& node_id) const KVMESH_EXCLUDES(mu_);
  // Whether a peer that said hello (either way) keeps its pools in the other layout order.
  [[nodiscard]] bool OtherOrder(const std::string& node_id) const KVMESH_EXCLUDES(mu_);
  [[nodiscard]] PeerSessionStats stats() const KVMESH_EXCLUDES(mu_);

 private:
  explicit PeerSessions(PeerSessionsOptions options, const PeerTable* peers)
      : options_(std::move(options)), peers_(peers) {}
  PeerId IdOf(const std::string& node_id) KVMESH_REQUIRES(mu_);
  // Connects the engine to `peer` unless it is connected at this very address already.
  Status ConnectEngine(const std::string& node_id, PeerId peer, const WorkerAddress& address)
      KVMESH_REQUIRES(mu_);
  void FillHello(rpc::PeerHelloRequest* out) const;
  // OK(false): equal geometry; OK(true): equal but for the layout order (every pool).
  Result<bool> CheckCompatible(const std::string& what, const std::string& namespace_digest,
                               const google::protobuf::RepeatedPtrField<std::string>& fps) const;

  const PeerSessionsOptions options_;
  const PeerTable* const peers_;
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<StagingArena> send_staging_;
  std::unique_ptr<StagingArena> receive_staging_;
  std::vector<RegionId> pool_regions_;  // one per options_.pool_memory entry

  mutable Mutex mu_;
  std::uint64_t next_id_ KVMESH_GUARDED_BY(mu_) = 1;
  std::unordered_map<std::string, PeerId> ids_ KVMESH_GUARDED_BY(mu_);
  // The address each peer's engine connection was made with (absent: not connected).
  std::unordered_map<std::string, WorkerAddress> connected_ KVMESH_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::shared_ptr<PeerLink>> links_ KVMESH_GUARDED_BY(mu_);
  std::unordered_map<std::string, bool> other_order_ KVMESH_GUARDED_BY(mu_);
  PeerSessionStats stats_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
