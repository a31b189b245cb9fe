// Conversions between numpy arrays and the core's tensor types; Python callables as providers and
// summaries.
#ifndef XDL_TRACE_BINDINGS_PY_TENSOR_H_
#define XDL_TRACE_BINDINGS_PY_TENSOR_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace python {

// Marks "take the dtype from the array" where a dtype override is optional.
inline constexpr int kDTypeFromArray = -1;

// Holds a Python object from C++ code that may run without the GIL: the
// deleter takes the GIL to drop the reference (and leaks it once the
// interpreter is finalizing).
std::shared_ptr<const void> KeepAlive(pybind11::object object);

// A C-contiguous, aligned, native-endian numpy array of a supported dtype as a
// view whose keep-alive holds the array: no copy. `dtype_override` (a DType
// value, or kDTypeFromArray) re-labels the bytes, e.g. int16 bits as bfloat16
// (the element size must match). TypeError status naming `key` for an object
// that is not an array or an unsupported dtype; InvalidArgument for a
// non-contiguous or byte-swapped array (the Python layer copies those).
// Needs the GIL.
absl::StatusOr<CapturedTensor> CaptureArray(pybind11::handle object, int dtype_override,
                                            const std::string& key);

// A value whose bytes a device copy delivers later (PendingBytes.value in
// Python): what a provider returns, or send_gradient sends, for a device tensor.
struct DeferredValue {
  CapturedTensor captured;
};

// A ValueGroup member as the Python side holds it: registered as a provider.
struct GroupMember {
  std::shared_ptr<ValueGroup> group;
  size_t index = 0;
};

// An ndarray, an (ndarray, dtype) tuple or a DeferredValue as a captured
// tensor; errors as CaptureArray's. Needs the GIL.
absl::StatusOr<CapturedTensor> CaptureValue(pybind11::handle object, const std::string& key);

// A provider that calls `fn` (with the GIL) at each traced step. `fn` returns
// what CaptureValue takes; a Python exception is parked
// (status.h) and comes back out of Tracer.step unchanged.
TensorProvider MakeProvider(pybind11::object fn, std::string key);

// A summary that hands `fn` a numpy copy of the tensor (bfloat16 widened to
// float32) and copies back the array it returns.
SummaryFn MakeSummaryFn(pybind11::object fn, std::string key);

}  // namespace python
}  // namespace xdl_trace

#endif  // XDL_TRACE_BINDINGS_PY_TENSOR_H_
