#include "node/prefix_directory.h"

#include <future>

#include "common/log.h"
#include "common/strings.h"
#include "node/client.h"

namespace kvmesh {
namespace {

std::string IdBytes(const ContentId& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes.data()), ContentId::kBytes);
}

Result<ContentId> IdFromBytes(const std::string& b) {
  if (b.size() != ContentId::kBytes) {
    return Status::InvalidArgument(StrCat("content id of ", b.size(), " bytes (expected 16)"));
  }
  ContentId id;
  std::memcpy(id.bytes.data(), b.data(), ContentId::kBytes);
  return id;
}

Result<HolderTier> TierFromWire(std::uint32_t t) {
  if (t > static_cast<std::uint32_t>(HolderTier::kDisk)) {
    return Status::InvalidArgument(StrCat("tier ", t, " is unknown"));
  }
  return static_cast<HolderTier>(t);
}

class PeerDirectoryTransport final : public DirectoryTransport {
 public:
  PeerDirectoryTransport(std::string self_id, std::shared_ptr<const PresentedSecret> secret)
      : self_(std::move(self_id)), secret_(std::move(secret)) {}

  Status Update(const PeerInfo& home, const rpc::DirectoryUpdateRequest& req,
                std::chrono::milliseconds timeout) override {
    rpc::Request r;
    *r.mutable_directory_update() = req;
    return Call(home, std::move(r), timeout).status();
  }

  Result<rpc::DirectoryLocateResponse> Locate(const PeerInfo& home,
                                              const rpc::DirectoryLocateRequest& req,
                                              std::chrono::milliseconds timeout) override {
    rpc::Request r;
    *r.mutable_directory_locate() = req;
    KVMESH_ASSIGN_OR_RETURN(rpc::Response resp, Call(home, std::move(r), timeout));
    return std::move(*resp.mutable_directory_locate());
  }

 private:
  struct Connection {
    std::mutex mu;
    std::string address;
    std::uint64_t incarnation = 0;
    std::unique_ptr<NodeClient> client;  // guarded by mu
  };

  // A home that moved or restarted (a new incarnation) gets a new connection: the one to its old
  // process would fail the first call after the restart.
  std::shared_ptr<Connection> ConnectionTo(const PeerInfo& home) {
    std::lock_guard lock(mu_);
    std::shared_ptr<Connection>& c = connections_[home.node_id];
    if (c == nullptr || c->address != home.control_address || c->incarnation != home.incarnation) {
      c = std::make_shared<Connection>();
      c->address = home.control_address;
      c->incarnation = home.incarnation;
    }
    return c;
  }

  // One request on the cached connection (held for the call: requests to one home are serial),
  // connecting first when there is none; a failed call drops the connection.
  Result<rpc::Response> Call(const PeerInfo& home, rpc::Request request,
                             std::chrono::milliseconds timeout) {
    std::shared_ptr<Connection> c = ConnectionTo(home);
    std::lock_guard lock(c->mu);
    if (c->client == nullptr || !c->client->connected()) {
      NodeClientOptions o;
      o.address = home.control_address;
      o.secret = secret_->Get();
      o.client_name = StrCat("kvnode-", self_);
      o.role = rpc::CLIENT_ROLE_PEER;
      o.connect_timeout = timeout;
      o.request_timeout = timeout;
      KVMESH_ASSIGN_OR_RETURN(c->client, NodeClient::Connect(o));
    }
    request.set_timeout_ms(static_cast<std::uint32_t>(timeout.count()));
    Result<rpc::Response> r = c->client->Call(std::move(request));
    if (!r.ok() &&
        (r.status().code() == StatusCode::kPeerUnreachable ||
         r.status().code() == StatusCode::kTimedOut || r.status().code() == StatusCode::kIoError)) {
      c->client.reset();
    }
    return r;
  }

  const std::string self_;
  const std::shared_ptr<const PresentedSecret> secret_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Connection>> connections_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<DirectoryTransport> MakePeerDirectoryTransport(
    std::string self_id, std::shared_ptr<const PresentedSecret> secret) {
  return std::make_unique<PeerDirectoryTransport>(std::move(self_id), std::move(secret));
}

PrefixDirectory::PrefixDirectory(DirectorySection config, PeerTable* peers, EventSource events,
                                 std::unique_ptr<DirectoryTransport> transport,
                                 SnapshotSource snapshot)
    : config_(config),
      peers_(peers),
      self_(peers->self_id()),
      events_(std::move(events)),
      transport_(std::move(transport)),
      snapshot_(std::move(snapshot)),
      ring_(std::vector<std::string>{peers->self_id()}) {
  peers_->Subscribe([this](const std::vector<PeerInfo>& members) { OnMembers(members); });
  OnMembers(peers_->Snapshot());
  thread_ = std::thread([this] { Run(); });
}

PrefixDirectory::~PrefixDirectory() { Stop(); }

void PrefixDirectory::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    wake_.notify_all();
  }
  thread_.join();
}

void PrefixDirectory::OnMembers(const std::vector<PeerInfo>& members) {
  std::lock_guard lock(mu_);
  if (stopping_) return;  // the table outlives us; its listener may still fire
  members_.clear();
  std::vector<std::string> ids{self_};
  for (const PeerInfo& p : members) {
    members_[p.node_id] = p;
    ids.push_back(p.node_id);
  }
  members_changed_ = true;
  wake_.notify_all();
}

HomeRing PrefixDirectory::ring() const {
  std::lock_guard lock(mu_);
  return ring_;
}

void PrefixDirectory::Run() {
  for (;;) {
    Round();
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(config_.batch_ms),
                   [this] { return stopping_ || members_changed_; });
    if (stopping_) return;
  }
}

void PrefixDirectory::Round() {
  PollEvents();
  ResyncIfDue();
  ApplyMembershipChange();
  AskForHoldings();
  RepublishToAskers();
  SendPending();
}

void PrefixDirectory::AskForHoldings() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ask_ < std::chrono::seconds(1)) return;  // a member that is down: once a second
  last_ask_ = now;
  std::map<std::string, PeerInfo> members;
  {
    std::lock_guard lock(mu_);
    members = members_;
  }
  for (const auto& [id, member] : members) {
    if (asked_.contains(id)) continue;
    rpc::DirectoryUpdateRequest req;
    req.set_node_id(self_);
    req.set_send_all(true);
    const Status st = transport_->Update(member, req, config_.lookup_timeout);
    if (st.ok()) {
      asked_.insert(id);
      KVMESH_LOG_DEBUG("directory asked {} for its holdings homed here", id);
    } else {
      KVMESH_LOG_DEBUG("directory could not ask {} for its holdings yet error {}", id,
                       st.ToString());
    }
  }
}

void PrefixDirectory::RepublishToAskers() {
  std::set<std::string> askers;
  HomeRing ring;
  {
    std::lock_guard lock(mu_);
    askers.swap(askers_);
    ring = ring_;
  }
  if (askers.empty()) return;
  std::int64_t queued = 0;
  for (const HoldingUpdate& u : holdings_.All()) {
    if (askers.contains(ring.HomeOf(u.id))) {
      pending_[u.id] = u;
      ++queued;
    }
  }
  republished_.fetch_add(queued);
  KVMESH_LOG_INFO("directory republish to {} (it asked: its shard is new) holdings {}",
                  StrJoin(askers, ","), queued);
}

void PrefixDirectory::PollEvents() {
  const std::size_t max = static_cast<std::size_t>(config_.max_batch_events);
  for (;;) {
    KvEventBatch batch = events_(next_seq_, max);
    if (batch.lost) {
      const std::uint64_t n = batch.lost->last - batch.lost->first + 1;
      events_lost_.fetch_add(static_cast<std::int64_t>(n));
      events_were_lost_ = true;
      KVMESH_LOG_WARN("directory kv events lost first {} last {} resync {}", batch.lost->first,
                      batch.lost->last, snapshot_ ? "next" : "off");
    }
    next_seq_ = batch.next_seq;
    for (HoldingUpdate& u : holdings_.Apply(batch.events)) pending_[u.id] = u;
    if (batch.events.size() < max) return;
  }
}

// After PollEvents caught up with the ring: the snapshot reflects at least every event polled so
// far, and the events polled from next_seq_ on are applied on top of it (idempotently: some of
// them may already be in it).
void PrefixDirectory::ResyncIfDue() {
  if (!snapshot_) return;
  const auto now = std::chrono::steady_clock::now();
  // The first round too: a node restarted on a disk tier holds blocks no event announced.
  const bool periodic = !resynced_ || (config_.resync_interval.count() > 0 &&
                                       now - last_resync_ >= config_.resync_interval);
  if (!events_were_lost_ && !periodic) return;
  const std::vector<KvEvent> snapshot = snapshot_();
  std::int64_t changed = 0;
  for (HoldingUpdate& u : holdings_.Replace(snapshot)) {
    pending_[u.id] = u;
    ++changed;
  }
  if (events_were_lost_) {
    resyncs_after_loss_.fetch_add(1);
    KVMESH_LOG_INFO("directory resync after lost events copies {} changed {}", snapshot.size(),
                    changed);
  } else {
    resyncs_periodic_.fetch_add(1);
    KVMESH_LOG_DEBUG("directory resync copies {} changed {}", snapshot.size(), changed);
  }
  events_were_lost_ = false;
  resynced_ = true;
  last_resync_ = now;
}

void PrefixDirectory::ApplyMembershipChange() {
  HomeRing before;
  HomeRing after;
  std::map<std::string, PeerInfo> members;
  {
    std::lock_guard lock(mu_);
    if (!members_changed_) return;
    members_changed_ = false;
    before = ring_;
    std::vector<std::string> ids{self_};
    for (const auto& [id, p] : members_) ids.push_back(id);
    ring_ = HomeRing(std::move(ids));
    after = ring_;
    members = members_;
  }
  // Homes that came back with a new incarnation lost their shard: everything homed there again.
  std::set<std::string> restarted;
  for (const auto& [id, p] : members) {
    auto it = incarnations_.find(id);
    if (it != incarnations_.end() && it->second != p.incarnation) restarted.insert(id);
  }
  incarnations_.clear();
  for (const auto& [id, p] : members) incarnations_[id] = p.incarnation;
  for (const std::string& id : before.members()) {
    if (id != self_ && !members.contains(id)) shard_.DropNode(id);
  }
  shard_.DropNotHomedAt(after, self_);
  std::int64_t moved = 0;
  for (const HoldingUpdate& u : holdings_.All()) {
    const std::string& home = after.HomeOf(u.id);
    if (restarted.contains(home) || before.empty() || before.HomeOf(u.id) != home) {
      pending_[u.id] = u;
      ++moved;
    }
  }
  // Removals queued for a home that moved need not follow: the new home never heard of them.
  republished_.fetch_add(moved);
  KVMESH_LOG_INFO("directory members {} republish {}", after.members().size(), moved);
}

void PrefixDirectory::SendPending() {
  if (pending_.empty()) return;
  HomeRing ring;
  std::map<std::string, PeerInfo> members;
  {
    std::lock_guard lock(mu_);
    ring = ring_;
    members = members_;
  }
  std::map<std::string, std::vector<HoldingUpdate>> by_home;
  for (const auto& [id, u] : pending_) by_home[ring.HomeOf(id)].push_back(u);
  if (auto mine = by_home.find(self_); mine != by_home.end()) {
    shard_.Apply(self_, mine->second);
    for (const HoldingUpdate& u : mine->second) pending_.erase(u.id);
    by_home.erase(mine);
  }
  std::vector<std::pair<std::vector<HoldingUpdate>*, std::future<Status>>> sends;
  for (auto& [home, updates] : by_home) {
    auto member = members.find(home);
    if (member == members.end()) continue;  // raced with a leave: next round re-homes them
    std::vector<HoldingUpdate>* list = &updates;
    sends.emplace_back(
        list, std::async(std::launch::async, [this, peer = member->second, list] {
          const std::size_t chunk = static_cast<std::size_t>(config_.max_batch_events);
          for (std::size_t at = 0; at < list->size(); at += chunk) {
            rpc::DirectoryUpdateRequest req;
            req.set_node_id(self_);
            for (std::size_t i = at; i < std::min(list->size(), at + chunk); ++i) {
              rpc::DirectoryEntry* e = req.add_entries();
              e->set_content_id(IdBytes((*list)[i].id));
              e->set_removed((*list)[i].removed);
              e->set_tier(static_cast<std::uint32_t>((*list)[i].tier));
            }
            KVMESH_RETURN_IF_ERROR(transport_->Update(peer, req, config_.lookup_timeout));
          }
          return Status::Ok();
        }));
  }
  for (auto& [list, done] : sends) {
    const Status st = done.get();
    if (st.ok()) {
      updates_sent_.fetch_add(static_cast<std::int64_t>(list->size()));
      for (const HoldingUpdate& u : *list) pending_.erase(u.id);
    } else {
      // Kept queued: a later round retries (a chunk the home did apply is applied again: updates
      // are states, not deltas, so that is harmless).
      if (send_failures_.fetch_add(1) % 100 == 0) {
        KVMESH_LOG_WARN("directory update failed entries {} error {}", list->size(), st.ToString());
      }
    }
  }
}

Status PrefixDirectory::ApplyUpdate(const rpc::DirectoryUpdateRequest& req) {
  if (req.node_id().empty()) return Status::InvalidArgument("directory update without node_id");
  std::vector<HoldingUpdate> updates;
  updates.reserve(static_cast<std::size_t>(req.entries_size()));
  for (const rpc::DirectoryEntry& e : req.entries()) {
    HoldingUpdate u;
    KVMESH_ASSIGN_OR_RETURN(u.id, IdFromBytes(e.content_id()));
    KVMESH_ASSIGN_OR_RETURN(u.tier, TierFromWire(e.tier()));
    u.removed = e.removed();
    updates.push_back(u);
  }
  shard_.Apply(req.node_id(), updates);
  updates_received_.fetch_add(static_cast<std::int64_t>(updates.size()));
  if (req.send_all()) {
    std::lock_guard lock(mu_);
    askers_.insert(req.node_id());
    wake_.notify_all();
  }
  return Status::Ok();
}

Status PrefixDirectory::AnswerLocate(const rpc::DirectoryLocateRequest& req,
                                     rpc::DirectoryLocateResponse* out) const {
  for (const std::string& bytes : req.content_ids()) {
    KVMESH_ASSIGN_OR_RETURN(const ContentId id, IdFromBytes(bytes));
    rpc::DirectoryHolders* h = out->add_ids();
    for (const BlockHolder& b : shard_.Holders(id)) {
      rpc::DirectoryHolder* o = h->add_holders();
      o->set_node_id(b.node_id);
      o->set_tier(static_cast<std::uint32_t>(b.tier));
    }
  }
  return Status::Ok();
}

LocateAllResult PrefixDirectory::LocateAll(std::span<const ContentId> ids,
                                           std::chrono::milliseconds timeout) {
  LocateAllResult result;
  result.holders.resize(ids.size());
  HomeRing ring;
  std::map<std::string, PeerInfo> members;
  {
    std::lock_guard lock(mu_);
    ring = ring_;
    members = members_;
  }
  result.members = static_cast<std::int32_t>(ring.members().size());
  std::map<std::string, std::vector<std::size_t>> by_home;
  for (std::size_t i = 0; i < ids.size(); ++i) by_home[ring.HomeOf(ids[i])].push_back(i);
  result.homes = static_cast<std::int32_t>(by_home.size());
  std::vector<std::tuple<std::string, const std::vector<std::size_t>*,
                         std::future<Result<rpc::DirectoryLocateResponse>>>>
      asks;
  for (const auto& [home, indices] : by_home) {
    if (home == self_) {
      for (const std::size_t i : indices) result.holders[i] = shard_.Holders(ids[i]);
      continue;
    }
    auto member = members.find(home);
    if (member == members.end()) {
      result.unreachable_homes.push_back(home);
      continue;
    }
    rpc::DirectoryLocateRequest req;
    for (const std::size_t i : indices) req.add_content_ids(IdBytes(ids[i]));
    asks.emplace_back(home, &indices,
                      std::async(std::launch::async,
                                 [this, peer = member->second, req = std::move(req), timeout] {
                                   return transport_->Locate(peer, req, timeout);
                                 }));
  }
  for (auto& [home, indices, answer] : asks) {
    Result<rpc::DirectoryLocateResponse> r = answer.get();
    if (!r.ok() || r->ids_size() != static_cast<int>(indices->size())) {
      result.unreachable_homes.push_back(home);
      continue;
    }
    for (std::size_t k = 0; k < indices->size(); ++k) {
      std::vector<BlockHolder>& out = result.holders[(*indices)[k]];
      for (const rpc::DirectoryHolder& h : r->ids(static_cast<int>(k)).holders()) {
        Result<HolderTier> tier = TierFromWire(h.tier());
        if (tier.ok()) out.push_back({h.node_id(), *tier});
      }
    }
  }
  return result;
}

Result<std::vector<std::vector<BlockHolder>>> PrefixDirectory::Locate(
    std::span<const ContentId> ids, std::chrono::milliseconds timeout) {
  LocateAllResult all = LocateAll(ids, timeout);
  if (!ids.empty() && static_cast<std::int32_t>(all.unreachable_homes.size()) == all.homes) {
    return Status::PeerUnreachable(
        StrCat("no directory home answered within ", timeout.count(), " ms"));
  }
  for (std::vector<BlockHolder>& h : all.holders) {
    std::erase_if(h, [this](const BlockHolder& b) { return b.node_id == self_; });
  }
  return std::move(all.holders);
}

DirectoryStats PrefixDirectory::stats() const {
  DirectoryStats s;
  s.shard_ids = static_cast<std::int64_t>(shard_.size());
  s.held_ids = static_cast<std::int64_t>(holdings_.size());
  s.updates_sent = updates_sent_.load();
  s.updates_received = updates_received_.load();
  s.republished = republished_.load();
  s.send_failures = send_failures_.load();
  s.events_lost = events_lost_.load();
  // One counter per cause, each read once: every figure derived from them only ever grows.
  s.resyncs_after_loss = resyncs_after_loss_.load();
  s.resyncs = resyncs_periodic_.load() + s.resyncs_after_loss;
  return s;
}

}  // namespace kvmesh
