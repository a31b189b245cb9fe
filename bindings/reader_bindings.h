// Declares the binding table of the trace reader (reader_bindings.cc).
#ifndef XDL_TRACE_BINDINGS_READER_BINDINGS_H_
#define XDL_TRACE_BINDINGS_READER_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace xdl_trace {
namespace python {

// Adds TraceReader, TraceCursor, TraceFile, TornTail and read_meta to `m`.
void RegisterReaderBindings(pybind11::module_& m);

}  // namespace python
}  // namespace xdl_trace

#endif  // XDL_TRACE_BINDINGS_READER_BINDINGS_H_
