// Status and StatusOr<T>: how every fallible call in ds-runtime reports its result.
//
// The codes are the canonical ones shared by absl and gRPC (same numbers), so they
// cross the wire with a cast. Our code throws no exceptions; see STYLE 3.3.
//
//   StatusOr<Graph> g = LoadGraph("model.pbtxt");
//   if (!g.ok()) return g.status();
//   DS_ASSIGN_OR_RETURN(Graph graph, LoadGraph(path));   // status_macros.h
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace ds {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message" (for adding the file or caller).
  Status WithPrefix(const std::string& prefix) const;
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status CancelledError(std::string msg);
Status UnknownError(std::string msg);
Status InvalidArgumentError(std::string msg);
Status DeadlineExceededError(std::string msg);
Status NotFoundError(std::string msg);
Status AlreadyExistsError(std::string msg);
Status PermissionDeniedError(std::string msg);
Status ResourceExhaustedError(std::string msg);
Status FailedPreconditionError(std::string msg);
Status AbortedError(std::string msg);
Status OutOfRangeError(std::string msg);
Status UnimplementedError(std::string msg);
Status InternalError(std::string msg);
Status UnavailableError(std::string msg);
Status DataLossError(std::string msg);
Status UnauthenticatedError(std::string msg);
// errno -> Status with `context` (e.g. "open(ckpt/manifest.json)") and strerror text.
Status ErrnoToStatus(int err, const std::string& context);

// Either a value or a non-OK Status. Accessing the value of an error aborts.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) { assert(!status_.ok()); }        // NOLINT
  StatusOr(Status&& status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(const T& value) : value_(value) {}                                        // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}                                  // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status>>>
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T& value() & {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckOk() const;
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void DieOnBadStatusOrAccess(const Status& status);

template <typename T>
void StatusOr<T>::CheckOk() const {
  if (!status_.ok()) DieOnBadStatusOrAccess(status_);
}

}  // namespace ds
