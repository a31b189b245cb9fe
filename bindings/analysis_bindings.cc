// Shims for the report and find-nan: the columnar record scan (analysis/record_scan.h),
// per-tensor stats and log-bucket histograms of numpy columns, read in place with the GIL released,
// the device event table (analysis/device_event_table.h) and kernel-name demangling.
#include "analysis_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "analysis/curve_buckets.h"
#include "analysis/demangle.h"
#include "analysis/device_event_table.h"
#include "analysis/key_facts.h"
#include "analysis/record_scan.h"
#include "analysis/run_diff.h"
#include "analysis/utf8_repair.h"
#include "device_trace.pb.h"
#include "status.h"
#include "summary/column_stats.h"
#include "summary/digest.h"
#include "summary/summary.h"
#include "xdl_trace/dtype.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

// threads <= 0: one per core.
int DefaultThreads(int threads) {
  return threads > 0 ? threads
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

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
  threads = DefaultThreads(threads);
  double* stats_out = stats.mutable_data();
  double* buckets_out = buckets.mutable_data();
  {
    py::gil_scoped_release release;  // The arrays stay referenced by the caller's list.
    internal::ComputeColumnStats(views, flags, stats_out, buckets_out, threads);
  }
  return py::make_tuple(std::move(stats), std::move(buckets));
}

// A writable C-contiguous array of `rows` x `width` (width 0: one dimension), or ValueError.
template <typename T>
T* Buffer(py::array_t<T>& array, const char* function, const char* name, py::ssize_t rows,
          py::ssize_t width) {
  const bool shape_ok =
      width == 0 ? array.ndim() == 1 && array.shape(0) == rows
                 : array.ndim() == 2 && array.shape(0) == rows && array.shape(1) == width;
  if (!shape_ok || !(array.flags() & py::array::c_style) || !array.writeable()) {
    throw py::value_error(absl::StrCat(function, ": ", name, " must be a writable C-contiguous ",
                                       rows, width ? absl::StrCat(" x ", width) : "", " array"));
  }
  return array.mutable_data();
}

// curve_add(state, gstep, sum, valid, min, max, gsteps, rows, skip_field=-1): adds rows [n,
// width] (any strides) at gsteps [n] to a Series' buckets in place (internal::AddCurveRows).
// state: int64[4] span, used, fill, records, updated.
void CurveAdd(py::array_t<int64_t> state, py::array_t<int64_t> gstep, py::array_t<double> sum,
              py::array_t<double> valid, py::array_t<double> min, py::array_t<double> max,
              py::array_t<int64_t, py::array::c_style | py::array::forcecast> gsteps,
              py::array_t<double> rows, int skip_field) {
  if (sum.ndim() != 2 || rows.ndim() != 2 || rows.shape(1) != sum.shape(1) || gsteps.ndim() != 1 ||
      gsteps.shape(0) != rows.shape(0)) {
    throw py::value_error("curve_add: rows must be [n, width] with n gsteps and width fields");
  }
  const py::ssize_t capacity = sum.shape(0), width = sum.shape(1);
  if (skip_field >= width) throw py::value_error("curve_add: skip_field is not a field");
  int64_t* s = Buffer(state, "curve_add", "state", 4, 0);
  internal::CurveBuckets curve;
  curve.capacity = capacity;
  curve.width = width;
  curve.span = s[0];
  curve.used = s[1];
  curve.fill = s[2];
  curve.records = s[3];
  curve.gstep = Buffer(gstep, "curve_add", "gstep", capacity, 0);
  curve.sum = Buffer(sum, "curve_add", "sum", capacity, width);
  curve.valid = Buffer(valid, "curve_add", "valid", capacity, width);
  curve.min = Buffer(min, "curve_add", "min", capacity, width);
  curve.max = Buffer(max, "curve_add", "max", capacity, width);
  internal::CurveRows in;
  in.gsteps = gsteps.data();
  in.data = reinterpret_cast<const char*>(rows.data());
  in.rows = rows.shape(0);
  in.row_stride = rows.strides(0);
  in.field_stride = rows.strides(1);
  in.skip_field = skip_field;
  {
    py::gil_scoped_release release;  // The arrays stay referenced by the arguments.
    internal::AddCurveRows(in, &curve);
  }
  s[0] = curve.span;
  s[1] = curve.used;
  s[2] = curve.fill;
  s[3] = curve.records;
}

// histogram_add(state, gstep, counts, min, max, gsteps, rows, low, high, records=None): adds
// histogram rows [n, width] (float64) at gsteps [n], with their finite min and max [n] and the
// records each sums [n] (None: 1 each), to a HistogramSeries' buckets in place
// (internal::AddHistogramRows). state: int64[3] span, used, fill, updated.
void HistogramAdd(
    py::array_t<int64_t> state, py::array_t<int64_t> gstep, py::array_t<float> counts,
    py::array_t<double> min, py::array_t<double> max,
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> gsteps,
    py::array_t<double, py::array::c_style | py::array::forcecast> rows,
    py::array_t<double, py::array::c_style | py::array::forcecast> low,
    py::array_t<double, py::array::c_style | py::array::forcecast> high,
    std::optional<py::array_t<int64_t, py::array::c_style | py::array::forcecast>> records) {
  const py::ssize_t n = gsteps.ndim() == 1 ? gsteps.shape(0) : -1;
  if (counts.ndim() != 2 || rows.ndim() != 2 || rows.shape(1) != counts.shape(1) ||
      rows.shape(0) != n || low.ndim() != 1 || low.shape(0) != n || high.ndim() != 1 ||
      high.shape(0) != n || (records && (records->ndim() != 1 || records->shape(0) != n))) {
    throw py::value_error(
        "histogram_add: rows must be [n, width] with n gsteps, lows, highs (and records)");
  }
  const py::ssize_t capacity = counts.shape(0), width = counts.shape(1);
  int64_t* s = Buffer(state, "histogram_add", "state", 3, 0);
  internal::HistogramBuckets histogram;
  histogram.capacity = capacity;
  histogram.width = width;
  histogram.span = s[0];
  histogram.used = s[1];
  histogram.fill = s[2];
  histogram.gstep = Buffer(gstep, "histogram_add", "gstep", capacity, 0);
  histogram.counts = Buffer(counts, "histogram_add", "counts", capacity, width);
  histogram.min = Buffer(min, "histogram_add", "min", capacity, 0);
  histogram.max = Buffer(max, "histogram_add", "max", capacity, 0);
  internal::HistogramRows in;
  in.gsteps = gsteps.data();
  in.counts = rows.data();
  in.min = low.data();
  in.max = high.data();
  in.records = records ? records->data() : nullptr;
  in.rows = n;
  {
    py::gil_scoped_release release;  // The arrays stay referenced by the arguments.
    internal::AddHistogramRows(in, &histogram);
  }
  s[0] = histogram.span;
  s[1] = histogram.used;
  s[2] = histogram.fill;
}

// `values` as a numpy array of `shape`, without a copy (a capsule owns the vector).
template <typename T>
py::array_t<T> ToArray(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  if (values.empty()) return py::array_t<T>(shape);
  auto* owner = new std::vector<T>(std::move(values));
  py::capsule keep_alive(owner, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owner->data(), keep_alive);
}

// Spare buffers for a scan's large arrays (a chunk's stats and buckets, up to
// tens of MB). They go to Python without a copy and come back here when Python
// drops the array, so the next chunk writes into memory already mapped: fresh
// buffers cost page faults, and freeing them munmap's TLB shootdowns across the
// walker's core, about 4 ms per 16 MB chunk. Guarded by the GIL: filled by the
// arrays' capsule destructors, emptied by NextChunk before it releases the GIL.
struct SpareBuffers {
  static constexpr size_t kKept = 2;  // A chunk in Python and the one being filled.
  std::vector<std::vector<double>> buffers;

  // The spare buffer of the largest capacity, emptied (or a new one).
  std::vector<double> Take() {
    if (buffers.empty()) return {};
    auto largest = std::max_element(buffers.begin(), buffers.end(),
                                    [](auto& a, auto& b) { return a.capacity() < b.capacity(); });
    std::vector<double> out = std::move(*largest);
    buffers.erase(largest);
    out.clear();
    return out;
  }
};

// `values` as a numpy array of `shape`, without a copy; its buffer goes back to
// `spares` when the array is freed.
py::array_t<double> ToArray(std::vector<double>&& values, std::vector<py::ssize_t> shape,
                            const std::shared_ptr<SpareBuffers>& spares) {
  if (values.empty()) return py::array_t<double>(shape);
  struct Owner {
    std::vector<double> values;
    std::shared_ptr<SpareBuffers> spares;
  };
  auto* owner = new Owner{std::move(values), spares};
  py::capsule keep_alive(owner, [](void* p) {
    auto* owner = static_cast<Owner*>(p);
    if (owner->spares->buffers.size() < SpareBuffers::kKept) {
      owner->spares->buffers.push_back(std::move(owner->values));
    }
    delete owner;
  });
  return py::array_t<double>(shape, owner->values.data(), keep_alive);
}

// A RecordScan and the chunk it fills (reused between calls), with the
// DeviceEventTable it appends to (kept alive past the scan: declared first).
struct PyRecordScan {
  py::object device_events;
  std::unique_ptr<internal::RecordScan> scan;
  size_t keys = 0;
  internal::RecordScanChunk chunk;
  std::shared_ptr<SpareBuffers> spares = std::make_shared<SpareBuffers>();
};

// next(max_records, max_histogram_rows) -> dict: the chunk's columns as arrays
// (gstep, lstep, timestamp, rank [n]; stats [n, keys, 8]; histogram_key,
// histogram_gstep, histogram_records, histogram_min, histogram_max [rows],
// buckets [rows, kNumLogBuckets]; spans int64 [s, 6]: rank, gstep,
// lstep, start_ns, end_ns, traced), torn_tails,
// unknown_dtypes ((path, dtype)), done, end_offset (the last chunk's: where the
// scan of a file ended, internal::RecordScanChunk), and per key (internal::KeyFacts):
// key_records, key_elements, key_bad [keys], key_constant (list of bool),
// key_first [keys, 8].
py::dict NextChunk(PyRecordScan& self, size_t max_records, size_t max_histogram_rows) {
  internal::RecordScanChunk& chunk = self.chunk;
  chunk.stats = self.spares->Take();
  chunk.buckets = self.spares->Take();
  absl::StatusOr<bool> more;
  internal::KeyFacts facts;
  {
    py::gil_scoped_release release;
    more = self.scan->Next(max_records, max_histogram_rows, &chunk);
    if (more.ok())
      facts = internal::ComputeKeyFacts(chunk.stats.data(), chunk.records(), self.keys);
  }
  if (IsMissingKeyError(more.status())) throw py::key_error(std::string(more.status().message()));
  ThrowIfError(more.status());
  const auto n = static_cast<py::ssize_t>(chunk.records());
  const auto keys = static_cast<py::ssize_t>(self.keys);
  const auto stats_size = static_cast<py::ssize_t>(internal::kStatsSize);
  const auto buckets = static_cast<py::ssize_t>(internal::kNumLogBuckets);
  std::vector<int64_t> spans;
  spans.reserve(chunk.step_spans.size() * 6);
  for (const internal::StepSpan& s : chunk.step_spans) {
    spans.insert(spans.end(), {s.rank, s.gstep, s.lstep, s.start_ns, s.end_ns, s.traced ? 1 : 0});
  }
  py::dict out;
  out["gstep"] = ToArray(std::move(chunk.gstep), {n});
  out["lstep"] = ToArray(std::move(chunk.lstep), {n});
  out["timestamp"] = ToArray(std::move(chunk.timestamp_ms), {n});
  out["rank"] = ToArray(std::move(chunk.rank), {n});
  out["stats"] = ToArray(std::move(chunk.stats), {n, keys, stats_size}, self.spares);
  out["key_records"] = ToArray(std::move(facts.records), {keys});
  out["key_elements"] = ToArray(std::move(facts.elements), {keys});
  out["key_bad"] = ToArray(std::move(facts.bad), {keys});
  out["key_constant"] = std::vector<bool>(facts.constant.begin(), facts.constant.end());
  out["key_first"] = ToArray(std::move(facts.first), {keys, stats_size});
  const auto rows = static_cast<py::ssize_t>(chunk.histogram_key.size());
  out["histogram_key"] = ToArray(std::move(chunk.histogram_key), {rows});
  out["histogram_gstep"] = ToArray(std::move(chunk.histogram_gstep), {rows});
  out["histogram_records"] = ToArray(std::move(chunk.histogram_records), {rows});
  out["histogram_min"] = ToArray(std::move(chunk.histogram_min), {rows});
  out["histogram_max"] = ToArray(std::move(chunk.histogram_max), {rows});
  out["buckets"] = ToArray(std::move(chunk.buckets), {rows, buckets}, self.spares);
  out["spans"] = ToArray(std::move(spans), {static_cast<py::ssize_t>(chunk.step_spans.size()), 6});
  out["torn_tails"] = chunk.torn_tails;
  out["unknown_dtypes"] = chunk.unknown_dtypes;
  out["done"] = !*more;
  out["end_offset"] = chunk.end_offset;
  return out;
}

// columns() -> dict: the table's columns as arrays (kind, name, device int32; rank, line,
// start_ns, end_ns, bytes int64; correlation_id, external_id uint64), names (list of str),
// ranges and launches (dicts of the sub-tables' columns), devices (a list of {rank, device,
// stats: {name: value}}), dropped_events, dropped_buffers. Copies:
// the table keeps growing if appended to.
py::dict DeviceEventColumns(const internal::DeviceEventTable& table) {
  auto copy = [](const auto& values) {
    using T = typename std::decay_t<decltype(values)>::value_type;
    return ToArray(std::vector<T>(values), {static_cast<py::ssize_t>(values.size())});
  };
  py::dict out;
  out["kind"] = copy(table.kind());
  out["name"] = copy(table.name());
  out["rank"] = copy(table.rank());
  out["device"] = copy(table.device());
  out["line"] = copy(table.line());
  out["start_ns"] = copy(table.start_ns());
  out["end_ns"] = copy(table.end_ns());
  out["correlation_id"] = copy(table.correlation_id());
  out["external_id"] = copy(table.external_id());
  out["bytes"] = copy(table.bytes());
  py::list names;
  for (const std::string& name : table.names()) {
    names.append(py::reinterpret_steal<py::str>(
        PyUnicode_DecodeUTF8(name.data(), static_cast<py::ssize_t>(name.size()), "replace")));
  }
  out["names"] = names;  // A handle: the device stats below name theirs from it.
  const internal::DeviceEventTable::Ranges& ranges = table.ranges();
  py::dict range_columns;
  range_columns["name"] = copy(ranges.name);
  range_columns["category"] = copy(ranges.category);
  range_columns["rank"] = copy(ranges.rank);
  range_columns["thread"] = copy(ranges.thread);
  range_columns["start_ns"] = copy(ranges.start_ns);
  range_columns["end_ns"] = copy(ranges.end_ns);
  range_columns["dropped"] = ranges.dropped;
  out["ranges"] = std::move(range_columns);
  const internal::DeviceEventTable::Launches& launches = table.launches();
  py::dict launch_columns;
  launch_columns["row"] = copy(launches.row);
  launch_columns["grid"] = copy(launches.grid);
  launch_columns["block"] = copy(launches.block);
  launch_columns["registers"] = copy(launches.registers);
  launch_columns["shared_memory"] = copy(launches.shared_memory);
  launch_columns["active_blocks"] = copy(launches.active_blocks);
  out["launches"] = std::move(launch_columns);
  py::list devices;
  for (const internal::DeviceEventTable::DeviceStats& device : table.devices()) {
    py::dict stats;
    for (const auto& [name, value] : device.stats) stats[names[static_cast<size_t>(name)]] = value;
    py::dict entry;
    entry["rank"] = device.rank;
    entry["device"] = device.device;
    entry["stats"] = std::move(stats);
    devices.append(std::move(entry));
  }
  out["devices"] = std::move(devices);
  out["dropped_events"] = table.dropped_events();
  out["dropped_buffers"] = table.dropped_buffers();
  return out;
}

// A trace at `path` less the files at `excluded` (copies the Python reader set aside), narrowed
// to run `run_id` when one is given, and to each rank's latest attempts unless `all_attempts`.
TraceReader OpenRun(const std::string& path, const std::string& prefix, const std::string& name,
                    const std::optional<std::vector<std::string>>& run_ids, bool check_record_crc,
                    const std::vector<std::string>& excluded, bool all_attempts) {
  FileOptions options;
  options.check_record_crc = check_record_crc;
  TraceReader reader =
      CallWithoutGil([&] { return TraceReader::Open(path, prefix, name, options); });
  reader = reader.Without(excluded);
  if (run_ids) reader = CallWithoutGil([&] { return reader.OfRuns(*run_ids); });
  if (!all_attempts) reader = CallWithoutGil([&] { return reader.LatestAttempts(); });
  return reader;
}

py::dict PointToDict(const internal::DiffPoint& point) {
  py::dict out;
  out["gstep"] = point.gstep;
  out["basis"] = static_cast<int>(point.basis);
  out["differing"] = point.differing;
  out["elements"] = point.elements;
  out["first_index"] = point.first_index;
  out["max_abs"] = point.max_abs;
  out["max_rel"] = point.max_rel;
  out["max_ulp"] = point.max_ulp;
  out["norm_a"] = std::isnan(point.norm_a) ? py::object(py::none()) : py::float_(point.norm_a);
  out["norm_b"] = std::isnan(point.norm_b) ? py::object(py::none()) : py::float_(point.norm_b);
  return out;
}

// One pair's internal::RunDiffResult as plain data (analysis/run_diff.h names the fields).
py::dict RunDiffToDict(const internal::RunDiffResult& result) {
  py::list key_list;
  for (const internal::KeyDiff& key : result.keys) {
    py::dict k;
    k["key"] = key.key;
    k["basis"] = static_cast<int>(key.basis);
    k["steps_compared"] = key.steps_compared;
    k["steps_differing"] = key.steps_differing;
    k["first"] = key.first ? py::object(PointToDict(*key.first)) : py::object(py::none());
    k["last"] = key.first ? py::object(PointToDict(key.last)) : py::object(py::none());
    py::list growth;
    for (const internal::DiffPoint& point : key.growth) growth.append(PointToDict(point));
    k["growth"] = std::move(growth);
    k["structural"] = key.structural;
    k["structural_gstep"] = key.structural_gstep;
    key_list.append(std::move(k));
  }
  py::dict out;
  out["keys"] = std::move(key_list);
  out["steps_compared"] = result.steps_compared;
  out["only_a"] = result.only_a;
  out["only_b"] = result.only_b;
  out["only_a_gsteps"] = result.only_a_gsteps;
  out["only_b_gsteps"] = result.only_b_gsteps;
  out["bytes_read"] = result.bytes_read;
  out["torn_tails"] = result.torn_tails;
  return out;
}

// diff_runs(...) -> [dict]: internal::DiffRuns of rank_a of one trace against each of ranks_b of
// another (or the same), a dict per rank (RunDiffToDict).
py::list DiffRunsShim(const std::string& path_a, std::optional<std::vector<std::string>> run_a,
                      int32_t rank_a, const std::string& path_b,
                      std::optional<std::vector<std::string>> run_b,
                      const std::vector<int32_t>& ranks_b, std::vector<std::string> keys,
                      std::optional<int64_t> begin, std::optional<int64_t> end,
                      std::optional<std::vector<int64_t>> steps, double rtol, double atol,
                      const std::string& prefix, const std::string& name, bool check_record_crc,
                      const std::vector<std::string>& excluded_a,
                      const std::vector<std::string>& excluded_b, std::vector<std::string> keys_b,
                      std::vector<std::string> norms_a, std::vector<std::string> norms_b,
                      bool all_attempts_a, bool all_attempts_b) {
  const TraceReader a =
      OpenRun(path_a, prefix, name, run_a, check_record_crc, excluded_a, all_attempts_a);
  const TraceReader b =
      OpenRun(path_b, prefix, name, run_b, check_record_crc, excluded_b, all_attempts_b);
  internal::DiffOptions options;
  options.keys = std::move(keys);
  options.keys_b = std::move(keys_b);
  options.norms_a = std::move(norms_a);
  options.norms_b = std::move(norms_b);
  options.steps = StepSelection{begin, end, std::move(steps)};
  options.rtol = rtol;
  options.atol = atol;
  const std::vector<internal::RunDiffResult> results =
      CallWithoutGil([&] { return internal::DiffRuns(a, rank_a, b, ranks_b, options); });
  py::list out;
  for (const internal::RunDiffResult& result : results) out.append(RunDiffToDict(result));
  return out;
}

// digest(array, dtype) -> int: internal::ComputeDigest of the array read in place as wire dtype.
uint64_t Digest(const py::array& array, int32_t dtype) {
  const TensorView view = ViewOf(array, dtype, 0);
  py::gil_scoped_release release;  // The caller holds the array.
  return internal::ComputeDigest(view);
}

}  // namespace

void RegisterAnalysisBindings(py::module_& m) {
  py::class_<PyRecordScan>(m, "RecordScan",
                           "One columnar pass over a trace's records "
                           "(xdl_trace::internal::RecordScan).")
      .def(
          py::init([](const std::string& path, std::vector<std::string> keys,
                      std::optional<int64_t> begin, std::optional<int64_t> end,
                      std::optional<std::vector<int64_t>> steps,
                      std::optional<std::vector<bool>> histogram, int64_t histogram_group,
                      int threads, py::object device_events, std::optional<uint64_t> start_offset) {
            internal::RecordScanOptions options;
            options.keys = std::move(keys);
            options.steps = StepSelection{begin, end, std::move(steps)};
            if (histogram) options.histogram = std::move(*histogram);
            options.histogram_group = histogram_group;
            options.max_threads = DefaultThreads(threads);
            options.start_offset = start_offset;
            auto self = std::make_unique<PyRecordScan>();
            self->keys = options.keys.size();
            if (!device_events.is_none()) {
              options.device_events = device_events.cast<internal::DeviceEventTable*>();
              self->device_events = std::move(device_events);
            }
            TraceReader reader = CallWithoutGil([&] { return TraceReader::Open(path); });
            self->scan = std::make_unique<internal::RecordScan>(reader, std::move(options));
            return self;
          }),
          py::arg("path"), py::arg("keys"), py::arg("begin") = py::none(),
          py::arg("end") = py::none(), py::arg("steps") = py::none(),
          py::arg("histogram") = py::none(), py::arg("histogram_group") = 1, py::arg("threads") = 0,
          py::arg("device_events") = py::none(), py::arg("start_offset") = py::none(),
          "Scans the data file (or trace directory's train.trace files) at `path`; the "
          "device traces of its records are parsed into `device_events` (a DeviceEventTable, "
          "with each record's rank) as next() takes them, or not read when it is None. "
          "start_offset: a data file's scan starts there (the last chunk's end_offset of an "
          "earlier scan of it), to read only what the file gained.")
      .def("next", &NextChunk, py::arg("max_records"), py::arg("max_histogram_rows"),
           "The next chunk of records as a dict of arrays (see analysis.py).");

  m.def("diff_runs", &DiffRunsShim, py::arg("path_a"), py::arg("run_a"), py::arg("rank_a"),
        py::arg("path_b"), py::arg("run_b"), py::arg("ranks_b"), py::arg("keys"),
        py::arg("begin") = py::none(), py::arg("end") = py::none(), py::arg("steps") = py::none(),
        py::arg("rtol") = 0.0, py::arg("atol") = 0.0, py::arg("prefix") = "train",
        py::arg("name") = "trace", py::arg("check_record_crc") = true,
        py::arg("excluded_a") = std::vector<std::string>{},
        py::arg("excluded_b") = std::vector<std::string>{},
        py::arg("keys_b") = std::vector<std::string>{},
        py::arg("norms_a") = std::vector<std::string>{},
        py::arg("norms_b") = std::vector<std::string>{}, py::arg("all_attempts_a") = false,
        py::arg("all_attempts_b") = false,
        "Compares rank_a of one trace (run_a: a run id, None: every file) with each of ranks_b "
        "of another (or the same), all read in step by gstep, A once (xdl_trace::internal::"
        "DiffRuns): a dict per rank of ranks_b; excluded_a/_b: "
        "paths of files left out (Trace.copies); keys_b: side B's column per key (default: "
        "keys); norms_a/_b: each side's stats column per key (\"\": none), whose l2 norms a "
        "step differing by digests reports (norm_a, norm_b); all_attempts_a/_b: read every attempt "
        "of a restarted run, not the latest of each gstep (TraceReader::LatestAttempts).");
  m.def("digest", &Digest, py::arg("array"), py::arg("dtype"),
        "The tensor digest (summary/digest.h) of a C-contiguous array read as wire dtype.");
  m.def("column_stats", &ColumnStats, py::arg("arrays"), py::arg("dtypes"),
        py::arg("histogram") = py::none(), py::arg("threads") = 0,
        "Stats (float64[n, 8]) of each array read in place as its wire dtype, and log-bucket "
        "counts (float64[m, len(LOG_BUCKET_EDGES) - 1]) of the arrays flagged in `histogram` "
        "(sampled above MAX_HISTOGRAM_SAMPLES elements). threads <= 0: one per core.");
  // The buckets are written in place: no conversion (a converted copy would take the writes).
  m.def("curve_add", &CurveAdd, py::arg("state").noconvert(), py::arg("gstep").noconvert(),
        py::arg("sum").noconvert(), py::arg("valid").noconvert(), py::arg("min").noconvert(),
        py::arg("max").noconvert(), py::arg("gsteps"), py::arg("rows"), py::arg("skip_field") = -1,
        "Adds rows [n, width] (float64, any strides) at gsteps [n] to a downsampled curve's "
        "buckets in place (analysis.Series); rows whose skip_field is NaN are left out.");
  m.def("histogram_add", &HistogramAdd, py::arg("state").noconvert(), py::arg("gstep").noconvert(),
        py::arg("counts").noconvert(), py::arg("min").noconvert(), py::arg("max").noconvert(),
        py::arg("gsteps"), py::arg("rows"), py::arg("low"), py::arg("high"),
        py::arg("records") = py::none(),
        "Adds histogram rows [n, width] at gsteps [n], with the min and max of their finite "
        "values [n] (NaN: none) and the records each sums [n] (None: 1 each), to a downsampled "
        "distribution's buckets in place (analysis.HistogramSeries).");
  py::class_<internal::DeviceEventTable>(
      m, "DeviceEventTable",
      "A run's device events as columns (xdl_trace::internal::DeviceEventTable).")
      .def(py::init<>())
      .def(
          "add",
          [](internal::DeviceEventTable& self, const py::bytes& payload, int64_t rank) {
            const std::string data = payload;  // A copy: the GIL is released below.
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = self.Append(absl::string_view(data.data(), data.size()), rank);
            }
            ThrowIfError(status);
          },
          py::arg("payload"), py::arg("rank"),
          "Appends the events of one serialized DeviceTrace (a Record field 5) written by rank.")
      .def("__len__", &internal::DeviceEventTable::size)
      .def_property_readonly("replaced_strings", &internal::DeviceEventTable::replaced_strings,
                             "Names that were not UTF-8 (read with U+FFFD for their bad bytes).")
      .def("columns", &DeviceEventColumns,
           "The columns as a dict of arrays, with names, ranges (a dict of the range columns), "
           "dropped_events, dropped_buffers.");
  m.def(
      "repair_device_trace",
      [](const py::bytes& payload) -> py::tuple {
        char* bytes = nullptr;
        py::ssize_t size = 0;
        if (PYBIND11_BYTES_AS_STRING_AND_SIZE(payload.ptr(), &bytes, &size) != 0) {
          throw py::error_already_set();
        }
        std::string repaired;
        const int64_t replaced = internal::RepairUtf8Strings(
            *xdl::proto::DeviceTrace::descriptor(),
            absl::string_view(bytes, static_cast<size_t>(size)), &repaired);
        if (replaced == 0) return py::make_tuple(payload, 0);
        return py::make_tuple(py::bytes(repaired), replaced);
      },
      py::arg("payload"),
      "(payload, n): a serialized DeviceTrace whose n string fields that were not UTF-8 (which "
      "protobuf refuses) hold U+FFFD for their bad bytes; the payload itself when n is 0.");
  m.def(
      "demangle",
      [](const std::vector<std::string>& names) {
        std::vector<std::string> out;
        out.reserve(names.size());
        for (const std::string& name : names) out.push_back(internal::Demangle(name));
        return out;
      },
      py::arg("names"),
      "The demangled form of each name (abi::__cxa_demangle, cached); a name that is not a "
      "mangled C++ name comes back unchanged.");
  const std::vector<double> edges = internal::LogBucketEdges();
  m.attr("LOG_BUCKET_EDGES") =
      py::array_t<double>(static_cast<py::ssize_t>(edges.size()), edges.data());
  m.attr("MAX_HISTOGRAM_SAMPLES") = internal::kMaxHistogramSamples;
  m.attr("STATS_FIELDS") = py::make_tuple("count", "min", "max", "mean", "std", "l2", "nan", "inf");
}

}  // namespace python
}  // namespace xdl_trace
