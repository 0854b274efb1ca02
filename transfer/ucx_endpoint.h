// UcxEndpoint: RAII owner of a UCP endpoint to a peer worker, created from the peer's address blob
// (UcxWorker::address() on the other side, carried over kvmesh's authenticated control plane), with
// peer error handling (UCP_ERR_HANDLING_MODE_PEER).
//
// Peer error handling: when the peer dies or its connection breaks, UCX completes every
// outstanding operation on the endpoint with an error and then calls the error handler (once, from
// inside UcxWorker::Progress()). A dead TCP peer is seen when its socket closes (at once on a
// SIGKILL: the kernel closes it); a dead shared-memory peer by UCX's keepalive
// (UcxContextOptions::keepalive_interval). A peer that is alive but stuck is not an error for UCX:
// only deadlines catch it (transfer_engine.h).
//
// Matching: when two workers each create one endpoint to the other, UCX connects the two into one
// connection (it matches them by worker id and sequence number), whichever is created first; the
// reply endpoint of a message from that peer is then this endpoint. The TransferEngine relies on it
// to tell which peer a message came from.
//
// Closing: StartClose(kForce) completes every outstanding operation with UCS_ERR_CANCELED and
// tears the connection down (the peer sees its endpoint fail); kFlush first lets outstanding
// operations finish. Either way UCX may still use the endpoint until CloseDone() returns true. No
// error handler call happens after StartClose. The destructor force-closes an endpoint that was not
// closed and progresses the worker until UCX has released it (bounded: 5 s, then it logs and
// leaks the close request rather than block forever).
//
// Thread safety: confined to the worker's thread. REQUIRES for StartClose and the destructor: not
// called from inside a UCX callback (they may progress the worker).
#pragma once

#include <ucp/api/ucp.h>

#include <functional>
#include <memory>
#include <span>

#include "common/result.h"
#include "transfer/ucx_worker.h"

namespace kvmesh {

enum class UcxCloseMode { kFlush, kForce };

// Called from inside UcxWorker::Progress() with the UCX status the endpoint failed with.
using UcxErrorHandler = std::function<void(ucs_status_t)>;

class UcxEndpoint {
 public:
  // kInvalidArgument: an empty or oversize (> 64 KiB) address. kPeerUnreachable: UCX found no
  // transport that reaches the address (e.g. shared memory to another host) or refused it.
  static Result<std::unique_ptr<UcxEndpoint>> Create(UcxWorker& worker,
                                                     std::span<const std::byte> address,
                                                     UcxErrorHandler on_error);
  ~UcxEndpoint();
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  [[nodiscard]] ucp_ep_h get() const { return ep_; }
  // True once the error handler has run.
  [[nodiscard]] bool failed() const { return failed_; }

  // Starts closing; idempotent (a second call does nothing).
  void StartClose(UcxCloseMode mode);
  // True when UCX no longer uses the endpoint (the close completed). False before StartClose.
  bool CloseDone();

 private:
  UcxEndpoint(UcxWorker* worker, UcxErrorHandler on_error)
      : worker_(worker), on_error_(std::move(on_error)) {}
  static void OnError(void* arg, ucp_ep_h ep, ucs_status_t status);

  UcxWorker* worker_;
  UcxErrorHandler on_error_;
  ucp_ep_h ep_ = nullptr;
  bool failed_ = false;
  bool closing_ = false;
  bool closed_ = false;
  void* close_request_ = nullptr;
};

}  // namespace kvmesh
