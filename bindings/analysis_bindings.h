// Declares the binding table of the trace analysis kernels (analysis_bindings.cc).
#ifndef XDL_TRACE_BINDINGS_ANALYSIS_BINDINGS_H_
#define XDL_TRACE_BINDINGS_ANALYSIS_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace xdl_trace {
namespace python {

// Adds column_stats(), LOG_BUCKET_EDGES, MAX_HISTOGRAM_SAMPLES and STATS_FIELDS to `m`.
void RegisterAnalysisBindings(pybind11::module_& m);

}  // namespace python
}  // namespace xdl_trace

#endif  // XDL_TRACE_BINDINGS_ANALYSIS_BINDINGS_H_
