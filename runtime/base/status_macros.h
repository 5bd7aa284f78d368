// DS_RETURN_IF_ERROR(expr): returns the Status of `expr` from the caller when not OK.
// DS_ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr, returns its error or assigns.
#pragma once

#include "runtime/base/status.h"

#define DS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::ds::Status _ds_status = (expr);        \
    if (!_ds_status.ok()) return _ds_status; \
  } while (0)

#define DS_STATUS_CONCAT_INNER(a, b) a##b
#define DS_STATUS_CONCAT(a, b) DS_STATUS_CONCAT_INNER(a, b)

#define DS_ASSIGN_OR_RETURN(lhs, expr) \
  DS_ASSIGN_OR_RETURN_IMPL(DS_STATUS_CONCAT(_ds_statusor_, __LINE__), lhs, expr)

#define DS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()
