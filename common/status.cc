#include "common/status.h"

#include <ostream>

namespace kvmesh {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kNotSupported: return "not_supported";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kCudaError: return "cuda_error";
    case StatusCode::kTimedOut: return "timed_out";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kPeerUnreachable: return "peer_unreachable";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kPermissionDenied: return "permission_denied";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

std::ostream& operator<<(std::ostream& os, const Status& status) { return os << status.ToString(); }

}  // namespace kvmesh
