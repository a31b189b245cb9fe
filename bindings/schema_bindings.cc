// Exports the C++ dtype table (cpp/src/core/dtype.cc) and defaults so Python derives from them.
#include "schema_bindings.h"

#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "xdl_trace/dtype.h"
#include "xdl_trace/registry.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {

void RegisterSchemaBindings(py::module_& m) {
  // DType.FLOAT32, DType.BFLOAT16, ...: one member per row of the table.
  py::enum_<DType> dtype(m, "DType");
  for (int32_t value = 0; value < kNumDTypes; ++value) {
    const DTypeInfo& info = GetDTypeInfo(static_cast<DType>(value));
    dtype.value(absl::AsciiStrToUpper(info.name).c_str(), info.dtype);
  }

  m.def(
      "dtype_table",
      [] {
        py::list rows;
        for (int32_t value = 0; value < kNumDTypes; ++value) {
          const DTypeInfo& info = GetDTypeInfo(static_cast<DType>(value));
          rows.append(py::make_tuple(static_cast<int32_t>(info.dtype), info.name, info.size,
                                     info.numpy_name));
        }
        return rows;
      },
      "[(wire value, name, itemsize, numpy dtype name)] of every wire dtype, in wire order "
      "(xdl.proto.Type); the one dtype table, defined in C++.");

  // Summary's default bin count for the Python API (TraceConfig's come with _core.TraceConfig()).
  m.attr("DEFAULT_HISTOGRAM_BINS") = Summary().histogram_bins;
}

}  // namespace python
}  // namespace xdl_trace
