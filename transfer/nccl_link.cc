// NcclLink: a two-rank NCCL communicator for device-to-device block moves on one host.
#include "transfer/nccl_link.h"

#include <cstring>
#include <thread>

#include "common/strings.h"

namespace kvmesh {
namespace {

Status NcclStatus(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::CudaError(StrCat(what, ": ", ncclGetErrorString(r)));
}

Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return Status::CudaError(
      StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Polls a non-blocking communicator until its pending init (or operation) finishes, fails or the
// deadline passes. ncclInProgress means still going.
Status PollComm(ncclComm_t comm, std::chrono::steady_clock::time_point deadline,
                std::string_view what) {
  for (;;) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) return NcclStatus(r, what);
    if (async == ncclSuccess) return Status::Ok();
    if (async != ncclInProgress) return NcclStatus(async, what);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::TimedOut(StrCat(what, ": the other rank did not join in time"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Result<std::string> NcclLink::NewUniqueId() {
  ncclUniqueId id;
  KVMESH_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return std::string(id.internal, sizeof(id.internal));
}

Result<std::unique_ptr<NcclLink>> NcclLink::Create(const std::string& unique_id, int rank,
                                                   int device,
                                                   std::chrono::milliseconds init_timeout) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return Status::InvalidArgument(
        StrCat("nccl unique id of ", unique_id.size(), " bytes; NCCL's are ", sizeof(id.internal)));
  }
  if (rank != 0 && rank != 1) {
    return Status::InvalidArgument(StrCat("nccl link rank ", rank, ": 0 or 1"));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  KVMESH_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), StrCat("cudaSetDevice ", device)));
  // Non-blocking, so that a rank whose peer never joins can give up (ncclCommAbort) at its
  // deadline instead of waiting in ncclCommInitRank forever.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) return NcclStatus(r, "ncclCommInitRankConfig");
  const Status joined =
      PollComm(comm, std::chrono::steady_clock::now() + init_timeout, "nccl link init");
  if (!joined.ok()) {
    (void)ncclCommAbort(comm);
    return joined;
  }
  return std::unique_ptr<NcclLink>(new NcclLink(comm, rank, device));
}

NcclLink::~NcclLink() {
  if (comm_ == nullptr) return;
  if (aborted_) return;  // ncclCommAbort freed it
  (void)cudaSetDevice(device_);
  // Finalize flushes what is still queued; when that does not end (the other rank is gone or
  // aborted), abort instead of destroying, which would wait for it.
  const ncclResult_t r = ncclCommFinalize(comm_);
  const bool finalized = (r == ncclSuccess || r == ncclInProgress) &&
                         PollComm(comm_, std::chrono::steady_clock::now() + std::chrono::seconds(5),
                                  "nccl link finalize")
                             .ok();
  (void)(finalized ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
}

Status NcclLink::Enqueue(std::span<const DeviceSlice> slices, cudaStream_t stream, bool send) {
  if (aborted_) return Status::FailedPrecondition("nccl link was aborted; make a new one");
  for (std::size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].data == nullptr || slices[i].length == 0) {
      return Status::InvalidArgument(StrCat("nccl link: slice ", i, " is empty"));
    }
  }
  KVMESH_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), StrCat("cudaSetDevice ", device_)));
  const int peer = 1 - rank_;
  KVMESH_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  Status st;
  for (const DeviceSlice& s : slices) {
    const ncclResult_t r = send ? ncclSend(s.data, s.length, ncclUint8, peer, comm_, stream)
                                : ncclRecv(s.data, s.length, ncclUint8, peer, comm_, stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      st = NcclStatus(r, send ? "ncclSend" : "ncclRecv");
      break;
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (st.ok() && end != ncclSuccess && end != ncclInProgress) st = NcclStatus(end, "ncclGroupEnd");
  if (!st.ok()) return AbortWith(std::move(st));
  return Status::Ok();
}

Status NcclLink::Send(std::span<const DeviceSlice> slices, cudaStream_t stream) {
  return Enqueue(slices, stream, true);
}

Status NcclLink::Receive(std::span<const DeviceSlice> slices, cudaStream_t stream) {
  return Enqueue(slices, stream, false);
}

Status NcclLink::Wait(cudaStream_t stream, std::chrono::milliseconds timeout) {
  if (aborted_) return Status::FailedPrecondition("nccl link was aborted; make a new one");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return Status::Ok();
    if (q != cudaErrorNotReady) return AbortWith(CudaStatus(q, "nccl link stream"));
    ncclResult_t async = ncclSuccess;
    (void)ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      return AbortWith(Status::PeerUnreachable(
          StrCat("nccl link to rank ", 1 - rank_, ": ", ncclGetErrorString(async))));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return AbortWith(Status::TimedOut(
          StrCat("nccl link to rank ", 1 - rank_, ": not done after ", timeout.count(), " ms")));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Status NcclLink::AbortWith(Status why) {
  if (!aborted_) {
    (void)ncclCommAbort(comm_);  // NCCL stops touching the slices; the communicator is freed
    aborted_ = true;
  }
  return why;
}

}  // namespace kvmesh
