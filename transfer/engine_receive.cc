// The receiver side of the engine: grants, the data handler, receive completions, "done" messages.
#include <sys/random.h>

#include <algorithm>
#include <string>

#include "common/log.h"
#include "transfer/engine_core.h"

namespace kvmesh::internal {

TransferId EngineCore::NewTransferId() const {
  while (true) {
    std::uint64_t value = 0;
    if (getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) continue;
    const TransferId id{value};
    if (id.valid() && grants_.find(id) == grants_.end()) return id;
  }
}

Result<std::unique_ptr<GrantState>> EngineCore::BuildGrant(const GrantRequest& request) {
  if (request.slices.empty() || request.slices.size() > options_.max_slices_per_operation) {
    return Status::InvalidArgument("a grant needs 1.." +
                                   std::to_string(options_.max_slices_per_operation) +
                                   " slices, got " + std::to_string(request.slices.size()));
  }
  KVMESH_ASSIGN_OR_RETURN(Connection * connection, LiveConnection(request.sender));
  auto grant = std::make_unique<GrantState>();
  grant->core = this;
  grant->connection = connection;
  grant->deadline = request.deadline;
  grant->on_slice = request.on_slice;
  grant->slices.reserve(request.slices.size());
  grant->regions.reserve(request.slices.size());
  for (std::size_t i = 0; i < request.slices.size(); ++i) {
    Result<RegionEntry*> region = ResolveSlice(request.slices[i]);
    if (!region.ok()) return region.status().WithContext("slice " + std::to_string(i));
    GrantSlice slice;
    slice.destination = (*region)->memory->base() + request.slices[i].offset;
    slice.length = request.slices[i].length;
    slice.memh = (*region)->memory->memh();
    slice.grant = grant.get();
    grant->slices.push_back(slice);
    grant->regions.push_back(*region);
  }
  // Overlapping slices would let one slice's bytes land in another's: refused.
  std::vector<std::pair<const std::byte*, std::uint64_t>> ranges;
  ranges.reserve(grant->slices.size());
  for (const GrantSlice& slice : grant->slices)
    ranges.emplace_back(slice.destination, slice.length);
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) {
      return Status::InvalidArgument("two slices of the grant overlap");
    }
  }
  return grant;
}

Result<TransferOp> EngineCore::Grant(const GrantRequest& request, TransferId id) {
  if (id.valid() && grants_.find(id) != grants_.end()) {
    return Status::AlreadyExists("transfer " + std::to_string(id.value) + " is a live grant");
  }
  if (grants_.size() >= options_.max_grants) {
    return Status::ResourceExhausted("max_grants " + std::to_string(options_.max_grants) +
                                     " live grants");
  }
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<GrantState> grant, BuildGrant(request));
  grant->id = id.valid() ? id : NewTransferId();
  grant->op = std::make_shared<TransferOpState>(grant->id, request.on_complete, thread_);
  for (RegionEntry* region : grant->regions) ++region->users;
  ++grant->connection->ops;
  next_deadline_ = std::min(next_deadline_, grant->deadline);
  TransferOp op(grant->op);
  grants_.emplace(grant->id, std::move(grant));
  stats_.grants_started.fetch_add(1, std::memory_order_relaxed);
  return op;
}

Status EngineCore::CancelGrant(TransferId transfer) {
  auto it = grants_.find(transfer);
  if (it == grants_.end()) {
    return Status::NotFound("no live grant " + std::to_string(transfer.value));
  }
  GrantState* grant = it->second.get();
  if (grant->failure.ok()) {
    grant->failure = Status::Cancelled("grant " + std::to_string(transfer.value) + " cancelled");
    grant->force_close_on_drain = true;
  }
  MarkDirty(grant);
  return Status::Ok();
}

ucs_status_t EngineCore::OnData(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<EngineCore*>(arg);
  // Only rendezvous data is accepted: eager data would already be in a UCX buffer, to be dropped.
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    self->stats_.rejected_malformed.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;
  }
  const std::optional<wire::DataHeader> parsed = wire::ParseDataHeader(header, header_length);
  if (!parsed) {
    self->stats_.rejected_malformed.fetch_add(1, std::memory_order_relaxed);
    return UCS_ERR_INVALID_PARAM;
  }
  Connection* from = nullptr;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) {
    auto it = self->by_ep_.find(param->reply_ep);
    if (it != self->by_ep_.end()) from = it->second;
  }
  if (from == nullptr) {
    self->stats_.rejected_unknown_peer.fetch_add(1, std::memory_order_relaxed);
    return UCS_ERR_NO_ELEM;
  }
  return self->AcceptData(*parsed, data, length, from);
}

// Every check before UCX learns a destination. Returns UCS_INPROGRESS when the receive was started
// (UCX owns `data` then), an error status (sent back to the sender's request) otherwise.
ucs_status_t EngineCore::AcceptData(const wire::DataHeader& header, void* data, std::size_t length,
                                    Connection* from) {
  auto it = grants_.find(TransferId{header.transfer});
  if (it == grants_.end()) {
    stats_.rejected_unknown_transfer.fetch_add(1, std::memory_order_relaxed);
    return UCS_ERR_NO_ELEM;
  }
  GrantState* grant = it->second.get();
  if (grant->connection != from) {
    // Answered like an unknown id: a third party learns nothing about the grant.
    stats_.rejected_wrong_peer.fetch_add(1, std::memory_order_relaxed);
    return UCS_ERR_NO_ELEM;
  }
  if (grant->phase != OpPhase::kActive || !grant->failure.ok()) {
    stats_.rejected_closed.fetch_add(1, std::memory_order_relaxed);
    return UCS_ERR_CANCELED;
  }
  if (header.slice >= grant->slices.size() || header.length != length ||
      header.length != grant->slices[header.slice].length ||
      grant->slices[header.slice].state != SliceState::kEmpty) {
    stats_.rejected_bad_slice.fetch_add(1, std::memory_order_relaxed);
    grant->failure = Status::InvalidArgument(
        "peer " + std::to_string(from->peer.value) + " sent slice " + std::to_string(header.slice) +
        " of " + std::to_string(length) + " bytes for transfer " + std::to_string(header.transfer) +
        ", which grants " + std::to_string(grant->slices.size()) + " slices" +
        (header.slice < grant->slices.size()
             ? " (that one: " + std::to_string(grant->slices[header.slice].length) + " bytes, " +
                   (grant->slices[header.slice].state == SliceState::kEmpty ? "empty" : "taken") +
                   ")"
             : std::string()));
    MarkDirty(grant);
    return UCS_ERR_INVALID_PARAM;
  }
  GrantSlice& slice = grant->slices[header.slice];
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMH;
  param.cb.recv_am = &EngineCore::OnReceiveDone;
  param.user_data = &slice;
  param.datatype = ucp_dt_make_contig(1);
  param.memh = slice.memh;
  void* request =
      ucp_am_recv_data_nbx(worker_->get(), data, slice.destination, slice.length, &param);
  if (request == nullptr) {  // completed at once
    SliceFilled(&slice);
  } else if (UCS_PTR_IS_ERR(request)) {
    slice.state = SliceState::kFailed;
    grant->failure = UcsToStatus(UCS_PTR_STATUS(request), "ucp_am_recv_data_nbx");
    MarkDirty(grant);
  } else {
    slice.state = SliceState::kReceiving;
    ++grant->receiving;
    stats_.slices_receiving.fetch_add(1, std::memory_order_relaxed);
  }
  return UCS_INPROGRESS;  // UCX owns the descriptor once ucp_am_recv_data_nbx was called
}

void EngineCore::OnReceiveDone(void* request, ucs_status_t status, std::size_t length,
                               void* user_data) {
  ucp_request_free(request);
  auto* slice = static_cast<GrantSlice*>(user_data);
  GrantState* grant = slice->grant;
  EngineCore* self = grant->core;
  --grant->receiving;
  self->stats_.slices_receiving.fetch_sub(1, std::memory_order_relaxed);
  if (status == UCS_OK && length == slice->length) {
    self->SliceFilled(slice);
    return;
  }
  slice->state = SliceState::kFailed;
  if (grant->failure.ok()) {
    // A receive that UCX ended with an error means the connection broke or was closed.
    grant->failure = Status::PeerUnreachable(
        status == UCS_OK ? "short receive of a slice"
                         : std::string("receive of a slice: ") + ucs_status_string(status));
  }
  self->MarkDirty(grant);
}

void EngineCore::SliceFilled(GrantSlice* slice) {
  GrantState* grant = slice->grant;
  slice->state = SliceState::kFilled;
  ++grant->filled;
  stats_.slices_received.fetch_add(1, std::memory_order_relaxed);
  stats_.bytes_received.fetch_add(slice->length, std::memory_order_relaxed);
  if (grant->on_slice) grant->on_slice(static_cast<std::uint32_t>(slice - grant->slices.data()));
  MarkDirty(grant);
}

void EngineCore::AdvanceGrant(GrantState* grant) {
  if (grant->phase == OpPhase::kFinished) return;
  if (grant->phase == OpPhase::kActive) {
    if (grant->failure.ok() && grant->filled == grant->slices.size()) {
      FinishGrant(grant, Status::Ok());
      return;
    }
    if (grant->failure.ok()) return;
    grant->phase = OpPhase::kDraining;
  }
  if (grant->receiving == 0) {
    FinishGrant(grant, grant->failure);
    return;
  }
  // UCX is still writing into a slice of a grant that has failed: only closing the connection
  // ends those receives (ucp_request_cancel does not cover them).
  if (!grant->connection->failed) {
    stats_.forced_closes.fetch_add(1, std::memory_order_relaxed);
    FailConnection(
        grant->connection,
        Status::Cancelled("connection closed to abort transfer " + std::to_string(grant->id.value) +
                          ": " + grant->failure.message()),
        /*force_close=*/true);
  }
}

void EngineCore::FinishGrant(GrantState* grant, Status status) {
  KVMESH_CHECK_EQ(grant->receiving, 0u);
  grant->phase = OpPhase::kFinished;
  for (RegionEntry* region : grant->regions) --region->users;
  Connection* connection = grant->connection;
  --connection->ops;
  connections_dirty_ = true;
  if (!connection->failed) SendDone(connection, grant->id, status, grant->filled);
  (status.ok() ? stats_.grants_completed : stats_.grants_failed)
      .fetch_add(1, std::memory_order_relaxed);
  if (!status.ok()) {
    KVMESH_LOG_DEBUG("transfer grant_failed id {} peer {} status {}", grant->id.value,
                     connection->peer.value, status.ToString());
  }
  Complete(grant->op, std::move(status));
  auto it = grants_.find(grant->id);
  KVMESH_CHECK(it != grants_.end());
  finished_grants_.push_back(std::move(it->second));
  grants_.erase(it);
}

void EngineCore::SendDone(Connection* connection, TransferId id, const Status& status,
                          std::uint32_t filled) {
  std::unique_ptr<DoneMessage> message;
  if (done_pool_.empty()) {
    message = std::make_unique<DoneMessage>();
  } else {
    message = std::move(done_pool_.back());
    done_pool_.pop_back();
  }
  message->core = this;
  message->header = wire::DoneHeader{};
  message->header.transfer = id.value;
  message->header.status = static_cast<std::uint32_t>(status.code());
  message->header.filled = filled;
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &EngineCore::OnDoneSent;
  param.user_data = message.get();
  param.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  void* request = ucp_am_send_nbx(connection->handle, wire::kAmDone, &message->header,
                                  sizeof(message->header), nullptr, 0, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    if (UCS_PTR_IS_ERR(request)) {
      KVMESH_LOG_DEBUG("transfer done_send_failed id {} status {}", id.value,
                       ucs_status_string(UCS_PTR_STATUS(request)));
    }
    done_pool_.push_back(std::move(message));
    return;
  }
  ++done_in_flight_;
  static_cast<void>(message.release());  // owned by the request until OnDoneSent frees it
}

void EngineCore::OnDoneSent(void* request, ucs_status_t /*status*/, void* user_data) {
  ucp_request_free(request);
  auto* message = static_cast<DoneMessage*>(user_data);
  EngineCore* self = message->core;
  --self->done_in_flight_;
  self->done_pool_.emplace_back(message);
}

}  // namespace kvmesh::internal
