#include "node/peer_sessions.h"

#include <cstring>

#include "common/log.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

std::string Bytes(const void* data, std::size_t n) { return {static_cast<const char*>(data), n}; }

WorkerAddress AddressOf(const std::string& bytes) {
  WorkerAddress a(bytes.size());
  if (!bytes.empty()) std::memcpy(a.data(), bytes.data(), bytes.size());
  return a;
}

}  // namespace

PeerLink::PeerLink(std::string node_id, PeerId id, std::string address, std::uint64_t incarnation,
                   std::unique_ptr<NodeClient> client)
    : node_id_(std::move(node_id)),
      id_(id),
      address_(std::move(address)),
      incarnation_(incarnation),
      client_(std::move(client)) {}

Result<rpc::Response> PeerLink::Call(rpc::Request request) {
  MutexLock lock(&mu_);  // held across the call: one request at a time per link (documented)
  if (client_ == nullptr || !client_->connected()) {
    return Status::PeerUnreachable(StrCat("peer ", node_id_, ": link closed"));
  }
  return client_->Call(std::move(request));
}

bool PeerLink::broken() const {
  MutexLock lock(&mu_);
  return client_ == nullptr || !client_->connected();
}

Result<std::unique_ptr<PeerSessions>> PeerSessions::Create(PeerSessionsOptions options,
                                                           const PeerTable* peers) {
  if (options.self_id.empty()) return Status::InvalidArgument("peer sessions: empty node id");
  if (options.staging_slot_bytes == 0) {
    return Status::InvalidArgument("peer sessions: staging_slot_bytes must be positive");
  }
  std::unique_ptr<PeerSessions> s(new PeerSessions(std::move(options), peers));
  Result<std::unique_ptr<TransferEngine>> engine = TransferEngine::Create(s->options_.transfer);
  if (!engine.ok()) return engine.status().WithContext("peer transfer engine");
  s->engine_ = std::move(engine).value();
  for (const std::span<std::byte> source : s->options_.pool_memory) {
    Result<RegionId> region = s->engine_->RegisterRegion(source.data(), source.size());
    if (!region.ok()) return region.status().WithContext("peer send source (pool memory)");
    s->pool_regions_.push_back(*region);
  }
  KVMESH_ASSIGN_OR_RETURN(s->send_staging_,
                          StagingArena::Create(s->engine_.get(), s->options_.staging_slot_bytes,
                                               s->options_.staging_slots));
  KVMESH_ASSIGN_OR_RETURN(s->receive_staging_,
                          StagingArena::Create(s->engine_.get(), s->options_.staging_slot_bytes,
                                               s->options_.staging_slots));
  return s;
}

PeerSessions::~PeerSessions() {
  {
    MutexLock lock(&mu_);
    links_.clear();
  }
  // The arenas go before the engine (they deregister from it); no lease is outstanding because
  // every user of a lease waits for its operation to complete first.
  send_staging_.reset();
  receive_staging_.reset();
  for (RegionId region : pool_regions_) static_cast<void>(engine_->DeregisterRegion(region));
  engine_.reset();
}

std::optional<Slice> PeerSessions::PoolSlice(const void* p, std::uint64_t length) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  for (std::size_t i = 0; i < pool_regions_.size(); ++i) {
    const auto base = reinterpret_cast<std::uintptr_t>(options_.pool_memory[i].data());
    const std::uint64_t size = options_.pool_memory[i].size();
    if (at >= base && length <= size && at - base <= size - length) {
      return Slice{pool_regions_[i], at - base, length};
    }
  }
  return std::nullopt;
}

PeerId PeerSessions::IdOf(const std::string& node_id) {
  auto [it, inserted] = ids_.try_emplace(node_id, PeerId{next_id_});
  if (inserted) ++next_id_;
  return it->second;
}

Status PeerSessions::ConnectEngine(const std::string& node_id, PeerId peer,
                                   const WorkerAddress& address) {
  auto it = connected_.find(node_id);
  if (it != connected_.end() && it->second == address) return Status::Ok();
  // Held across Connect, which hands the work to the engine's progress thread and waits for it;
  // that thread never takes mu_.
  Status st = engine_->Connect(peer, address);
  if (!st.ok()) {
    connected_.erase(node_id);
    return st.WithContext(StrCat("peer ", node_id, " ucx connect"));
  }
  connected_[node_id] = address;
  return Status::Ok();
}

void PeerSessions::FillHello(rpc::PeerHelloRequest* out) const {
  out->set_node_id(options_.self_id);
  const WorkerAddress& a = engine_->address();
  out->set_ucx_address(Bytes(a.data(), a.size()));
  out->set_namespace_digest(Bytes(options_.namespace_digest.bytes.data(), ContentId::kBytes));
  for (const GeometryFingerprint& f : options_.fingerprints) {
    out->add_geometry_fingerprints(Bytes(f.bytes.data(), f.bytes.size()));
  }
}

Result<bool> PeerSessions::CheckCompatible(
    const std::string& what, const std::string& namespace_digest,
    const google::protobuf::RepeatedPtrField<std::string>& fps) const {
  const bool same_ns =
      namespace_digest == Bytes(options_.namespace_digest.bytes.data(), ContentId::kBytes);
  const bool other_ns =
      !options_.other_order_fingerprints.empty() &&
      namespace_digest ==
          Bytes(options_.other_order_namespace_digest.bytes.data(), ContentId::kBytes);
  if (!same_ns && !other_ns) {
    return Status::FailedPrecondition(StrCat(what, ": another block namespace"));
  }
  if (fps.size() != static_cast<int>(options_.fingerprints.size())) {
    return Status::FailedPrecondition(
        StrCat(what, ": ", fps.size(), " pools, we have ", options_.fingerprints.size()));
  }
  const auto equal = [&](const std::vector<GeometryFingerprint>& mine) {
    if (mine.size() != static_cast<std::size_t>(fps.size())) return false;
    for (int p = 0; p < fps.size(); ++p) {
      const GeometryFingerprint& f = mine[static_cast<std::size_t>(p)];
      if (fps[p] != Bytes(f.bytes.data(), f.bytes.size())) return false;
    }
    return true;
  };
  if (same_ns && equal(options_.fingerprints)) return false;
  if (other_ns && equal(options_.other_order_fingerprints)) return true;
  return Status::FailedPrecondition(StrCat(what, ": its pools have another geometry"));
}

Result<std::shared_ptr<PeerLink>> PeerSessions::Link(const std::string& node_id,
                                                     std::chrono::milliseconds within) {
  const std::shared_ptr<const PeerInfo> info = peers_->Resolve(node_id);
  if (info == nullptr) {
    return Status::NotFound(
        StrCat("peer ", node_id, " is not a member, and no address is known for it"));
  }
  {
    MutexLock lock(&mu_);
    auto it = links_.find(node_id);
    // Not a link to a peer that moved or restarted since (a new incarnation at the same address):
    // its first call would fail on the old process's session.
    if (it != links_.end() && !it->second->broken() &&
        it->second->address() == info->control_address &&
        it->second->incarnation() == info->incarnation) {
      return it->second;
    }
  }
  // Connect and say hello without the lock (network waits).
  NodeClientOptions o;
  o.address = info->control_address;
  o.secret = options_.secret->Get();
  o.client_name = options_.self_id;
  o.role = rpc::CLIENT_ROLE_PEER;
  const bool budget = within.count() > 0;
  const auto until = std::chrono::steady_clock::now() + within;
  o.connect_timeout = budget ? within : options_.connect_timeout;
  o.request_timeout = options_.request_timeout;
  const auto fail = [&](Status st) {
    MutexLock lock(&mu_);
    ++stats_.link_failures;
    KVMESH_LOG_WARN("peer link failed peer {} address {} error {}", node_id, o.address,
                    st.ToString());
    return st;
  };
  Result<std::unique_ptr<NodeClient>> client = NodeClient::Connect(o);
  if (!client.ok()) return fail(client.status());
  if ((*client)->node_id() != node_id) {
    return fail(Status::FailedPrecondition(
        StrCat("peer at ", o.address, " is node ", (*client)->node_id(), ", not ", node_id)));
  }
  rpc::Request req;
  FillHello(req.mutable_peer_hello());
  if (budget) {  // the hello gets what the connect and the handshake left of the budget
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return fail(Status::TimedOut("peer hello: no time left"));
    req.set_timeout_ms(static_cast<std::uint32_t>(left.count()));
  }
  Result<rpc::Response> r = (*client)->Call(std::move(req));
  if (!r.ok()) return fail(r.status().WithContext("peer hello"));
  const rpc::PeerHelloResponse& h = r->peer_hello();
  if (h.node_id() != node_id) {
    return fail(Status::FailedPrecondition(StrCat("peer hello from ", h.node_id())));
  }
  Result<bool> other =
      CheckCompatible(StrCat("peer ", node_id), h.namespace_digest(), h.geometry_fingerprints());
  if (!other.ok()) return fail(other.status());
  MutexLock lock(&mu_);
  other_order_[node_id] = *other;
  const PeerId id = IdOf(node_id);
  // A new session means the peer may have restarted: connect the engine again unless the address
  // is the one we are connected to.
  if (Status st = ConnectEngine(node_id, id, AddressOf(h.ucx_address())); !st.ok()) {
    ++stats_.link_failures;
    return st;
  }
  auto link = std::make_shared<PeerLink>(node_id, id, o.address, info->incarnation,
                                         std::move(client).value());
  links_[node_id] = link;
  ++stats_.links_opened;
  KVMESH_LOG_INFO("peer link opened peer {} address {} peer_id {}", node_id, o.address, id.value);
  return link;
}

void PeerSessions::MarkFailed(const std::string& node_id, bool transfer_failed) {
  MutexLock lock(&mu_);
  links_.erase(node_id);
  if (transfer_failed) connected_.erase(node_id);
  ++stats_.link_failures;
}

Result<rpc::PeerHelloResponse> PeerSessions::AcceptHello(const SessionInfo& session,
                                                         const rpc::PeerHelloRequest& hello) {
  const auto refuse = [&](Status st) {
    MutexLock lock(&mu_);
    ++stats_.hellos_refused;
    KVMESH_LOG_WARN("peer hello refused session {} client {} error {}", session.session_id,
                    session.client_name, st.ToString());
    return st;
  };
  if (session.role != rpc::CLIENT_ROLE_PEER) {
    return refuse(Status::PermissionDenied("peer hello needs a session of role peer"));
  }
  if (hello.node_id().empty() || hello.node_id() != session.client_name) {
    return refuse(
        Status::PermissionDenied(StrCat("peer hello for node '", hello.node_id(),
                                        "' on the session of '", session.client_name, "'")));
  }
  if (hello.node_id() == options_.self_id) {
    return refuse(Status::InvalidArgument("peer hello from this node itself"));
  }
  Result<bool> other = CheckCompatible(StrCat("peer ", hello.node_id()), hello.namespace_digest(),
                                       hello.geometry_fingerprints());
  if (!other.ok()) return refuse(other.status());
  {
    MutexLock lock(&mu_);
    other_order_[hello.node_id()] = *other;
    const PeerId id = IdOf(hello.node_id());
    // A restarted peer has a new address (connected again); the same address keeps the
    // connection, whose operations must not be cancelled by the peer's second session.
    if (Status st = ConnectEngine(hello.node_id(), id, AddressOf(hello.ucx_address())); !st.ok()) {
      ++stats_.hellos_refused;
      return st;
    }
    ++stats_.hellos_accepted;
  }
  rpc::PeerHelloRequest mine;
  FillHello(&mine);
  rpc::PeerHelloResponse out;
  out.set_node_id(mine.node_id());
  out.set_ucx_address(mine.ucx_address());
  out.set_namespace_digest(mine.namespace_digest());
  *out.mutable_geometry_fingerprints() = mine.geometry_fingerprints();
  KVMESH_LOG_INFO("peer hello accepted peer {} session {}", hello.node_id(), session.session_id);
  return out;
}

Result<PeerId> PeerSessions::ConnectedPeer(const std::string& node_id) const {
  MutexLock lock(&mu_);
  auto it = ids_.find(node_id);
  if (it == ids_.end() || !connected_.contains(node_id)) {
    return Status::FailedPrecondition(StrCat("peer ", node_id, " has not said hello"));
  }
  return it->second;
}

bool PeerSessions::OtherOrder(const std::string& node_id) const {
  MutexLock lock(&mu_);
  auto it = other_order_.find(node_id);
  return it != other_order_.end() && it->second;
}

PeerSessionStats PeerSessions::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kvmesh
