// EngineCore: the state and the state machines of a TransferEngine (internal to transfer/). Every
// member is confined to the engine's progress thread; transfer_engine.cc hands it work.
//
// Connections (one per peer, plus failed or closing ones until UCX released them):
//   live     in by_ep_, accepts new operations and messages
//   failed   the error callback ran, or the engine force-closed it (to abort an in-flight
//            rendezvous, Disconnect, a replacing Connect): out of by_ep_, its operations fail,
//            new ones on the peer are refused (kPeerUnreachable) until Connect replaces it
//   gone     closed by UCX and no operation refers to it: destroyed
//
// Grants (receiver side), with per-slice states empty → receiving → filled:
//   active    accepting slices; completes with OK when every slice is filled
//   draining  deadline, cancel, protocol violation, receive error or connection failure: refuses
//             slices (UCS_ERR_CANCELED to the sender); if receives are in flight and the connection
//             is live, force-closes it; completes once no receive is in flight
//   finished  out of the grant table (its id is unknown from then on), "done" sent to the peer if
//             the connection is live; the op completes; freed at the end of the loop iteration
//
// Sends (sender side):
//   active    posts slices within the window as earlier ones complete; completes with OK when all
//             are posted and completed and the receiver's "done" said OK
//   draining  an error, a failed "done", deadline, cancel or connection failure: posts nothing
//             more; on deadline/cancel with requests in flight force-closes the connection;
//             completes once no request is in flight
//   finished  as for grants
//
// UCX callbacks (data and done handlers, request completions, endpoint errors) only update
// counters and slice states and put the grant, send or connection on a dirty list; Advance*() at
// loop level makes every other transition, so nothing is freed or closed inside a UCX callback.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "transfer/transfer_engine.h"
#include "transfer/ucx_context.h"
#include "transfer/ucx_endpoint.h"
#include "transfer/ucx_memory.h"
#include "transfer/ucx_worker.h"
#include "transfer/wire_format.h"

namespace kvmesh::internal {

struct RegionEntry {
  std::unique_ptr<UcxMemoryRegion> memory;
  std::uint64_t users = 0;  // live grants and sends with a slice in it
  bool closing = false;     // CloseRegion'd: no new grant or send may use it
};

class EngineCore;
struct GrantState;
struct SendState;

struct Connection {
  PeerId peer;
  std::unique_ptr<UcxEndpoint> ep;
  ucp_ep_h handle = nullptr;
  bool failed = false;
  bool close_requested = false;  // a forced close is due (done at loop level)
  Status failure;                // why it failed
  std::uint32_t ops = 0;         // unfinished grants and sends bound to it
};

enum class OpPhase : std::uint8_t { kActive, kDraining, kFinished };
enum class SliceState : std::uint8_t { kEmpty, kReceiving, kFilled, kFailed };

struct GrantSlice {
  std::byte* destination = nullptr;
  std::uint64_t length = 0;
  ucp_mem_h memh = nullptr;
  GrantState* grant = nullptr;
  SliceState state = SliceState::kEmpty;
};

struct GrantState {
  EngineCore* core = nullptr;
  TransferId id;
  Connection* connection = nullptr;
  TimePoint deadline;
  std::vector<GrantSlice> slices;
  std::vector<RegionEntry*> regions;  // one entry per slice's region use (released on finish)
  std::uint32_t filled = 0;
  std::uint32_t receiving = 0;
  OpPhase phase = OpPhase::kActive;
  Status failure;  // set by callbacks or aborts; the grant drains once set
  bool force_close_on_drain = false;
  bool dirty = false;
  std::shared_ptr<TransferOpState> op;
  std::function<void(std::uint32_t)> on_slice;  // GrantRequest::on_slice
};

struct SendSlice {
  const std::byte* source = nullptr;
  std::uint64_t length = 0;
  ucp_mem_h memh = nullptr;
  SendState* send = nullptr;
  wire::DataHeader header;  // lives as long as UCX may read it
};

struct SendState {
  EngineCore* core = nullptr;
  TransferId id;
  Connection* connection = nullptr;
  TimePoint deadline;
  std::vector<SendSlice> slices;
  std::vector<RegionEntry*> regions;
  std::uint32_t next_to_post = 0;
  std::uint32_t in_flight = 0;
  std::uint64_t in_flight_bytes = 0;
  std::uint32_t completed = 0;
  bool done_received = false;
  Status remote_status;  // from the receiver's "done"
  OpPhase phase = OpPhase::kActive;
  Status failure;
  bool force_close_on_drain = false;
  bool dirty = false;
  std::shared_ptr<TransferOpState> op;
};

// A "done" message on its way: the header must outlive the UCX request.
struct DoneMessage {
  wire::DoneHeader header;
  EngineCore* core = nullptr;
};

// The counters, written on the progress thread, read from anywhere.
struct AtomicStats {
  std::atomic<std::uint64_t> grants_started{0}, grants_completed{0}, grants_failed{0};
  std::atomic<std::uint64_t> sends_started{0}, sends_completed{0}, sends_failed{0};
  std::atomic<std::uint64_t> slices_received{0}, bytes_received{0}, slices_sent{0}, bytes_sent{0};
  std::atomic<std::uint64_t> slices_receiving{0};
  std::atomic<std::uint64_t> rejected_malformed{0}, rejected_unknown_peer{0},
      rejected_unknown_transfer{0}, rejected_wrong_peer{0}, rejected_bad_slice{0},
      rejected_closed{0}, unknown_done{0}, peer_failures{0}, forced_closes{0};
  [[nodiscard]] TransferStats Snapshot() const;
};

class EngineCore {
 public:
  EngineCore(const TransferEngineOptions& options, std::thread::id thread);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  Status Init();
  // Cancels everything and waits (bounded) until UCX completed every request and closed every
  // endpoint. Call once, before destruction.
  void Shutdown();

  [[nodiscard]] const WorkerAddress& address() const { return worker_->address(); }
  [[nodiscard]] UcxWorker& worker() { return *worker_; }
  [[nodiscard]] const AtomicStats& stats() const { return stats_; }

  Status Connect(PeerId peer, const WorkerAddress& address);
  Status Disconnect(PeerId peer);
  Result<RegionId> RegisterRegion(void* base, std::size_t length);
  Status DeregisterRegion(RegionId region);
  // The first step of a multi-lane engine's DeregisterRegion: refuses (kFailedPrecondition) while
  // a live grant or send uses the region, else keeps every new one from using it (ResolveSlice:
  // kFailedPrecondition) until ReopenRegion or DeregisterRegion. kNotFound: unknown region.
  Status CloseRegion(RegionId region);
  void ReopenRegion(RegionId region);
  // `id`: the transfer id to use (a multi-lane grant's, the same on every lane); a new random one
  // when invalid. kAlreadyExists: `id` names a live grant.
  Result<TransferOp> Grant(const GrantRequest& request, TransferId id = {});
  Status CancelGrant(TransferId transfer);
  Result<TransferOp> Send(const SendRequest& request);
  Status CancelSend(PeerId peer, TransferId transfer);

  // One iteration of the loop: progress, dirty states, deadlines, closes, completions. Returns the
  // number of UCX events processed.
  unsigned RunOnce();
  // Runs the completions collected so far (on_complete callbacks). Safe points only.
  void FlushCompletions();
  // The earliest deadline of a live operation (TimePoint::max() when none).
  [[nodiscard]] TimePoint NextDeadline() const { return next_deadline_; }
  [[nodiscard]] const Clock& clock() const { return *clock_; }

 private:
  // engine_receive.cc
  static ucs_status_t OnData(void* arg, const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t AcceptData(const wire::DataHeader& header, void* data, std::size_t length,
                          Connection* from);
  static void OnReceiveDone(void* request, ucs_status_t status, std::size_t length,
                            void* user_data);
  // A slice received whole: counted, GrantRequest::on_slice told, the grant marked for progress.
  void SliceFilled(GrantSlice* slice);
  void AdvanceGrant(GrantState* grant);
  void FinishGrant(GrantState* grant, Status status);
  void SendDone(Connection* connection, TransferId id, const Status& status, std::uint32_t filled);
  static void OnDoneSent(void* request, ucs_status_t status, void* user_data);
  Result<std::unique_ptr<GrantState>> BuildGrant(const GrantRequest& request);
  TransferId NewTransferId() const;

  // engine_send.cc
  static ucs_status_t OnDone(void* arg, const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param);
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  void PostSlices(SendState* send);
  void AdvanceSend(SendState* send);
  void FinishSend(SendState* send, Status status);
  Result<std::unique_ptr<SendState>> BuildSend(const SendRequest& request);
  Status SliceError(ucs_status_t status, const SendState& send) const;

  // engine_core.cc: connections
  void OnEndpointError(Connection* connection, ucs_status_t status);
  // How many live grants and sends it failed (0 when the connection had failed already).
  std::size_t FailConnection(Connection* connection, const Status& status, bool force_close);
  void AdvanceConnections();
  Result<Connection*> LiveConnection(PeerId peer) const;
  Result<RegionEntry*> ResolveSlice(const Slice& slice) const;
  void CheckDeadlines();
  void MarkDirty(GrantState* grant);
  void MarkDirty(SendState* send);
  void ProcessDirty();
  void Complete(const std::shared_ptr<TransferOpState>& op, Status status);

  struct SendKey {
    Connection* connection;
    std::uint64_t transfer;
    friend bool operator==(const SendKey&, const SendKey&) = default;
  };
  struct SendKeyHash {
    std::size_t operator()(const SendKey& key) const noexcept {
      return std::hash<const void*>()(key.connection) ^ (key.transfer * 0x9e3779b97f4a7c15ull);
    }
  };

  const TransferEngineOptions options_;
  const Clock* clock_;
  const std::thread::id thread_;
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;

  std::unordered_map<std::uint32_t, std::unique_ptr<RegionEntry>> regions_;
  std::uint32_t next_region_ = 1;

  std::vector<std::unique_ptr<Connection>> connections_;  // every connection not yet gone
  std::unordered_map<PeerId, Connection*> peers_;         // the current one per peer
  std::unordered_map<ucp_ep_h, Connection*> by_ep_;       // live ones only

  std::unordered_map<TransferId, std::unique_ptr<GrantState>> grants_;
  std::unordered_map<SendKey, std::vector<std::unique_ptr<SendState>>, SendKeyHash> sends_;

  std::vector<GrantState*> dirty_grants_, scratch_grants_;
  std::vector<SendState*> dirty_sends_, scratch_sends_;
  bool connections_dirty_ = false;
  std::vector<std::unique_ptr<GrantState>> finished_grants_;
  std::vector<std::unique_ptr<SendState>> finished_sends_;
  std::vector<std::pair<std::shared_ptr<TransferOpState>, Status>> completions_,
      scratch_completions_;
  std::vector<std::unique_ptr<DoneMessage>> done_pool_;  // free "done" messages
  std::uint64_t done_in_flight_ = 0;

  TimePoint next_deadline_ = TimePoint::max();
  std::uint64_t iterations_ = 0;
  AtomicStats stats_;
};

}  // namespace kvmesh::internal
