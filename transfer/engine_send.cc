// The sender side of the engine: sends, the send window, request completions, "done" handling.
#include <algorithm>
#include <string>

#include "common/log.h"
#include "transfer/engine_core.h"

namespace kvmesh::internal {

Result<std::unique_ptr<SendState>> EngineCore::BuildSend(const SendRequest& request) {
  if (!request.transfer.valid()) return Status::InvalidArgument("send needs a transfer id");
  if (request.slices.empty() || request.slices.size() > options_.max_slices_per_operation) {
    return Status::InvalidArgument("a send needs 1.." +
                                   std::to_string(options_.max_slices_per_operation) +
                                   " slices, got " + std::to_string(request.slices.size()));
  }
  if (request.slices.size() > std::uint64_t{UINT32_MAX} - request.first_slice) {
    return Status::InvalidArgument("first_slice + slice count overflows 32 bits");
  }
  KVMESH_ASSIGN_OR_RETURN(Connection * connection, LiveConnection(request.receiver));
  auto send = std::make_unique<SendState>();
  send->core = this;
  send->id = request.transfer;
  send->connection = connection;
  send->deadline = request.deadline;
  send->slices.reserve(request.slices.size());
  send->regions.reserve(request.slices.size());
  for (std::size_t i = 0; i < request.slices.size(); ++i) {
    Result<RegionEntry*> region = ResolveSlice(request.slices[i]);
    if (!region.ok()) return region.status().WithContext("slice " + std::to_string(i));
    SendSlice slice;
    slice.source = (*region)->memory->base() + request.slices[i].offset;
    slice.length = request.slices[i].length;
    slice.memh = (*region)->memory->memh();
    slice.send = send.get();
    slice.header.transfer = request.transfer.value;
    slice.header.slice = request.first_slice + static_cast<std::uint32_t>(i);
    slice.header.length = slice.length;
    send->slices.push_back(slice);
    send->regions.push_back(*region);
  }
  return send;
}

Result<TransferOp> EngineCore::Send(const SendRequest& request) {
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<SendState> send, BuildSend(request));
  send->op = std::make_shared<TransferOpState>(send->id, request.on_complete, thread_);
  for (RegionEntry* region : send->regions) ++region->users;
  ++send->connection->ops;
  next_deadline_ = std::min(next_deadline_, send->deadline);
  TransferOp op(send->op);
  SendState* raw = send.get();
  sends_[SendKey{send->connection, send->id.value}].push_back(std::move(send));
  stats_.sends_started.fetch_add(1, std::memory_order_relaxed);
  PostSlices(raw);
  MarkDirty(raw);  // an error while posting is handled at loop level
  return op;
}

Status EngineCore::CancelSend(PeerId peer, TransferId transfer) {
  auto peer_it = peers_.find(peer);
  if (peer_it == peers_.end()) {
    return Status::NotFound("unknown peer " + std::to_string(peer.value));
  }
  auto it = sends_.find(SendKey{peer_it->second, transfer.value});
  if (it == sends_.end()) {
    return Status::NotFound("no live send of transfer " + std::to_string(transfer.value));
  }
  for (const std::unique_ptr<SendState>& send : it->second) {
    if (send->failure.ok()) {
      send->failure =
          Status::Cancelled("send of transfer " + std::to_string(transfer.value) + " cancelled");
      send->force_close_on_drain = true;
    }
    MarkDirty(send.get());
  }
  return Status::Ok();
}

void EngineCore::PostSlices(SendState* send) {
  while (send->phase == OpPhase::kActive && send->failure.ok() &&
         send->next_to_post < send->slices.size()) {
    SendSlice& slice = send->slices[send->next_to_post];
    if (send->in_flight >= options_.send_window_slices) break;
    if (send->in_flight > 0 && send->in_flight_bytes + slice.length > options_.send_window_bytes) {
      break;
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE |
                         UCP_OP_ATTR_FIELD_MEMH;
    param.cb.send = &EngineCore::OnSendDone;
    param.user_data = &slice;
    // Rendezvous always: the receiver decides where the bytes go before any byte moves.
    param.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_RNDV;
    param.datatype = ucp_dt_make_contig(1);
    param.memh = slice.memh;
    void* request = ucp_am_send_nbx(send->connection->handle, wire::kAmData, &slice.header,
                                    sizeof(slice.header), slice.source, slice.length, &param);
    ++send->next_to_post;
    if (request == nullptr) {
      ++send->completed;
      stats_.slices_sent.fetch_add(1, std::memory_order_relaxed);
      stats_.bytes_sent.fetch_add(slice.length, std::memory_order_relaxed);
    } else if (UCS_PTR_IS_ERR(request)) {
      send->failure = SliceError(UCS_PTR_STATUS(request), *send);
    } else {
      ++send->in_flight;
      send->in_flight_bytes += slice.length;
    }
  }
}

void EngineCore::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  auto* slice = static_cast<SendSlice*>(user_data);
  SendState* send = slice->send;
  EngineCore* self = send->core;
  --send->in_flight;
  send->in_flight_bytes -= slice->length;
  if (status == UCS_OK) {
    ++send->completed;
    self->stats_.slices_sent.fetch_add(1, std::memory_order_relaxed);
    self->stats_.bytes_sent.fetch_add(slice->length, std::memory_order_relaxed);
  } else if (send->failure.ok()) {
    send->failure = self->SliceError(status, *send);
  }
  self->MarkDirty(send);
}

// What a failed slice request means. The receiver answers a refused slice with the status its
// data handler returned (engine_receive.cc: AcceptData).
Status EngineCore::SliceError(ucs_status_t status, const SendState& send) const {
  const std::string id = std::to_string(send.id.value);
  const std::string peer = std::to_string(send.connection->peer.value);
  if (send.connection->failed) {
    return Status::PeerUnreachable("send of transfer " + id + ": " +
                                   send.connection->failure.message());
  }
  switch (status) {
    case UCS_ERR_NO_ELEM:
      return Status::NotFound("peer " + peer + " has no live grant " + id +
                              " for us (never granted, expired or complete)");
    case UCS_ERR_INVALID_PARAM:
      return Status::InvalidArgument("peer " + peer + " refused a slice of transfer " + id +
                                     " (index or length not as granted)");
    case UCS_ERR_CANCELED: return Status::Cancelled("peer " + peer + " closed grant " + id);
    default: return UcsToStatus(status, "send of transfer " + id + " to peer " + peer);
  }
}

ucs_status_t EngineCore::OnDone(void* arg, const void* header, std::size_t header_length,
                                void* /*data*/, std::size_t /*length*/,
                                const ucp_am_recv_param_t* param) {
  auto* self = static_cast<EngineCore*>(arg);
  const std::optional<wire::DoneHeader> parsed = wire::ParseDoneHeader(header, header_length);
  Connection* from = nullptr;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) {
    auto it = self->by_ep_.find(param->reply_ep);
    if (it != self->by_ep_.end()) from = it->second;
  }
  if (!parsed || from == nullptr) {
    self->stats_.unknown_done.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;
  }
  auto it = self->sends_.find(SendKey{from, parsed->transfer});
  if (it == self->sends_.end()) {
    self->stats_.unknown_done.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;
  }
  const auto code = static_cast<StatusCode>(parsed->status);
  const Status remote =
      code == StatusCode::kOk
          ? Status::Ok()
          : Status(code, "peer " + std::to_string(from->peer.value) + " completed transfer " +
                             std::to_string(parsed->transfer) + " with " +
                             std::string(StatusCodeName(code)) + " (" +
                             std::to_string(parsed->filled) + " slices filled)");
  for (const std::unique_ptr<SendState>& send : it->second) {
    send->done_received = true;
    send->remote_status = remote;
    self->MarkDirty(send.get());
  }
  return UCS_OK;
}

void EngineCore::AdvanceSend(SendState* send) {
  if (send->phase == OpPhase::kFinished) return;
  if (send->phase == OpPhase::kActive) {
    if (send->failure.ok() && send->done_received && !send->remote_status.ok()) {
      send->failure = send->remote_status;
    }
    if (send->failure.ok()) {
      PostSlices(send);
      if (send->failure.ok()) {
        if (send->completed == send->slices.size() && send->done_received) {
          FinishSend(send, Status::Ok());
        }
        return;
      }
    }
    send->phase = OpPhase::kDraining;
  }
  if (send->in_flight == 0) {
    FinishSend(send, send->failure);
    return;
  }
  // Posted rendezvous sends UCX still reads from: only closing the connection ends them early.
  if (send->force_close_on_drain && !send->connection->failed) {
    stats_.forced_closes.fetch_add(1, std::memory_order_relaxed);
    FailConnection(
        send->connection,
        Status::Cancelled("connection closed to abort a send of transfer " +
                          std::to_string(send->id.value) + ": " + send->failure.message()),
        /*force_close=*/true);
  }
}

void EngineCore::FinishSend(SendState* send, Status status) {
  KVMESH_CHECK_EQ(send->in_flight, 0u);
  send->phase = OpPhase::kFinished;
  for (RegionEntry* region : send->regions) --region->users;
  Connection* connection = send->connection;
  --connection->ops;
  connections_dirty_ = true;
  (status.ok() ? stats_.sends_completed : stats_.sends_failed)
      .fetch_add(1, std::memory_order_relaxed);
  if (!status.ok()) {
    KVMESH_LOG_DEBUG("transfer send_failed id {} peer {} status {}", send->id.value,
                     connection->peer.value, status.ToString());
  }
  Complete(send->op, std::move(status));
  auto it = sends_.find(SendKey{connection, send->id.value});
  KVMESH_CHECK(it != sends_.end());
  auto& list = it->second;
  auto pos = std::find_if(list.begin(), list.end(),
                          [send](const std::unique_ptr<SendState>& s) { return s.get() == send; });
  KVMESH_CHECK(pos != list.end());
  finished_sends_.push_back(std::move(*pos));
  list.erase(pos);
  if (list.empty()) sends_.erase(it);
}

}  // namespace kvmesh::internal
