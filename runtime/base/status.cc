#include "runtime/base/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ds {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN_CODE";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithPrefix(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + message_);
}

#define DS_DEFINE_ERROR(Fn, Code) \
  Status Fn(std::string msg) { return Status(StatusCode::Code, std::move(msg)); }
DS_DEFINE_ERROR(CancelledError, kCancelled)
DS_DEFINE_ERROR(UnknownError, kUnknown)
DS_DEFINE_ERROR(InvalidArgumentError, kInvalidArgument)
DS_DEFINE_ERROR(DeadlineExceededError, kDeadlineExceeded)
DS_DEFINE_ERROR(NotFoundError, kNotFound)
DS_DEFINE_ERROR(AlreadyExistsError, kAlreadyExists)
DS_DEFINE_ERROR(PermissionDeniedError, kPermissionDenied)
DS_DEFINE_ERROR(ResourceExhaustedError, kResourceExhausted)
DS_DEFINE_ERROR(FailedPreconditionError, kFailedPrecondition)
DS_DEFINE_ERROR(AbortedError, kAborted)
DS_DEFINE_ERROR(OutOfRangeError, kOutOfRange)
DS_DEFINE_ERROR(UnimplementedError, kUnimplemented)
DS_DEFINE_ERROR(InternalError, kInternal)
DS_DEFINE_ERROR(UnavailableError, kUnavailable)
DS_DEFINE_ERROR(DataLossError, kDataLoss)
DS_DEFINE_ERROR(UnauthenticatedError, kUnauthenticated)
#undef DS_DEFINE_ERROR

Status ErrnoToStatus(int err, const std::string& context) {
  std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
      return NotFoundError(msg);
    case EEXIST:
      return AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
      return PermissionDeniedError(msg);
    case ENOSPC:
    case ENOMEM:
      return ResourceExhaustedError(msg);
    case EINVAL:
      return InvalidArgumentError(msg);
    case EIO:
      return DataLossError(msg);
    default:
      return UnknownError(msg);
  }
}

void DieOnBadStatusOrAccess(const Status& status) {
  std::fprintf(stderr, "fatal: value() of a StatusOr holding %s\n", status.ToString().c_str());
  std::abort();
}

}  // namespace ds
