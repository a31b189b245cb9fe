// Declares the binding table for deferred (device) captures: PendingBytes, fences, leases.
#ifndef XDL_TRACE_BINDINGS_DEVICE_BINDINGS_H_
#define XDL_TRACE_BINDINGS_DEVICE_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace xdl_trace {
namespace python {

void RegisterDeviceBindings(pybind11::module_& m);

}  // namespace python
}  // namespace xdl_trace

#endif  // XDL_TRACE_BINDINGS_DEVICE_BINDINGS_H_
