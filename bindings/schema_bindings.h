// Declares the binding table of the schema-derived tables (schema_bindings.cc).
#ifndef XDL_TRACE_BINDINGS_SCHEMA_BINDINGS_H_
#define XDL_TRACE_BINDINGS_SCHEMA_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace xdl_trace {
namespace python {

// Adds the DType enum, dtype_table() and DEFAULT_HISTOGRAM_BINS to `m`.
void RegisterSchemaBindings(pybind11::module_& m);

}  // namespace python
}  // namespace xdl_trace

#endif  // XDL_TRACE_BINDINGS_SCHEMA_BINDINGS_H_
