// The engine core's set-up, connections, regions, deadlines and the loop iteration.
#include "transfer/engine_core.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "common/log.h"

namespace kvmesh::internal {

TransferStats AtomicStats::Snapshot() const {
  const auto get = [](const std::atomic<std::uint64_t>& v) {
    return v.load(std::memory_order_relaxed);
  };
  TransferStats s;
  s.grants_started = get(grants_started);
  s.grants_completed = get(grants_completed);
  s.grants_failed = get(grants_failed);
  s.sends_started = get(sends_started);
  s.sends_completed = get(sends_completed);
  s.sends_failed = get(sends_failed);
  s.slices_received = get(slices_received);
  s.bytes_received = get(bytes_received);
  s.slices_sent = get(slices_sent);
  s.bytes_sent = get(bytes_sent);
  s.slices_receiving = get(slices_receiving);
  s.rejected_malformed = get(rejected_malformed);
  s.rejected_unknown_peer = get(rejected_unknown_peer);
  s.rejected_unknown_transfer = get(rejected_unknown_transfer);
  s.rejected_wrong_peer = get(rejected_wrong_peer);
  s.rejected_bad_slice = get(rejected_bad_slice);
  s.rejected_closed = get(rejected_closed);
  s.unknown_done = get(unknown_done);
  s.peer_failures = get(peer_failures);
  s.forced_closes = get(forced_closes);
  return s;
}

EngineCore::EngineCore(const TransferEngineOptions& options, std::thread::id thread)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : SystemClock::Default()),
      thread_(thread) {}

EngineCore::~EngineCore() {
  // Shutdown() has run: no operation is live. Endpoints go before the worker, registrations and
  // the worker before the context (member order would do it the other way round for some).
  connections_.clear();
  regions_.clear();
  worker_.reset();
  context_.reset();
}

Status EngineCore::Init() {
  KVMESH_ASSIGN_OR_RETURN(context_, UcxContext::Create(options_.ucx));
  KVMESH_ASSIGN_OR_RETURN(worker_, UcxWorker::Create(*context_));
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  const ucs_status_t query = ucp_worker_query(worker_->get(), &attr);
  if (query != UCS_OK) return UcsToStatus(query, "ucp_worker_query");
  if (attr.max_am_header < sizeof(wire::DataHeader)) {
    return Status::NotSupported("UCX allows active-message headers of " +
                                std::to_string(attr.max_am_header) + " bytes, need " +
                                std::to_string(sizeof(wire::DataHeader)));
  }
  const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {
      {wire::kAmData, &EngineCore::OnData}, {wire::kAmDone, &EngineCore::OnDone}};
  for (const auto& [id, callback] : handlers) {
    ucp_am_handler_param_t param{};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    param.id = id;
    param.cb = callback;
    param.arg = this;
    param.flags = UCP_AM_FLAG_WHOLE_MSG;
    const ucs_status_t status = ucp_worker_set_am_recv_handler(worker_->get(), &param);
    if (status != UCS_OK) return UcsToStatus(status, "ucp_worker_set_am_recv_handler");
  }
  for (auto* list : {&dirty_grants_, &scratch_grants_}) list->reserve(64);
  for (auto* list : {&dirty_sends_, &scratch_sends_}) list->reserve(64);
  completions_.reserve(16);
  scratch_completions_.reserve(16);
  return Status::Ok();
}

void EngineCore::Shutdown() {
  const Status cancelled = Status::Cancelled("transfer engine shutting down");
  for (auto& [id, grant] : grants_) {
    if (grant->failure.ok()) grant->failure = cancelled;
    MarkDirty(grant.get());
  }
  for (auto& [key, list] : sends_) {
    for (auto& send : list) {
      if (send->failure.ok()) send->failure = cancelled;
      MarkDirty(send.get());
    }
  }
  for (auto& connection : connections_) FailConnection(connection.get(), cancelled, true);
  const auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((!grants_.empty() || !sends_.empty() || !connections_.empty() || done_in_flight_ > 0) &&
         std::chrono::steady_clock::now() < bound) {
    RunOnce();
  }
  if (!grants_.empty() || !sends_.empty() || !connections_.empty()) {
    KVMESH_LOG_ERROR("transfer shutdown_incomplete grants {} sends {} connections {}",
                     grants_.size(), sends_.size(), connections_.size());
  }
  FlushCompletions();
}

Status EngineCore::Connect(PeerId peer, const WorkerAddress& address) {
  auto it = peers_.find(peer);
  if (it != peers_.end()) {
    FailConnection(it->second,
                   Status::Cancelled("peer " + std::to_string(peer.value) + " reconnected"),
                   /*force_close=*/true);
    peers_.erase(it);
  }
  auto connection = std::make_unique<Connection>();
  connection->peer = peer;
  Connection* raw = connection.get();
  KVMESH_ASSIGN_OR_RETURN(connection->ep,
                          UcxEndpoint::Create(*worker_, address, [this, raw](ucs_status_t status) {
                            OnEndpointError(raw, status);
                          }));
  connection->handle = connection->ep->get();
  by_ep_[connection->handle] = raw;
  peers_[peer] = raw;
  connections_.push_back(std::move(connection));
  ProcessDirty();  // the replaced connection's operations
  return Status::Ok();
}

Status EngineCore::Disconnect(PeerId peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return Status::NotFound("unknown peer " + std::to_string(peer.value));
  FailConnection(it->second,
                 Status::Cancelled("peer " + std::to_string(peer.value) + " disconnected"),
                 /*force_close=*/true);
  peers_.erase(it);
  ProcessDirty();
  return Status::Ok();
}

// A peer that closes its side (a node stopping) reaches here too: UCX's TCP transport reports the
// closed socket as "Endpoint timeout". So the log says what was lost: a warning when operations
// failed with the connection, information when none was in flight.
void EngineCore::OnEndpointError(Connection* connection, ucs_status_t status) {
  stats_.peer_failures.fetch_add(1, std::memory_order_relaxed);
  const std::size_t failed =
      FailConnection(connection,
                     Status::PeerUnreachable("peer " + std::to_string(connection->peer.value) +
                                             " failed: " + ucs_status_string(status)),
                     /*force_close=*/true);
  if (failed > 0) {
    KVMESH_LOG_WARN("transfer peer_failed peer {} status {} operations_failed {}",
                    connection->peer.value, ucs_status_string(status), failed);
  } else {
    KVMESH_LOG_INFO("transfer peer_connection_lost peer {} status {} operations_failed 0",
                    connection->peer.value, ucs_status_string(status));
  }
}

// Marks only (safe inside UCX callbacks); AdvanceConnections closes at loop level.
std::size_t EngineCore::FailConnection(Connection* connection, const Status& status,
                                       bool force_close) {
  if (connection->failed) return 0;
  connection->failed = true;
  connection->failure = status;
  connection->close_requested = force_close;
  by_ep_.erase(connection->handle);
  std::size_t live = 0;
  for (auto& [id, grant] : grants_) {
    if (grant->connection != connection) continue;
    if (grant->failure.ok()) {
      grant->failure = status;
      ++live;
    }
    MarkDirty(grant.get());
  }
  for (auto& [key, list] : sends_) {
    if (key.connection != connection) continue;
    for (auto& send : list) {
      if (send->failure.ok()) {
        send->failure = status;
        ++live;
      }
      MarkDirty(send.get());
    }
  }
  connections_dirty_ = true;
  return live;
}

void EngineCore::AdvanceConnections() {
  connections_dirty_ = false;
  for (auto& connection : connections_) {
    if (connection->close_requested) {
      connection->close_requested = false;
      connection->ep->StartClose(UcxCloseMode::kForce);  // may complete requests inline
    }
  }
  auto gone = std::remove_if(connections_.begin(), connections_.end(), [this](auto& connection) {
    if (!connection->failed || connection->ops != 0) return false;
    connection->ep->StartClose(UcxCloseMode::kForce);
    if (!connection->ep->CloseDone()) {
      connections_dirty_ = true;  // look again next iteration
      return false;
    }
    auto peer = peers_.find(connection->peer);
    if (peer != peers_.end() && peer->second == connection.get()) peers_.erase(peer);
    return true;
  });
  connections_.erase(gone, connections_.end());
}

Result<Connection*> EngineCore::LiveConnection(PeerId peer) const {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    return Status::PeerUnreachable("peer " + std::to_string(peer.value) + " is not connected");
  }
  if (it->second->failed) {
    return Status::PeerUnreachable(it->second->failure.message() + "; connect the peer again");
  }
  return it->second;
}

Result<RegionId> EngineCore::RegisterRegion(void* base, std::size_t length) {
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<UcxMemoryRegion> memory,
                          UcxMemoryRegion::Map(*context_, base, length));
  const RegionId id{next_region_++};
  auto entry = std::make_unique<RegionEntry>();
  entry->memory = std::move(memory);
  regions_.emplace(id.value, std::move(entry));
  return id;
}

Status EngineCore::DeregisterRegion(RegionId region) {
  KVMESH_RETURN_IF_ERROR(CloseRegion(region));  // refused while a live slice uses it
  regions_.erase(region.value);
  return Status::Ok();
}

Status EngineCore::CloseRegion(RegionId region) {
  auto it = regions_.find(region.value);
  if (it == regions_.end()) {
    return Status::NotFound("unknown region " + std::to_string(region.value));
  }
  if (it->second->users != 0) {
    return Status::FailedPrecondition("region " + std::to_string(region.value) + " is used by " +
                                      std::to_string(it->second->users) + " live slices");
  }
  it->second->closing = true;
  return Status::Ok();
}

void EngineCore::ReopenRegion(RegionId region) {
  if (auto it = regions_.find(region.value); it != regions_.end()) it->second->closing = false;
}

Result<RegionEntry*> EngineCore::ResolveSlice(const Slice& slice) const {
  auto it = regions_.find(slice.region.value);
  if (it == regions_.end()) {
    return Status::InvalidArgument("unknown region " + std::to_string(slice.region.value));
  }
  if (it->second->closing) {
    return Status::FailedPrecondition("region " + std::to_string(slice.region.value) +
                                      " is being deregistered");
  }
  const std::uint64_t size = it->second->memory->length();
  if (slice.length == 0 || slice.offset > size || slice.length > size - slice.offset) {
    return Status::InvalidArgument("slice [" + std::to_string(slice.offset) + ", +" +
                                   std::to_string(slice.length) + ") is not inside region " +
                                   std::to_string(slice.region.value) + " of " +
                                   std::to_string(size) + " bytes");
  }
  return it->second.get();
}

void EngineCore::CheckDeadlines() {
  const TimePoint now = clock_->Now();
  if (now < next_deadline_) return;
  TimePoint next = TimePoint::max();
  for (auto& [id, grant] : grants_) {
    if (grant->phase != OpPhase::kActive || !grant->failure.ok()) continue;
    if (grant->deadline <= now) {
      grant->failure =
          Status::TimedOut("grant " + std::to_string(id.value) + " for peer " +
                           std::to_string(grant->connection->peer.value) + " passed its deadline");
      grant->force_close_on_drain = true;
      MarkDirty(grant.get());
    } else {
      next = std::min(next, grant->deadline);
    }
  }
  for (auto& [key, list] : sends_) {
    for (auto& send : list) {
      if (send->phase != OpPhase::kActive || !send->failure.ok()) continue;
      if (send->deadline <= now) {
        send->failure =
            Status::TimedOut("send of transfer " + std::to_string(key.transfer) + " to peer " +
                             std::to_string(key.connection->peer.value) + " passed its deadline");
        send->force_close_on_drain = true;
        MarkDirty(send.get());
      } else {
        next = std::min(next, send->deadline);
      }
    }
  }
  next_deadline_ = next;
}

void EngineCore::MarkDirty(GrantState* grant) {
  if (grant->dirty || grant->phase == OpPhase::kFinished) return;
  grant->dirty = true;
  dirty_grants_.push_back(grant);
}

void EngineCore::MarkDirty(SendState* send) {
  if (send->dirty || send->phase == OpPhase::kFinished) return;
  send->dirty = true;
  dirty_sends_.push_back(send);
}

void EngineCore::ProcessDirty() {
  // The scratch vectors keep their capacity: no allocation per iteration.
  while (!dirty_grants_.empty() || !dirty_sends_.empty() || connections_dirty_) {
    scratch_grants_.swap(dirty_grants_);
    scratch_sends_.swap(dirty_sends_);
    for (GrantState* grant : scratch_grants_) {
      grant->dirty = false;
      AdvanceGrant(grant);
    }
    for (SendState* send : scratch_sends_) {
      send->dirty = false;
      AdvanceSend(send);
    }
    scratch_grants_.clear();
    scratch_sends_.clear();
    if (connections_dirty_) {
      AdvanceConnections();
      if (dirty_grants_.empty() && dirty_sends_.empty()) break;  // a close still pending
    }
  }
  finished_grants_.clear();
  finished_sends_.clear();
}

void EngineCore::Complete(const std::shared_ptr<TransferOpState>& op, Status status) {
  completions_.emplace_back(op, std::move(status));
}

void EngineCore::FlushCompletions() {
  while (!completions_.empty()) {
    scratch_completions_.swap(completions_);
    for (const auto& [op, status] : scratch_completions_) op->Complete(status);
    scratch_completions_.clear();
  }
}

unsigned EngineCore::RunOnce() {
  unsigned events = 0;
  for (int i = 0; i < 8; ++i) {
    const unsigned n = worker_->Progress();
    events += n;
    if (n == 0) break;
  }
  // Deadlines are looked at when idle and every 64th busy iteration (a clock read is not free).
  if (events == 0 || (++iterations_ & 63) == 0) CheckDeadlines();
  ProcessDirty();
  FlushCompletions();
  return events;
}

}  // namespace kvmesh::internal
