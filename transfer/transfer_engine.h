// TransferEngine: moves batches of blocks (slices of registered host memory) between kvmesh nodes
// over UCX — the receiver grants where bytes may land, the sender sends source slices for that
// grant. docs/transfer.md has the design, the measurements and the security argument at length.
//
// Shape of one transfer:
//   receiver: RegisterRegion(pool or tier memory)          (once, at start-up)
//             Grant({sender, destination slices, deadline}) → TransferOp, id = TransferId
//             ── GrantInfo{id, slice lengths} travels to the sender over the control plane ──
//   sender:   RegisterRegion(source memory)                 (once)
//             Send({receiver, id, first_slice, source slices, deadline}) → TransferOp
//   both:     op.Wait() / on_complete
// Both sides must have Connect()ed each other (each passes the other's address()).
//
// Data path: every slice is one UCX active message of the rendezvous protocol (UCP_AM_SEND_FLAG_
// RNDV) whose 32-byte header names (transfer id, slice index, length). The receiver's handler
// checks the header against the grant and only then tells UCX where the bytes go
// (ucp_am_recv_data_nbx into the granted slice, with the region's registration); a refused slice is
// answered with an error that completes the sender's request. Over TCP UCX then streams the bytes
// as fragments into that buffer; over shared memory the receiver copies them with CMA. Not used:
// RMA put/get (collapses to tens of MB/s over TCP in UCX 1.13, and a remote key would let the peer
// write anywhere in a region at any time, outside any grant) and tag matching (UCX buffers
// unexpected tagged messages without bound).
//
// Completion semantics, per operation:
//   Grant      The destination slices are filled when the grant completes with OK (every slice
//              received whole). Completed with an error, the destination holds undefined bytes
//              (some slices may be whole, some partial) but UCX no longer writes into it: the grant
//              completes only after every receive it started has completed. Then the memory is the
//              caller's again. A grant that completes (either way) tells its sender (a "done"
//              message carrying the status).
//   Send       The source slices may be reused when the send completes (OK or not): UCX holds no
//              request on them. OK means more: the receiver confirmed that its grant completed with
//              OK, i.e. all of the grant's slices — this send's and those of other sends for the
//              same transfer — are in place. A send of part of a grant (first_slice > 0 or fewer
//              slices) therefore completes when the whole grant has.
//   Deadline / cancel of a grant: no further slice is accepted (the sender's requests for them
//              fail with kCancelled). If a rendezvous is in flight — UCX is writing into a granted
//              slice — it cannot be cancelled one by one (ucp_request_cancel covers tag receives
//              only), so the engine force-closes the connection to that peer (every outstanding
//              request on it completes with UCS_ERR_CANCELED, the peer's endpoint fails too) and
//              completes the grant once UCX has completed every receive: kTimedOut / kCancelled.
//              The peer must then be connected again (both sides call Connect).
//   Deadline / cancel of a send: slices not yet posted are not sent. Posted ones are rendezvous
//              requests UCX still reads from; if any are in flight the engine force-closes the
//              connection as above, then completes the send: kTimedOut / kCancelled. A receiver on
//              a shared-memory transport copies from the sender's memory itself (CMA) and may still
//              do so until it notices the closed connection: after a failed send, bytes of reused
//              source memory can reach a receiver that had accepted them, which is why block data
//              is always verified on receipt (bundle checksums) and why a failed send means a
//              failed transfer for both sides.
//   Peer failure (the peer dies, its connection breaks): every operation with that peer completes
//              with kPeerUnreachable once UCX has completed its requests — at once for TCP (the
//              socket closes), within about two keepalive intervals for shared memory (default
//              250 ms each: well under the 2 s bound the tests check). A peer that is alive but
//              stuck is caught by deadlines only. The failed connection stays failed until
//              Connect(peer, address) replaces it; other peers are not affected.
//
// Security (the receiver trusts nothing in a message): data lands only in a slice granted for that
// transfer id to the peer it arrives from (UCX's reply endpoint, matched to the connection the
// grant names); the slice index is bounds-checked, the length must equal the granted length,
// each slice is filled at most once, and only then does UCX get a destination pointer — computed
// by the receiver from its own grant, never from the message. A message for an unknown or expired
// transfer, or from the wrong peer, is refused at once (not buffered) and counted in stats(); a
// refused message for a live grant from its own peer fails that grant (kInvalidArgument). Eager
// (non-rendezvous) data is dropped. Transfer ids are 64 random bits (60 on an engine with lanes:
// the low 4 say how a grant is striped), so a peer cannot guess another peer's grant. Below kvmesh:
// UCX's own transports trust their peers (its TCP transport performs PUTs at whatever address its
// peer names, CMA needs only ptrace rights), so UCX must reach only authenticated nodes — the
// control plane gives addresses only to those.
//
// Progress and threads: each lane of the engine (one unless lanes > 1: "Lanes" below) owns one
// thread — its progress thread — that creates and alone touches the lane's UCX context, worker,
// endpoints and registrations. It progresses while events keep
// coming, polls on for TransferEngineOptions::busy_poll (none by default) and then sleeps on the
// worker's event fd, waking at least every idle_tick for deadlines and keepalive. Every public
// method may be called from any thread; it hands the work to the progress thread and waits for it
// (so a Grant is in the grant table before Grant returns). Called from the progress thread itself
// (inside an on_complete callback) a method runs inline. on_complete callbacks run on the progress
// thread, outside any UCX callback: they must be short and must not wait for another operation of
// this engine.
//
// Hot path: no allocation per slice. Grant and Send reserve their per-slice state once per
// operation; UCX requests come from UCX's own pools; each slice's header lives in that state. The
// send window (send_window_slices, send_window_bytes) bounds what one send has in flight.
//
// Lanes (TransferEngineOptions::lanes > 1): the engine runs that many progress threads, each with
// its own UCX context, worker and connection to each peer, and address() names them all (a peer's
// Connect takes either kind of address; an engine of one lane reaches a peer with lanes on its lane
// 0). Registrations are made on every lane. A grant of two or more slices averaging at least
// min_striped_slice_bytes, for a peer that has lanes too, is striped over w = min(the lanes both
// have, the slice count) lanes: slice g goes to lane (g mod w + g / w) mod w (a stride of slices —
// a block's header, bytes and checksum — does not keep landing on one lane), as one part per lane
// with the same transfer id, whose low 4 bits say w - 1 (a multi-lane engine's ids carry 60
// random bits). The sender reads w from the id and cuts each Send the same way. Everything above
// holds per part; for the whole:
//   - A grant completes when every part has: OK, or the first part's error. A part that fails has
//     the others cancelled, so the grant fails whole, as a single-lane one does.
//   - A send completes when its parts have. Its OK says that the grant's parts on the lanes it
//     used completed OK: the whole grant when it covered a slice on every lane. A failed part does
//     not cancel the others (that could close their lanes' connections under other transfers);
//     each ends with its receiver's answer, the peer's failure or the deadline.
//   - A message for a part that is over finds no grant on its lane (kNotFound for that send), where
//     the single-lane grant would have failed: a slice sent twice after its part completed.
//   - on_complete of a multi-lane op runs on the engine's coordinator thread (not a progress
//     thread): it may call the engine and must not wait for another op. GrantRequest::on_slice
//     may be called from several progress threads at once. Each lane has its own send window.
//
// GPU pools: UCX 1.13 (Debian) has no CUDA transports. The engine moves host memory only; a GPU
// block is staged by the caller through pinned host memory (a host-tier slot or a staging buffer,
// registered once) before Send and after a grant completes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "common/clock.h"
#include "common/result.h"
#include "transfer/transfer_op.h"
#include "transfer/transfer_types.h"
#include "transfer/ucx_context.h"

namespace kvmesh {

struct TransferEngineOptions {
  UcxContextOptions ucx;
  // Live grants at most; Grant beyond it → kResourceExhausted.
  std::uint32_t max_grants = 4096;
  // Slices of one grant or one send at most; beyond → kInvalidArgument.
  std::uint32_t max_slices_per_operation = 1u << 20;
  // Rendezvous sends one Send keeps in flight: at most this many slices and bytes (at least one
  // slice whatever its size). Defaults chosen by bench/transfer_bench (docs/transfer.md).
  std::uint32_t send_window_slices = 64;
  std::uint64_t send_window_bytes = 64ull << 20;
  // The progress thread spins this long after the last event before it sleeps on the event fd;
  // 0: it sleeps at once. 0 by default: blocks are large, so a wake-up per burst costs nothing
  // measurable, while a spinning thread takes a core from the threads that seal, verify and copy
  // (docs/transfer.md, "Threads and the hot path").
  std::chrono::microseconds busy_poll{0};
  // The longest the progress thread sleeps (deadline checks, UCX keepalive).
  std::chrono::milliseconds idle_tick{20};
  // Lanes, 1..16 (2 by default): each a progress thread with its own UCX context and worker. With a
  // peer that has lanes too, a grant or send of several slices is striped over min(ours, theirs)
  // lanes, so that as many threads copy its bytes (the receiver's CMA copies on shared memory, the
  // socket copies on TCP); see "Lanes" above.
  std::uint32_t lanes = 2;
  // A grant is striped only when its slices average at least this many bytes: a small slice costs
  // its rendezvous round trip and wake-ups, not a copy, and more threads only add wake-ups (on
  // shared memory, 64 KiB slices over 2 lanes moved 0.55x what one lane moved; 1 MiB ones 1.7x).
  std::uint64_t min_striped_slice_bytes = 256 * 1024;
  // Deadlines are read from this clock; SystemClock::Default() when null. Must outlive the engine.
  const Clock* clock = nullptr;
};

struct GrantRequest {
  PeerId sender;                  // the only peer whose data may land in these slices
  std::span<const Slice> slices;  // destination slices, in the order the sender addresses them
  TimePoint deadline;             // on the engine's clock; the grant fails with kTimedOut after it
  TransferCallback on_complete;   // optional
  // Optional: called with a slice's index once that slice is filled whole, before the grant
  // completes. From then on UCX never writes into that slice again (a slice is filled at most
  // once), so the caller may read it while the rest of the grant is still arriving — decode
  // block i while block i+1 is on the wire. It runs on the progress thread, possibly inside a
  // UCX callback: it must be short (hand the index to another thread) and must not call the
  // engine. A grant that then fails still ends with its op's error: what was read from filled
  // slices is whole, but the transfer as a whole failed.
  std::function<void(std::uint32_t slice)> on_slice;
};

struct SendRequest {
  PeerId receiver;
  TransferId transfer;            // from the receiver's GrantInfo
  std::uint32_t first_slice = 0;  // the grant's slice that slices[0] fills; the rest follow
  std::span<const Slice> slices;  // source slices; slices[i].length must equal the granted length
  TimePoint deadline;
  TransferCallback on_complete;  // optional
};

class TransferEngine {
 public:
  // Starts the progress thread and creates the UCX context and worker on it.
  // kInvalidArgument: bad options. Other codes: UCX could not start (UcxContext::Create).
  static Result<std::unique_ptr<TransferEngine>> Create(const TransferEngineOptions& options);
  // Cancels every operation (kCancelled), closes every connection, waits until UCX has completed
  // every request (bounded; logged if not), releases the registrations and stops the thread.
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // This engine's worker address, for the peers' Connect.
  [[nodiscard]] const WorkerAddress& address() const;

  // Connects `peer` at `address` (its address(), received over the authenticated control plane).
  // An existing connection to `peer` — healthy or failed — is replaced: its operations complete
  // with kCancelled first. kInvalidArgument: an empty or oversize address. kPeerUnreachable: no
  // transport reaches it.
  Status Connect(PeerId peer, const WorkerAddress& address);
  // Force-closes the connection; its operations complete with kCancelled. kNotFound: unknown peer.
  Status Disconnect(PeerId peer);

  // Registers [base, base + length) once (ucp_mem_map); the memory stays the caller's and must stay
  // mapped until DeregisterRegion. kInvalidArgument: null or empty.
  Result<RegionId> RegisterRegion(void* base, std::size_t length);
  // All or nothing, on every lane. kNotFound: unknown region. kFailedPrecondition: a live grant or
  // send uses it, or another call is deregistering it; the region is then kept whole. While a call
  // runs, a grant or send naming the region may be refused with kFailedPrecondition.
  Status DeregisterRegion(RegionId region);

  // Grants `request.slices` to `request.sender` (see the completion semantics above); the op's id()
  // is the transfer id to give the sender, with the slice lengths (GrantInfo).
  // kInvalidArgument: no slices, too many, an unknown region, a slice out of its region's bounds or
  // of length 0, two slices that overlap. kPeerUnreachable: the peer is not connected or its
  // connection failed. kResourceExhausted: max_grants live grants.
  // REQUIRES (not checked): the slices do not overlap those of another live grant.
  Result<TransferOp> Grant(const GrantRequest& request);
  // The grant completes with kCancelled (once UCX released its memory). kNotFound: no live grant.
  Status CancelGrant(TransferId transfer);

  // Sends `request.slices` for a grant of `request.receiver` (see the completion semantics above).
  // kInvalidArgument: no slices, too many, an invalid transfer id, an unknown region, a slice out
  // of bounds or of length 0. kPeerUnreachable: the peer is not connected or failed.
  // Whatever the receiver refuses completes the op: kNotFound (no live grant with that id for us),
  // kInvalidArgument (index or length not as granted; the grant fails too), kCancelled (the grant
  // was closing).
  Result<TransferOp> Send(const SendRequest& request);
  // Cancels every send of ours for `transfer` to `peer`: they complete with kCancelled. kNotFound:
  // none is live.
  Status CancelSend(PeerId peer, TransferId transfer);

  // A snapshot of the counters (TransferStats). Thread-safe, does not wait for the progress thread.
  [[nodiscard]] TransferStats stats() const;

  class Impl;

 private:
  explicit TransferEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvmesh
