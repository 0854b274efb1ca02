// UcxWorker: RAII owner of a UCP worker (ucp_worker_create / ucp_worker_destroy) and of its
// address blob.
//
// Progress model: an explicit progress loop, no progress thread inside the wrapper. The owner calls
// Progress() (ucp_worker_progress) from its loop; to sleep it calls Arm() and, when that returns
// true, waits for event_fd() to become readable (poll/epoll) before progressing again. Nothing
// completes — no callback runs, no byte of a receive buffer is written — except inside Progress()
// (and inside the calls that start or close operations). The TransferEngine runs this loop on its
// own thread (transfer_engine.h).
//
// Thread safety: confined. The worker is created with UCS_THREAD_MODE_SINGLE: it, its endpoints and
// every operation on them are used by one thread at a time — in kvmesh, the thread that created it.
// The context must outlive the worker; endpoints must be destroyed before it.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>

#include "common/result.h"
#include "transfer/transfer_types.h"
#include "transfer/ucx_context.h"

namespace kvmesh {

class UcxWorker {
 public:
  // kInternal / kNotSupported: ucp_worker_create or ucp_worker_get_address failed.
  static Result<std::unique_ptr<UcxWorker>> Create(UcxContext& context);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  [[nodiscard]] ucp_worker_h get() const { return worker_; }
  [[nodiscard]] UcxContext& context() const { return *context_; }

  // The blob a peer passes to UcxEndpoint::Create to reach this worker (all transports of the
  // context, with their devices). Opaque; sent over the control plane, never to an unknown party.
  [[nodiscard]] const WorkerAddress& address() const { return address_; }

  // Runs one round of ucp_worker_progress; returns the number of events processed (0: idle).
  unsigned Progress() { return ucp_worker_progress(worker_); }

  // Arms the event fd for sleeping. true: armed, wait on event_fd(); false: events are pending,
  // call Progress() first. kInternal on any other UCX error.
  Result<bool> Arm();
  // Readable when the worker has events. REQUIRES: the context has UCP_FEATURE_WAKEUP (UcxContext
  // always sets it).
  [[nodiscard]] int event_fd() const { return event_fd_; }

 private:
  UcxWorker(UcxContext* context, ucp_worker_h worker, WorkerAddress address, int event_fd)
      : context_(context), worker_(worker), address_(std::move(address)), event_fd_(event_fd) {}

  UcxContext* context_;
  ucp_worker_h worker_;
  WorkerAddress address_;
  int event_fd_;
};

}  // namespace kvmesh
