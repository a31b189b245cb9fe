// Shims for the report and find-nan: per-tensor stats and log-bucket histograms of many numpy
// columns in one call, read in place (no copy) with the GIL released.
#include "analysis_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "summary/column_stats.h"
#include "summary/summary.h"
#include "xdl_trace/dtype.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

// A column as a view of its numpy array's memory. Reader columns may sit at
// any byte offset of the mapping; the summary loaders read with memcpy, so
// alignment does not matter, only C order.
TensorView ViewOf(const py::array& array, int32_t dtype, size_t position) {
  if (!IsValidDType(dtype)) {
    throw py::value_error(absl::StrCat("column ", position, ": unknown wire dtype ", dtype));
  }
  TensorView view;
  view.dtype = static_cast<DType>(dtype);
  if (static_cast<size_t>(array.itemsize()) != DTypeSize(view.dtype)) {
    throw py::value_error(absl::StrCat("column ", position, ": ", array.itemsize(),
                                       "-byte elements do not fit wire dtype ",
                                       DTypeName(view.dtype)));
  }
  if (!(array.flags() & py::array::c_style) || array.dtype().byteorder() == '>') {
    throw py::value_error(
        absl::StrCat("column ", position, ": array is not C-contiguous native-endian"));
  }
  view.shape.assign(array.shape(), array.shape() + array.ndim());
  view.data = array.data();
  return view;
}

// column_stats(arrays, dtypes, histogram=None, threads=0) -> (stats, buckets):
// stats is float64[n, 8] (internal::StatsField order), buckets
// float64[m, kNumLogBuckets] for the m arrays flagged in `histogram`, in order.
py::tuple ColumnStats(const py::list& arrays, const std::vector<int32_t>& dtypes,
                      const std::optional<std::vector<bool>>& histogram, int threads) {
  const size_t n = arrays.size();
  if (dtypes.size() != n || (histogram && histogram->size() != n)) {
    throw py::value_error(absl::StrCat("column_stats: ", n, " arrays but ", dtypes.size(),
                                       " dtypes", histogram ? " or histogram flags" : ""));
  }
  std::vector<TensorView> views;
  views.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // A borrowed reference: the list holds the array for the whole call (no conversion).
    py::handle item = arrays[i];
    if (!py::isinstance<py::array>(item)) {
      throw py::type_error(absl::StrCat("column ", i, ": expected a numpy array"));
    }
    views.push_back(ViewOf(py::reinterpret_borrow<py::array>(item), dtypes[i], i));
  }
  const std::vector<bool> flags = histogram ? *histogram : std::vector<bool>(n, false);
  const auto flagged = static_cast<py::ssize_t>(std::count(flags.begin(), flags.end(), true));
  py::array_t<double> stats(
      {static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(internal::kStatsSize)});
  py::array_t<double> buckets({flagged, static_cast<py::ssize_t>(internal::kNumLogBuckets)});
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double* stats_out = stats.mutable_data();
  double* buckets_out = buckets.mutable_data();
  {
    py::gil_scoped_release release;  // The arrays stay referenced by the caller's list.
    internal::ComputeColumnStats(views, flags, stats_out, buckets_out, threads);
  }
  return py::make_tuple(std::move(stats), std::move(buckets));
}

}  // namespace

void RegisterAnalysisBindings(py::module_& m) {
  m.def("column_stats", &ColumnStats, py::arg("arrays"), py::arg("dtypes"),
        py::arg("histogram") = py::none(), py::arg("threads") = 0,
        "Stats (float64[n, 8]) of each array read in place as its wire dtype, and log-bucket "
        "counts (float64[m, len(LOG_BUCKET_EDGES) - 1]) of the arrays flagged in `histogram` "
        "(sampled above MAX_HISTOGRAM_SAMPLES elements). threads <= 0: one per core.");
  const std::vector<double> edges = internal::LogBucketEdges();
  m.attr("LOG_BUCKET_EDGES") =
      py::array_t<double>(static_cast<py::ssize_t>(edges.size()), edges.data());
  m.attr("MAX_HISTOGRAM_SAMPLES") = internal::kMaxHistogramSamples;
  m.attr("STATS_FIELDS") = py::make_tuple("count", "min", "max", "mean", "std", "l2", "nan", "inf");
}

}  // namespace python
}  // namespace xdl_trace
