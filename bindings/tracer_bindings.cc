// Thin shims over Registry, TraceConfig, TraceStats and Tracer: convert types, release the GIL, map
// Status.
#include "tracer_bindings.h"

#include <pybind11/stl.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "py_tensor.h"
#include "record/host_ranges.h"
#include "record/host_spans.h"
#include "status.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/config.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/stats.h"
#include "xdl_trace/tracer.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

// The name hook.py knows a config field's type by ("number", "strings", "choice", ...).
template <typename T>
const char* ConfigTypeName() {
  if constexpr (std::is_same_v<T, std::string>) return "string";
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_same_v<T, int32_t>) return "int";
  if constexpr (std::is_same_v<T, double>) return "number";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "strings";
  return "choice";  // An enum: its values' names come from ConfigChoices.
}

// The names of an enum field's values in enumerator order; empty for any other field.
template <typename T>
py::tuple ConfigChoices() {
  py::list names;
  if constexpr (std::is_same_v<T, OverflowPolicy>) {
    for (const char* name : kOverflowPolicyNames) names.append(name);
  } else if constexpr (std::is_same_v<T, WriteMode>) {
    for (const char* name : kWriteModeNames) names.append(name);
  }
  return py::tuple(names);
}

using ProtoSource = xdl::proto::ColumnDescriptor;
static_assert(ProtoSource::TENSOR == static_cast<int>(EntryKind::kTensor) + 1);
static_assert(ProtoSource::VARIABLE == static_cast<int>(EntryKind::kVariable) + 1);
static_assert(ProtoSource::GRADIENT == static_cast<int>(EntryKind::kGradient) + 1);
static_assert(ProtoSource::CALLBACK == static_cast<int>(EntryKind::kCallback) + 1);
static_assert(ProtoSource::ONCE == static_cast<int>(EntryKind::kOnce) + 1);

// The name a user summary is recorded under in the Header: the wrapper's
// __xdl_name__ (xdl_trace.write._convert.wrap_summary), else the callable's
// __qualname__ or __name__, else its type's name.
std::string SummaryName(const py::object& fn) {
  for (const char* attr : {"__xdl_name__", "__qualname__", "__name__"}) {
    if (py::hasattr(fn, attr)) {
      py::object name = fn.attr(attr);
      if (py::isinstance<py::str>(name)) return name.cast<std::string>();
    }
  }
  return py::str(py::type::of(fn).attr("__name__")).cast<std::string>();
}

// summary: None, a builtin name ("stats", "histogram", "digest") or a callable.
Summary ToSummary(py::object summary, int histogram_bins, const std::string& key) {
  Summary out;
  out.histogram_bins = histogram_bins;
  if (summary.is_none()) return out;
  if (py::isinstance<py::str>(summary)) {
    const std::string name = summary.cast<std::string>();
    if (name == "stats") {
      out.builtin = BuiltinSummary::kStats;
    } else if (name == "histogram") {
      out.builtin = BuiltinSummary::kHistogram;
    } else if (name == "digest") {
      out.builtin = BuiltinSummary::kDigest;
    } else {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("key '", key, "': unknown summary '", name,
                       "' (built-ins: 'stats', 'histogram', 'digest')")));
    }
    return out;
  }
  out.name = SummaryName(summary);
  out.fn = MakeSummaryFn(std::move(summary), key);
  return out;
}

EntrySpec BaseSpec(std::string scope, std::string key, EntryKind kind, py::object summary,
                   int histogram_bins) {
  EntrySpec spec;
  spec.scope = std::move(scope);
  spec.key = std::move(key);
  spec.kind = kind;
  spec.summary = ToSummary(std::move(summary), histogram_bins, spec.FullKey());
  return spec;
}

py::dict StatsToDict(const TraceStats& s) {
  py::dict d;
  d["steps_traced"] = s.steps_traced;
  d["records_written"] = s.records_written;
  d["bytes_written"] = s.bytes_written;
  d["records_dropped"] = s.records_dropped;
  d["files_written"] = s.files_written;
  d["pending_bytes"] = s.pending_bytes;
  d["queue_high_water_bytes"] = s.queue_high_water_bytes;
  d["missing_gradients"] = s.missing_gradients;
  d["device_events"] = s.device_events;
  d["device_events_dropped"] = s.device_events_dropped;
  d["device_buffers_dropped"] = s.device_buffers_dropped;
  d["device_tracer_status"] = s.device_tracer_status;
  // The same, structured: one {"tracer", "state", "message", "events_dropped",
  // "buffers_dropped"} per tracer, state
  // one of "ok", "unavailable", "error" (DeviceTracerStateName).
  py::list tracers;
  for (const DeviceTracerStatus& tracer : s.device_tracers) {
    py::dict t;
    t["tracer"] = tracer.tracer;
    t["state"] = DeviceTracerStateName(tracer.state);
    t["message"] = tracer.message;
    t["events_dropped"] = tracer.events_dropped;
    t["buffers_dropped"] = tracer.buffers_dropped;
    tracers.append(std::move(t));
  }
  d["device_tracers"] = std::move(tracers);
  d["write_mode"] = WriteModeName(s.write_mode);
  d["last_error"] = s.last_error.ok() ? py::object(py::none())
                                      : py::object(py::str(std::string(s.last_error.ToString())));
  d["deferred_failed"] = s.deferred_failed;
  d["last_deferred_error"] =
      s.last_deferred_error.ok()
          ? py::object(py::none())
          : py::object(py::str(std::string(s.last_deferred_error.ToString())));
  return d;
}

// Calls into the core without the GIL; callbacks re-take it and may park a
// Python exception, which ThrowIfError re-raises.
void RunWithoutGil(const std::function<absl::Status()>& call) {
  PendingPythonError::Clear();
  CallWithoutGil(call);
}

// A Tracer step without the GIL; returns the errors of the columns it wrote
// empty (StepNotes), as exception objects.
py::list StepWithoutGil(const std::function<absl::Status(StepNotes*)>& step) {
  StepNotes notes;
  RunWithoutGil([&] { return step(&notes); });
  py::list empty_columns;
  for (const absl::Status& error : notes.empty_columns) empty_columns.append(ExceptionOf(error));
  return empty_columns;
}

}  // namespace

void RegisterTracerBindings(py::module_& m) {
  // EntryKind.TENSOR, ...: named by the .proto's ColumnDescriptor.Source, the
  // one list of entry kinds (its value n + 1 is EntryKind n, asserted above).
  py::enum_<EntryKind> entry_kind(m, "EntryKind");
  const auto* sources = xdl::proto::ColumnDescriptor::Source_descriptor();
  for (int i = 0; i < sources->value_count(); ++i) {
    const int number = sources->value(i)->number();
    if (number == xdl::proto::ColumnDescriptor::SOURCE_UNSPECIFIED) continue;
    entry_kind.value(sources->value(i)->name().c_str(), static_cast<EntryKind>(number - 1));
  }

  py::enum_<OverflowPolicy>(m, "OverflowPolicy")
      .value("BLOCK", OverflowPolicy::kBlock)
      .value("DROP", OverflowPolicy::kDrop);

  py::enum_<WriteMode>(m, "WriteMode")
      .value("AUTO", WriteMode::kAuto)
      .value("IO_THREAD", WriteMode::kIoThread)
      .value("INLINE", WriteMode::kInline);

  py::enum_<MissingGradientPolicy>(m, "MissingGradientPolicy")
      .value("ERROR", MissingGradientPolicy::kError)
      .value("EMPTY_COLUMN", MissingGradientPolicy::kEmptyColumn);

  py::class_<RunInfo>(m, "RunInfo")
      .def(py::init<>())
      .def_readwrite("world_size", &RunInfo::world_size)
      .def_readwrite("local_rank", &RunInfo::local_rank)
      .def_readwrite("hostname", &RunInfo::hostname)
      .def_readwrite("pid", &RunInfo::pid)
      .def_readwrite("argv", &RunInfo::argv)
      .def_readwrite("start_time_ms", &RunInfo::start_time_ms)
      .def_readwrite("version", &RunInfo::version)
      .def_readwrite("metadata_json", &RunInfo::metadata_json);

  py::class_<TraceConfig> config(m, "TraceConfig");
  config.def(py::init<>())
      .def_readwrite("is_training", &TraceConfig::is_training)
      .def_readwrite("missing_gradient", &TraceConfig::missing_gradient)
      .def_readwrite("run_id", &TraceConfig::run_id)
      .def_readwrite("run", &TraceConfig::run)
      .def("validate", [](const TraceConfig& c) { ThrowIfError(c.Validate()); })
      .def("prefix", &TraceConfig::Prefix);
  // Each user key of the table is an attribute of its field's type; config_keys() lists them
  // with that type's name and, for an enum, its values' names (hook.py checks and converts).
  py::list config_keys;
  for (const ConfigKey& key : ConfigKeys()) {
    std::visit(
        [&](auto field) {
          using T = std::decay_t<decltype(std::declval<TraceConfig&>().*field)>;
          config.def_property(
              key.name, [field](const TraceConfig& c) { return c.*field; },
              [field](TraceConfig& c, const T& value) { c.*field = value; });
          config_keys.append(py::make_tuple(key.name, ConfigTypeName<T>(), ConfigChoices<T>()));
        },
        key.field);
  }
  m.def(
      "range_id",
      [](const std::string& name, const std::string& category) {
        return internal::HostRanges::Global().Intern(name, category);
      },
      py::arg("name"), py::arg("category"),
      "The id of a named host range (HostSpan RANGE, record/host_ranges.h), interned once.");
  m.def(
      "note_range",
      [](int id, int64_t start_ns, int64_t thread_id, int64_t end_ns) {
        return internal::HostRanges::Global().Add(
            id, start_ns, end_ns != 0 ? end_ns : internal::WallClockNs(), thread_id);
      },
      py::arg("id"), py::arg("start_ns"), py::arg("thread_id") = 0, py::arg("end_ns") = 0,
      "A range of `id` from start_ns (time.time_ns()) to end_ns (0: now) on OS thread "
      "thread_id (0: the calling thread), for the next record of a live tracer; False when "
      "no tracer listens.");
  m.def(
      "config_keys", [config_keys] { return config_keys; },
      "[(name, type, enum value names)] of the user config keys, in documentation order "
      "(TraceConfig's table, cpp/src/core/config.cc).");

  py::class_<Registry, std::shared_ptr<Registry>>(m, "Registry")
      .def(py::init<>())
      .def(
          "register_array",
          [](Registry& r, std::string scope, std::string key, EntryKind kind, py::object array,
             int dtype, py::object summary, int histogram_bins) {
            EntrySpec spec = BaseSpec(std::move(scope), std::move(key), kind, std::move(summary),
                                      histogram_bins);
            CapturedTensor captured = ValueOrThrow(CaptureArray(array, dtype, spec.FullKey()));
            spec.has_view = true;
            spec.view = captured.view;
            spec.keep_alive = std::move(captured.keep_alive);
            ThrowIfError(r.Register(std::move(spec)));
          },
          py::arg("scope"), py::arg("key"), py::arg("kind"), py::arg("array"),
          py::arg("dtype") = kDTypeFromArray, py::arg("summary") = py::none(),
          py::arg("histogram_bins") = 30,
          "Registers an array's memory, read in place at every traced step.")
      .def(
          "register_provider",
          [](Registry& r, std::string scope, std::string key, EntryKind kind, py::object fn,
             py::object summary, int histogram_bins, int input_dtype,
             std::vector<int64_t> input_shape) {
            EntrySpec spec = BaseSpec(std::move(scope), std::move(key), kind, std::move(summary),
                                      histogram_bins);
            if (input_dtype != kDTypeFromArray) {
              spec.declared_input = TensorSpec{static_cast<DType>(input_dtype),
                                               Shape(input_shape.begin(), input_shape.end())};
            }
            if (py::isinstance<GroupMember>(fn)) {
              const GroupMember& member = fn.cast<const GroupMember&>();
              spec.provider = member.group->Member(member.index);
            } else {
              spec.provider = MakeProvider(std::move(fn), spec.FullKey());
            }
            ThrowIfError(r.Register(std::move(spec)));
          },
          py::arg("scope"), py::arg("key"), py::arg("kind"), py::arg("fn"),
          py::arg("summary") = py::none(), py::arg("histogram_bins") = 30,
          py::arg("input_dtype") = kDTypeFromArray, py::arg("input_shape") = std::vector<int64_t>(),
          "Registers a zero-argument callable returning an ndarray or (ndarray, dtype), or a "
          "ValueGroup member; input_dtype (a wire dtype value) and input_shape declare the tensor "
          "it yields, where known for the whole trace.")
      .def(
          "register_gradient",
          [](Registry& r, std::string scope, std::string key, std::string gradient_name,
             py::object summary, int histogram_bins) {
            EntrySpec spec = BaseSpec(std::move(scope), std::move(key), EntryKind::kGradient,
                                      std::move(summary), histogram_bins);
            spec.gradient_name = std::move(gradient_name);
            ThrowIfError(r.Register(std::move(spec)));
          },
          py::arg("scope"), py::arg("key"), py::arg("gradient_name"),
          py::arg("summary") = py::none(), py::arg("histogram_bins") = 30,
          "Registers a gradient delivered through send_gradient(gradient_name, ...).")
      .def(
          "send_gradient",
          [](Registry& r, const std::string& name, py::object array, int dtype) {
            ThrowIfError(r.SendGradient(
                name, ValueOrThrow(dtype == kDTypeFromArray ? CaptureValue(array, name)
                                                            : CaptureArray(array, dtype, name))));
          },
          py::arg("name"), py::arg("array"), py::arg("dtype") = kDTypeFromArray)
      .def("clear_scope", &Registry::ClearScope, py::arg("scope"))
      .def("clear", &Registry::Clear)
      .def("drop_pending_gradients", &Registry::DropPendingGradients)
      .def(
          "keys",
          [](const Registry& r, const std::vector<std::string>& scopes) {
            std::vector<std::string> keys;
            for (const EntrySpec& e : r.Snapshot(scopes)) keys.push_back(e.FullKey());
            return keys;
          },
          py::arg("scopes"));

  py::class_<Tracer>(m, "Tracer")
      .def_static(
          "start",
          [](const TraceConfig& config, std::shared_ptr<Registry> registry,
             std::vector<std::string> scopes) {
            absl::StatusOr<std::unique_ptr<Tracer>> tracer;
            {
              py::gil_scoped_release release;
              tracer = Tracer::Start(config, std::move(registry), std::move(scopes));
            }
            return ValueOrThrow(std::move(tracer));
          },
          py::arg("config"), py::arg("registry"), py::arg("scopes"))
      .def(
          "step",
          [](Tracer& t, int64_t gstep, int64_t lstep) {
            return StepWithoutGil([&](StepNotes* notes) { return t.Step(gstep, lstep, notes); });
          },
          py::arg("gstep"), py::arg("lstep"))
      .def(
          "step_at",
          [](Tracer& t, int64_t gstep, int64_t lstep, int64_t timestamp_ms) {
            return StepWithoutGil(
                [&](StepNotes* notes) { return t.StepAt(gstep, lstep, timestamp_ms, notes); });
          },
          py::arg("gstep"), py::arg("lstep"), py::arg("timestamp_ms"))
      .def_property_readonly_static(
          "MAX_NOT_TRACED_SPANS",
          [](py::object) { return static_cast<int64_t>(internal::kMaxNotTracedSpans); })
      .def("note_step_not_traced", &Tracer::NoteStepNotTraced, py::arg("gstep"),
           py::arg("lstep"))  // A clock read: cheaper with the GIL held.
      .def("flush", [](Tracer& t) { RunWithoutGil([&] { return t.Flush(); }); })
      .def("close", [](Tracer& t) { RunWithoutGil([&] { return t.Close(); }); })
      .def("abandon_waits", &Tracer::AbandonWaits,
           "From another thread while flush() or close() wait (Ctrl-C): they stop waiting "
           "for device copies and device tracers; incomplete device records are dropped and "
           "counted.")
      .def(
          "repoint",
          [](Tracer& t, const std::string& key, py::object array, int dtype) {
            if (array.is_none()) return ThrowIfError(t.Repoint(key, std::nullopt, nullptr));
            CapturedTensor captured = ValueOrThrow(CaptureArray(array, dtype, key));
            ThrowIfError(t.Repoint(key, captured.view, std::move(captured.keep_alive)));
          },
          py::arg("key"), py::arg("array"), py::arg("dtype") = kDTypeFromArray,
          "Entry `key`, read in place, reads `array` from the next step on (None: an empty "
          "column): its memory moved.")
      .def_property_readonly("keys", &Tracer::keys)
      .def_property_readonly("config", &Tracer::config)
      .def("stats", [](const Tracer& t) { return StatsToDict(t.stats()); });
}

}  // namespace python
}  // namespace xdl_trace
