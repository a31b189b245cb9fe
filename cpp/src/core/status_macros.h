// XDL_RETURN_IF_ERROR / XDL_ASSIGN_OR_RETURN: absl's status_macros.h, which Debian's absl lacks.
#ifndef XDL_TRACE_CORE_STATUS_MACROS_H_
#define XDL_TRACE_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status of `expr` from the enclosing function when it is not OK.
#define XDL_RETURN_IF_ERROR(expr)                                  \
  do {                                                             \
    ::absl::Status xdl_status_ = (expr);                           \
    if (ABSL_PREDICT_FALSE(!xdl_status_.ok())) return xdl_status_; \
  } while (false)

// `lhs = *(rexpr)` when the StatusOr `rexpr` is OK, else returns its status.
// `lhs` may declare a variable: XDL_ASSIGN_OR_RETURN(auto file, Open(path));
#define XDL_ASSIGN_OR_RETURN(lhs, rexpr) \
  XDL_ASSIGN_OR_RETURN_IMPL_(XDL_STATUS_MACROS_CONCAT_(xdl_statusor_, __LINE__), lhs, rexpr)

#define XDL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)            \
  auto statusor = (rexpr);                                          \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) return statusor.status(); \
  lhs = std::move(statusor).value()

#define XDL_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define XDL_STATUS_MACROS_CONCAT_(x, y) XDL_STATUS_MACROS_CONCAT_INNER_(x, y)

#endif  // XDL_TRACE_CORE_STATUS_MACROS_H_
