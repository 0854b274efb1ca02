#include "transfer/ucx_worker.h"

#include <cstring>
#include <utility>

namespace kvmesh {

Result<std::unique_ptr<UcxWorker>> UcxWorker::Create(UcxContext& context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  ucs_status_t status = ucp_worker_create(context.get(), &params, &worker);
  if (status != UCS_OK) return UcsToStatus(status, "ucp_worker_create");

  ucp_address_t* raw_address = nullptr;
  std::size_t length = 0;
  status = ucp_worker_get_address(worker, &raw_address, &length);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker);
    return UcsToStatus(status, "ucp_worker_get_address");
  }
  WorkerAddress address(length);
  std::memcpy(address.data(), raw_address, length);
  ucp_worker_release_address(worker, raw_address);

  int event_fd = -1;
  status = ucp_worker_get_efd(worker, &event_fd);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker);
    return UcsToStatus(status, "ucp_worker_get_efd");
  }
  return std::unique_ptr<UcxWorker>(new UcxWorker(&context, worker, std::move(address), event_fd));
}

UcxWorker::~UcxWorker() { ucp_worker_destroy(worker_); }

Result<bool> UcxWorker::Arm() {
  const ucs_status_t status = ucp_worker_arm(worker_);
  if (status == UCS_OK) return true;
  if (status == UCS_ERR_BUSY) return false;
  return UcsToStatus(status, "ucp_worker_arm");
}

}  // namespace kvmesh
