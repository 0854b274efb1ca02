// Result<T>: a value or the Status saying why there is none.
//
// A Result holds exactly one of them. Accessing value() of an error Result is a checked failure
// (a bug in the caller), not undefined behaviour. Result is [[nodiscard]] like Status.
//
// Thread safety: a value type; distinct objects may be used from distinct threads.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "common/check.h"
#include "common/status.h"

namespace kvmesh {

template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> makes no sense");

 public:
  // REQUIRES: !status.ok()
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    KVMESH_CHECK(!status_.ok()) << "Result constructed from an OK status without a value";
  }
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, Result<T>>>>
  Result(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return value_.has_value(); }
  // OK when a value is held.
  [[nodiscard]] const Status& status() const { return status_; }

  [[nodiscard]] const T& value() const& {
    CheckHasValue();
    return *value_;
  }
  T& value() & {
    CheckHasValue();
    return *value_;
  }
  T&& value() && {
    CheckHasValue();
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  void CheckHasValue() const {
    KVMESH_CHECK(value_.has_value()) << "value() of an error Result: " << status_.ToString();
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace kvmesh

#define KVMESH_CONCAT_INNER_(a, b) a##b
#define KVMESH_CONCAT_(a, b) KVMESH_CONCAT_INNER_(a, b)

// KVMESH_ASSIGN_OR_RETURN(auto plan, BuildPoolPlan(spec, config));
// Evaluates the Result expression; returns its Status from the enclosing function on error, else
// moves the value into `lhs`.
#define KVMESH_ASSIGN_OR_RETURN(lhs, expr) \
  KVMESH_ASSIGN_OR_RETURN_IMPL_(KVMESH_CONCAT_(kvmesh_result_, __LINE__), lhs, expr)
#define KVMESH_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
