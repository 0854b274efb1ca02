// NCCL between GPUs of one host: a two-rank communicator over which one side sends a list of
// device slices (a request's blocks, every component) and the other receives them into its own
// slices, all of one call in one NCCL group (one kernel per direction, not one per block).
// Compiled when NCCL is found (KVMESH_HAVE_NCCL); the multigpu tests run it on hosts with >= 2
// GPUs and skip elsewhere.
//
// Bootstrap: NCCL needs both ranks to call ncclCommInitRank with the same 128-byte unique id. The
// side that will be rank 0 makes it (NcclLink::NewUniqueId) and sends it to the other over the
// control plane — the authenticated peer link, never a side channel — as an opaque byte string;
// each side then calls NcclLink::Create(id, rank, device). Create blocks until both ranks have
// joined, or fails at `init_timeout` (the communicator is aborted then: no rank is left waiting).
//
// Operations (Send / Receive): enqueued on the caller's CUDA stream; they return once enqueued.
//   - Source slices may be reused, and destination slices read, once the stream has passed the
//     operation (cudaStreamSynchronize or an event recorded after it) — not before.
//   - Slices are device pointers on this link's device, with lengths; both sides must give the
//     same number of slices with the same lengths in the same order (NCCL matches bytes, not
//     names: a mismatch is a hang or garbage, so the caller agrees on the block list first — the
//     handoff's plan does). Lengths are checked here against `max_bytes` and for zero.
//   - A peer that dies or stops leaves the operation pending: Wait(stream, deadline) polls the
//     stream and ncclCommGetAsyncError and, at the deadline or on an async error, aborts the
//     communicator (ncclCommAbort: NCCL stops touching the buffers) and returns kTimedOut or
//     kPeerUnreachable. After an abort the link is dead (every call fails); make a new one.
//
// Thread safety: one thread at a time per link (NCCL communicators are not thread-safe).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "common/result.h"
#include "common/status.h"

namespace kvmesh {

struct DeviceSlice {
  void* data = nullptr;  // device memory on the link's device
  std::size_t length = 0;
};

class NcclLink {
 public:
  // A fresh unique id (NCCL_UNIQUE_ID_BYTES bytes) for rank 0 to send to rank 1.
  static Result<std::string> NewUniqueId();

  // Joins the two-rank communicator `unique_id` as `rank` (0 or 1) on CUDA device `device`.
  static Result<std::unique_ptr<NcclLink>> Create(const std::string& unique_id, int rank,
                                                  int device,
                                                  std::chrono::milliseconds init_timeout);

  ~NcclLink();
  NcclLink(const NcclLink&) = delete;
  NcclLink& operator=(const NcclLink&) = delete;

  // Enqueues sends (receives) of every slice to (from) the other rank on `stream`, in one group.
  Status Send(std::span<const DeviceSlice> slices, cudaStream_t stream);
  Status Receive(std::span<const DeviceSlice> slices, cudaStream_t stream);

  // Waits for `stream` to pass what was enqueued, the link's async errors and `timeout` (see the
  // header comment: aborts the communicator on a timeout or an error).
  Status Wait(cudaStream_t stream, std::chrono::milliseconds timeout);

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] bool aborted() const { return aborted_; }

 private:
  NcclLink(ncclComm_t comm, int rank, int device) : comm_(comm), rank_(rank), device_(device) {}
  Status Enqueue(std::span<const DeviceSlice> slices, cudaStream_t stream, bool send);
  Status AbortWith(Status why);

  ncclComm_t comm_;
  int rank_;
  int device_;
  bool aborted_ = false;
};

}  // namespace kvmesh
