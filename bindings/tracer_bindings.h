// Declares the binding table for the registry, config, stats and tracer (tracer_bindings.cc).
#ifndef XDL_TRACE_BINDINGS_TRACER_BINDINGS_H_
#define XDL_TRACE_BINDINGS_TRACER_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace xdl_trace {
namespace python {

void RegisterTracerBindings(pybind11::module_& m);

}  // namespace python
}  // namespace xdl_trace

#endif  // XDL_TRACE_BINDINGS_TRACER_BINDINGS_H_
