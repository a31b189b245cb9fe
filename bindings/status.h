// Maps absl::Status to Python exceptions (types from xdl_trace.errors), in one place.
#ifndef XDL_TRACE_BINDINGS_STATUS_H_
#define XDL_TRACE_BINDINGS_STATUS_H_

#include <pybind11/pybind11.h>

#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xdl_trace {
namespace python {

// A Python exception raised inside a callback the core called (a provider or
// a summary) cannot cross the core, which does not throw. The callback parks
// the exception here and returns a status instead; ThrowIfError re-raises the
// parked exception when the core hands that status back. One slot per thread
// (callbacks run on the thread that called Step); touched only with the GIL.
class PendingPythonError {
 public:
  // Parks the exception currently held by `error` (replacing any older one)
  // and returns an error status carrying its message.
  static absl::Status Park(pybind11::error_already_set& error);
  // Forgets the parked exception, if any.
  static void Clear();
  // Raises the parked exception (and forgets it) if there is one.
  static void RaiseIfAny();
};

// Throws pybind11::error_already_set for a non-OK status:
//   a parked Python exception       -> re-raised as is
//   payload kTypeErrorPayload       -> TypeError
//   payload kMissingGradientPayload -> the message gains how to call send_gradient
//   payload kIoErrorPayload (io/io_error.h: a file-system failure
//   of the writer, any code)        -> errors.TraceIOError (OSError)
//   INVALID_ARGUMENT, OUT_OF_RANGE,
//   ALREADY_EXISTS                  -> errors.InvalidArgumentError (ValueError)
//   UNIMPLEMENTED                   -> errors.NotSupportedError (ValueError)
//   NOT_FOUND                       -> errors.NotFoundError (LookupError)
//   FAILED_PRECONDITION             -> errors.FailedPreconditionError (RuntimeError)
//   PERMISSION_DENIED, RESOURCE_EXHAUSTED,
//   DATA_LOSS, UNAVAILABLE          -> errors.TraceIOError (OSError)
//   anything else                   -> errors.InternalError (RuntimeError)
// An error caused by one entry (payload kEntryKeyPayload) carries that entry's
// key as the exception's `key` attribute, so the hook can warn once per key.
void ThrowIfError(const absl::Status& status);
// The exception ThrowIfError raises for a non-OK status (a parked one aside),
// as an object: for errors reported without raising (StepNotes).
pybind11::object ExceptionOf(const absl::Status& status);

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return std::move(value).value();
}

// Runs `call` (a core call returning absl::Status or absl::StatusOr<T>) with the GIL
// released, then raises as ThrowIfError does; returns the StatusOr's value.
template <typename Call>
auto CallWithoutGil(const Call& call) {
  auto result = [&] {
    pybind11::gil_scoped_release release;
    return call();
  }();
  if constexpr (std::is_same_v<decltype(result), absl::Status>) {
    ThrowIfError(result);
  } else {
    return ValueOrThrow(std::move(result));
  }
}

// Status payload that asks for a TypeError (a value of the wrong type).
inline constexpr char kTypeErrorPayload[] = "xdl_trace/python_type_error";
absl::Status TypeErrorStatus(const std::string& message);

}  // namespace python
}  // namespace xdl_trace

#endif  // XDL_TRACE_BINDINGS_STATUS_H_
