// The xdl_trace._core extension module: the binding tables of the tracer, the reader, the
// analysis kernels and the schema tables.
#include <pybind11/pybind11.h>

#include "analysis_bindings.h"
#include "device_bindings.h"
#include "reader_bindings.h"
#include "schema_bindings.h"
#include "tracer_bindings.h"
#include "xdl_trace/version.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "xdl_trace C++ core (type conversions only; the API is in the xdl_trace package)";
  m.attr("__version__") = xdl_trace::kVersion;   // The C++ build's; xdl_trace.__version__ matches.
  xdl_trace::python::RegisterSchemaBindings(m);  // First: the others' signatures use DType.
  xdl_trace::python::RegisterTracerBindings(m);
  xdl_trace::python::RegisterDeviceBindings(m);
  xdl_trace::python::RegisterReaderBindings(m);
  xdl_trace::python::RegisterAnalysisBindings(m);
}
