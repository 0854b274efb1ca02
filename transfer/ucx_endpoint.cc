#include "transfer/ucx_endpoint.h"

#include <chrono>

#include "common/log.h"

namespace kvmesh {

namespace {
constexpr std::size_t kMaxAddressBytes = 64 * 1024;
constexpr auto kCloseBound = std::chrono::seconds(5);
}  // namespace

Result<std::unique_ptr<UcxEndpoint>> UcxEndpoint::Create(UcxWorker& worker,
                                                         std::span<const std::byte> address,
                                                         UcxErrorHandler on_error) {
  if (address.empty() || address.size() > kMaxAddressBytes) {
    return Status::InvalidArgument("worker address of " + std::to_string(address.size()) +
                                   " bytes (expected 1.." + std::to_string(kMaxAddressBytes) + ")");
  }
  std::unique_ptr<UcxEndpoint> endpoint(new UcxEndpoint(&worker, std::move(on_error)));
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxEndpoint::OnError;
  params.err_handler.arg = endpoint.get();
  const ucs_status_t status = ucp_ep_create(worker.get(), &params, &endpoint->ep_);
  if (status != UCS_OK) {
    endpoint->closed_ = true;  // nothing to close
    Status error = UcsToStatus(status, "ucp_ep_create");
    if (error.code() == StatusCode::kInternal || error.code() == StatusCode::kNotSupported) {
      return Status::PeerUnreachable(error.message());
    }
    return error;
  }
  return endpoint;
}

void UcxEndpoint::OnError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* self = static_cast<UcxEndpoint*>(arg);
  if (self->closing_ || self->failed_) return;
  self->failed_ = true;
  if (self->on_error_) self->on_error_(status);
}

void UcxEndpoint::StartClose(UcxCloseMode mode) {
  if (closing_ || closed_) return;
  closing_ = true;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // A failed endpoint can only be force-closed (a flush would wait on a dead peer).
  param.flags = (mode == UcxCloseMode::kForce || failed_) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* request = ucp_ep_close_nbx(ep_, &param);
  if (request == nullptr) {
    closed_ = true;
  } else if (UCS_PTR_IS_ERR(request)) {
    // The endpoint is released even when the close reports an error (UCX 1.13 ucp_ep_close_nbx).
    KVMESH_LOG_DEBUG("ucx endpoint close status {}", ucs_status_string(UCS_PTR_STATUS(request)));
    closed_ = true;
  } else {
    close_request_ = request;
  }
}

bool UcxEndpoint::CloseDone() {
  if (closed_) return true;
  if (close_request_ == nullptr) return false;
  if (ucp_request_check_status(close_request_) == UCS_INPROGRESS) return false;
  ucp_request_free(close_request_);
  close_request_ = nullptr;
  closed_ = true;
  return true;
}

UcxEndpoint::~UcxEndpoint() {
  if (closed_) return;
  StartClose(UcxCloseMode::kForce);
  const auto start = std::chrono::steady_clock::now();
  while (!CloseDone()) {
    worker_->Progress();
    if (std::chrono::steady_clock::now() - start > kCloseBound) {
      KVMESH_LOG_ERROR("ucx endpoint close did not complete within 5 s; leaking its request");
      return;
    }
  }
}

}  // namespace kvmesh
