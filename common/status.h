// Status: the outcome of an operation that can fail in a way the caller must handle.
//
// A Status is either OK or carries a code and a message. Codes are grouped so that a caller can
// decide what to do without parsing text:
// clang-format off
//   kInvalidArgument, kFailedPrecondition, kNotSupported  — the request is wrong: fail it, don't retry
//   kNotFound, kAlreadyExists                             — a lookup outcome
//   kResourceExhausted                                    — out of blocks/bytes: evict, wait or shed
//   kCorruption                                           — data failed a check: treat as a miss
//   kIoError, kCudaError                                  — the environment failed
//   kTimedOut, kCancelled                                 — the operation did not finish
//   kPeerUnreachable                                      — drop or retry the peer
//   kPermissionDenied                                     — authentication failed: fix the secret
//   kInternal                                             — a bug; the message says where
// clang-format on
//
// The numeric values are part of the control-plane protocol (node/proto/kvmesh_rpc.proto sends
// them): new codes are only ever appended.
//
// Status is [[nodiscard]]: ignoring one is a compile warning (an error in CI). A deliberate ignore
// is written as `status.IgnoreError();` so that a reader sees it.
//
// Thread safety: a Status is a value; distinct objects may be used from distinct threads.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>

namespace kvmesh {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,
  kFailedPrecondition,
  kNotSupported,
  kNotFound,
  kAlreadyExists,
  kResourceExhausted,
  kCorruption,
  kIoError,
  kCudaError,
  kTimedOut,
  kCancelled,
  kPeerUnreachable,
  kInternal,
  kPermissionDenied,
};

// Stable lower-case name of a code ("invalid_argument"), used in logs and in kvctl --json.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, std::move(msg)};
  }
  static Status NotSupported(std::string msg) {
    return {StatusCode::kNotSupported, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) {
    return {StatusCode::kAlreadyExists, std::move(msg)};
  }
  static Status ResourceExhausted(std::string msg) {
    return {StatusCode::kResourceExhausted, std::move(msg)};
  }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status CudaError(std::string msg) { return {StatusCode::kCudaError, std::move(msg)}; }
  static Status TimedOut(std::string msg) { return {StatusCode::kTimedOut, std::move(msg)}; }
  static Status Cancelled(std::string msg) { return {StatusCode::kCancelled, std::move(msg)}; }
  static Status PeerUnreachable(std::string msg) {
    return {StatusCode::kPeerUnreachable, std::move(msg)};
  }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status PermissionDenied(std::string msg) {
    return {StatusCode::kPermissionDenied, std::move(msg)};
  }

  [[nodiscard]] bool ok() const { return code_ == StatusCode::kOk; }
  [[nodiscard]] StatusCode code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }

  [[nodiscard]] bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  [[nodiscard]] bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  [[nodiscard]] bool IsResourceExhausted() const { return code_ == StatusCode::kResourceExhausted; }
  [[nodiscard]] bool IsCorruption() const { return code_ == StatusCode::kCorruption; }
  [[nodiscard]] bool IsNotSupported() const { return code_ == StatusCode::kNotSupported; }

  // "invalid_argument: tokens_per_block 3 is not a power of two greater than 1", or "ok".
  [[nodiscard]] std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` ("loading config.json: ...").
  Status WithContext(std::string_view context) const;

  // Marks a deliberate ignore, visible to a reader.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

}  // namespace kvmesh

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define KVMESH_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::kvmesh::Status kvmesh_status_ = (expr);        \
    if (!kvmesh_status_.ok()) return kvmesh_status_; \
  } while (0)
