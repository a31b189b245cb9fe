// The one place where status codes become Python exceptions.
#include "status.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "io/io_error.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/tracer.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

// Raw reference (never destroyed without the GIL: a leaked reference at thread
// exit beats a destructor that runs without it).
thread_local PyObject* parked_exception = nullptr;

const char* ErrorClassName(const absl::Status& status) {
  // A file-system failure of the writer is an OSError whatever errno's code
  // (EFBIG is OUT_OF_RANGE, a removed directory NOT_FOUND).
  if (internal::IsIoError(status)) return "TraceIOError";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
      return "InvalidArgumentError";
    case absl::StatusCode::kUnimplemented:
      return "NotSupportedError";
    case absl::StatusCode::kNotFound:
      return "NotFoundError";
    case absl::StatusCode::kFailedPrecondition:
      return "FailedPreconditionError";
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnavailable:
      return "TraceIOError";
    default:
      return "InternalError";
  }
}

}  // namespace

absl::Status PendingPythonError::Park(py::error_already_set& error) {
  std::string message = error.what();
  Clear();
  error.restore();  // Back into the interpreter's error indicator, then fetch the value.
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value != nullptr && traceback != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  parked_exception = value;  // Owned reference.
  return absl::UnknownError(message);
}

void PendingPythonError::Clear() {
  PyObject* old = parked_exception;
  parked_exception = nullptr;
  Py_XDECREF(old);
}

void PendingPythonError::RaiseIfAny() {
  PyObject* value = parked_exception;
  if (value == nullptr) return;
  parked_exception = nullptr;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(value)), value);
  Py_DECREF(value);
  throw py::error_already_set();
}

absl::Status TypeErrorStatus(const std::string& message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kTypeErrorPayload, absl::Cord("1"));
  return status;
}

pybind11::object ExceptionOf(const absl::Status& status) {
  std::string message(status.message());
  if (auto gradient = status.GetPayload(kMissingGradientPayload); gradient.has_value()) {
    // The core names no API; say how a Python user sends one.
    absl::StrAppend(&message, ": call xdl_trace.send_gradient('", std::string(*gradient),
                    "', value) before each traced hook.step()");
  }
  py::object cls = status.GetPayload(kTypeErrorPayload).has_value()
                       ? py::reinterpret_borrow<py::object>(PyExc_TypeError)
                       : py::module_::import("xdl_trace.errors").attr(ErrorClassName(status));
  py::object exception = cls(message);
  if (auto key = status.GetPayload(kEntryKeyPayload); key.has_value()) {
    exception.attr("key") = py::str(std::string(*key));
  }
  return exception;
}

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) {
    PendingPythonError::Clear();
    return;
  }
  PendingPythonError::RaiseIfAny();
  py::object exception = ExceptionOf(status);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  throw py::error_already_set();
}

}  // namespace python
}  // namespace xdl_trace
