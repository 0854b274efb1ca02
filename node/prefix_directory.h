// PrefixDirectory: the cluster prefix directory — which nodes hold which content ids, in which
// tier — partitioned over the members by rendezvous hashing (node/directory_shard.h). It is the
// PrefixLocator (node/prefix_locator.h) of a node in a cluster.
//
//   home       every content id has one home node among the current members (this node
//              included); a home keeps only its shard: the holders of its ids.
//   feed       a publisher thread polls this node's KV events every cluster.directory.batch_ms,
//              folds them into this node's holdings (best tier per id) and sends the changes to
//              the ids' homes in DirectoryUpdate messages (at most max_batch_events entries each;
//              one per home, homes in parallel); its own share it applies directly. A home that
//              did not answer keeps its changes queued for the next round. So a home's shard lags
//              a holder by at most batch_ms plus one round trip while the home is reachable.
//   members    on a membership change (PeerTable listener) the next round re-publishes only the
//              holdings whose home moved (and every holding homed at a member that came back with
//              a new incarnation); a home drops the entries of members that left and the ids no
//              longer homed at it.
//   locate     Locate(ids) asks the homes of those ids (one DirectoryLocate per home, in
//              parallel, each within the timeout) and returns their holders (this node left out).
//   resync     the holdings are rebuilt from a snapshot of what this node holds — every cached
//              pool block and every id its host and disk tiers hold (SnapshotSource) — in the
//              first round, every cluster.directory.resync_interval, and in the round after KV
//              events were lost to a full event ring (once the ring is caught up); the
//              differences go to the homes like any change. The tiers report no events, so a host
//              or disk copy enters the directory (and one that left it, leaves it) at the next
//              resync: a copy's entry is stale by up to resync_interval, a pool block's by up to
//              batch_ms.
//
// An answer is a belief (prefix_locator.h): stale by up to a batch interval (a tier copy: up to a
// resync interval), and an entry of a holder that died stays until membership drops it. Without a
// SnapshotSource, KV events lost to a full event ring are only logged and counted (the holdings
// may then miss ids until they are stored again).
//
// DirectoryTransport carries the two messages to a home; MakePeerDirectoryTransport uses the
// authenticated control plane (role PEER, one cached connection per peer); tests may wire
// directories together in-process.
//
// Thread safety: thread-safe. The publisher thread is the only one that sends updates.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "node/directory_shard.h"
#include "node/node_config.h"
#include "node/peer_table.h"
#include "node/prefix_locator.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "node/secret.h"
#include "pool/kv_events.h"

namespace kvmesh {

class DirectoryTransport {
 public:
  virtual ~DirectoryTransport() = default;
  [[nodiscard]] virtual Status Update(const PeerInfo& home, const rpc::DirectoryUpdateRequest& req,
                                      std::chrono::milliseconds timeout) = 0;
  [[nodiscard]] virtual Result<rpc::DirectoryLocateResponse> Locate(
      const PeerInfo& home, const rpc::DirectoryLocateRequest& req,
      std::chrono::milliseconds timeout) = 0;
};

// Over the control plane: NodeClient to home.control_address with role PEER and `secret`.
std::unique_ptr<DirectoryTransport> MakePeerDirectoryTransport(
    std::string self_id, std::shared_ptr<const PresentedSecret> secret);

struct DirectoryStats {
  std::int64_t shard_ids = 0;         // ids homed here with a holder
  std::int64_t held_ids = 0;          // ids this node holds
  std::int64_t updates_sent = 0;      // entries sent to other homes
  std::int64_t updates_received = 0;  // entries applied from peers
  std::int64_t republished = 0;       // entries re-sent because their home moved
  std::int64_t send_failures = 0;
  std::int64_t events_lost = 0;
  std::int64_t resyncs = 0;             // holdings rebuilt from a snapshot
  std::int64_t resyncs_after_loss = 0;  // of those, because KV events were lost
};

// The holders of one id, this node included (for ClusterLookup).
struct LocateAllResult {
  std::vector<std::vector<BlockHolder>> holders;  // per id
  std::vector<std::string> unreachable_homes;
  std::int32_t homes = 0;    // distinct homes of the ids
  std::int32_t members = 0;  // in this node's view, itself included
};

class PrefixDirectory final : public PrefixLocator {
 public:
  // This node's KV events from `from_seq`, at most `max` (BlockManager::PollEvents).
  using EventSource = std::function<KvEventBatch(std::uint64_t from_seq, std::size_t max)>;
  // What this node holds now, as events that set it (Holdings::Replace): kStored per cached pool
  // block, kTierChanged into kHost / kDisk per tier copy. Called on the publisher thread only.
  using SnapshotSource = std::function<std::vector<KvEvent>()>;

  // REQUIRES: `peers` outlives the directory. Starts the publisher thread. An empty `snapshot`:
  // no resynchronisation.
  PrefixDirectory(DirectorySection config, PeerTable* peers, EventSource events,
                  std::unique_ptr<DirectoryTransport> transport, SnapshotSource snapshot = {});
  ~PrefixDirectory() override;
  PrefixDirectory(const PrefixDirectory&) = delete;
  PrefixDirectory& operator=(const PrefixDirectory&) = delete;

  // Stops the publisher (idempotent).
  void Stop();

  // PrefixLocator.
  [[nodiscard]] Result<std::vector<std::vector<BlockHolder>>> Locate(
      std::span<const ContentId> ids, std::chrono::milliseconds timeout) override;
  // As Locate, this node's own holdings included, with the homes that did not answer.
  [[nodiscard]] LocateAllResult LocateAll(std::span<const ContentId> ids,
                                          std::chrono::milliseconds timeout);

  // Served to peers (the DirectoryUpdate and DirectoryLocate messages).
  [[nodiscard]] Status ApplyUpdate(const rpc::DirectoryUpdateRequest& req);
  [[nodiscard]] Status AnswerLocate(const rpc::DirectoryLocateRequest& req,
                                    rpc::DirectoryLocateResponse* out) const;

  [[nodiscard]] HomeRing ring() const;
  [[nodiscard]] DirectoryStats stats() const;
  [[nodiscard]] const DirectorySection& config() const { return config_; }

 private:
  void OnMembers(const std::vector<PeerInfo>& members);
  void Run();
  void Round();
  void PollEvents();
  void ResyncIfDue();
  void ApplyMembershipChange();
  // Asks each member not asked yet for what it holds homed here (send_all), once it answers.
  void AskForHoldings();
  // Queues every holding homed at the members that asked (send_all).
  void RepublishToAskers();
  void SendPending();

  const DirectorySection config_;
  PeerTable* const peers_;
  const std::string self_;
  EventSource events_;
  std::unique_ptr<DirectoryTransport> transport_;
  SnapshotSource snapshot_;

  DirectoryShard shard_;
  Holdings holdings_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;                    // guarded by mu_
  bool members_changed_ = true;              // guarded by mu_
  HomeRing ring_;                            // guarded by mu_
  std::map<std::string, PeerInfo> members_;  // guarded by mu_ (peers only)
  std::set<std::string> askers_;             // guarded by mu_: members that sent send_all

  // Publisher thread only.
  std::uint64_t next_seq_ = 1;
  bool events_were_lost_ = false;  // since the last resync
  bool resynced_ = false;
  std::chrono::steady_clock::time_point last_resync_;
  std::map<std::string, std::uint64_t> incarnations_;
  std::set<std::string> asked_;  // members that answered this node's send_all
  std::chrono::steady_clock::time_point last_ask_;
  // Changes not yet acknowledged by their home, latest state per id.
  std::map<ContentId, HoldingUpdate> pending_;

  std::atomic<std::int64_t> updates_sent_{0}, updates_received_{0}, republished_{0},
      send_failures_{0}, events_lost_{0}, resyncs_periodic_{0}, resyncs_after_loss_{0};
  std::thread thread_;
};

}  // namespace kvmesh
