// Runs the configured device-tracer plugins: start/stop, step markers, bounded collection.
#include "plugin/device_tracer_set.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "device_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

int64_t CountEvents(const xdl::proto::DeviceTrace& trace) {
  int64_t n = 0;
  for (const auto& device : trace.device()) {
    for (const auto& line : device.line()) n += line.event_size();
  }
  return n;
}

// The state a plugin reports in DeviceTrace.status, the ABI's one string:
// empty when fine, "unavailable: why" without a device (the RFC's rule),
// anything else a failure. This is the only place that string is read.
DeviceTracerStatus FromPluginStatus(const std::string& tracer, absl::string_view status) {
  DeviceTracerStatus out;
  out.tracer = tracer;
  if (status.empty()) return out;
  if (absl::ConsumePrefix(&status, "unavailable")) {
    out.state = DeviceTracerState::kUnavailable;
    absl::ConsumePrefix(&status, ": ");
  } else {
    out.state = DeviceTracerState::kFailed;
  }
  out.message = std::string(status);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceTracerSet>> DeviceTracerSet::Create(
    const std::vector<std::string>& entries, DeviceTracerSetOptions options) {
  std::unique_ptr<DeviceTracerSet> set(new DeviceTracerSet(std::move(options)));
  for (const std::string& entry : entries) {
    Tracer tracer;
    tracer.entry = entry;
    tracer.type = entry;
    DeviceTracerStatus status;
    absl::StatusOr<std::string> path = ResolvePlugin(entry);
    if (!path.ok() && absl::IsNotFound(path.status()) && entry == kCuptiTracerName) {
      // Training goes on without it. The plugin exists only where the build
      // found the CUDA toolkit's CUPTI headers, and is found only where it was
      // installed or copied (ResolvePlugin says where it looked).
      status.state = DeviceTracerState::kUnavailable;
      status.message = std::string(path.status().message());
    } else if (!path.ok()) {
      return path.status();
    } else {
      XDL_ASSIGN_OR_RETURN(tracer.library, PluginLibrary::Load(*path));
      tracer.type = tracer.library->profiler_type();
      XdlTraceProfilerOptions profiler_options{};
      profiler_options.struct_size = sizeof(profiler_options);
      profiler_options.max_buffer_bytes = set->options_.max_buffer_bytes_per_tracer;
      profiler_options.config = set->options_.plugin_config.c_str();
      PluginErrorBuffer error;
      const int32_t rc =
          tracer.library->registration().create(&profiler_options, &tracer.profiler, error.get());
      if (rc != XDL_TRACE_PLUGIN_OK || tracer.profiler == nullptr) {
        return absl::InternalError(absl::StrCat("device_tracers: '", entry, "' (", *path,
                                                "): create failed (", rc, "): ", error.message()));
      }
    }
    status.tracer = tracer.type;
    set->tracers_.push_back(std::move(tracer));
    MutexLock lock(&set->status_mu_);
    set->status_.push_back(std::move(status));
  }
  return set;
}

DeviceTracerSet::~DeviceTracerSet() {
  Stop().IgnoreError();  // Errors were reported by StatusSummary().
  for (Tracer& tracer : tracers_) {
    if (tracer.profiler != nullptr) tracer.library->registration().destroy(tracer.profiler);
    tracer.profiler = nullptr;
  }
}

void DeviceTracerSet::SetStatus(size_t index, DeviceTracerState state, std::string message) {
  MutexLock lock(&status_mu_);
  status_[index].state = state;
  status_[index].message = std::move(message);
}

std::vector<DeviceTracerStatus> DeviceTracerSet::Statuses() const {
  MutexLock lock(&status_mu_);
  return status_;
}

std::string DeviceTracerSet::StatusSummary() const { return RenderDeviceTracerStatus(Statuses()); }

bool DeviceTracerSet::AnyNotOk() const {
  MutexLock lock(&status_mu_);
  for (const DeviceTracerStatus& status : status_) {
    if (status.state != DeviceTracerState::kOk) return true;
  }
  return false;
}

absl::Status DeviceTracerSet::Start() {
  if (running_) return absl::OkStatus();
  for (size_t i = 0; i < tracers_.size(); ++i) {
    Tracer& tracer = tracers_[i];
    if (tracer.profiler == nullptr) continue;
    PluginErrorBuffer error;
    const int32_t rc = tracer.library->registration().start(tracer.profiler, error.get());
    if (rc != XDL_TRACE_PLUGIN_OK) {
      // The plugin rolled its start back (ABI); every loop skips a null profiler.
      tracer.library->registration().destroy(tracer.profiler);
      tracer.profiler = nullptr;
      SetStatus(i, DeviceTracerState::kFailed,
                absl::StrCat("start failed (", rc, "): ", error.message()));
    }
  }
  running_ = true;
  return Collect();
}

absl::Status DeviceTracerSet::Stop() {
  if (!running_) return absl::OkStatus();
  running_ = false;
  absl::Status first;
  for (size_t i = tracers_.size(); i-- > 0;) {
    Tracer& tracer = tracers_[i];
    if (tracer.profiler == nullptr) continue;
    PluginErrorBuffer error;
    const int32_t rc = tracer.library->registration().stop(tracer.profiler, error.get());
    if (rc != XDL_TRACE_PLUGIN_OK && first.ok()) {
      first = absl::InternalError(absl::StrCat("device_tracers: '", tracer.entry,
                                               "': stop failed (", rc, "): ", error.message()));
      SetStatus(i, DeviceTracerState::kFailed, error.message());
    }
  }
  return first;
}

void DeviceTracerSet::StepBegin(uint64_t external_id) {
  CallStepHook(&XdlTracePluginRegistration::step_begin, "step_begin", external_id);
}

void DeviceTracerSet::StepEnd(uint64_t external_id) {
  CallStepHook(&XdlTracePluginRegistration::step_end, "step_end", external_id);
}

void DeviceTracerSet::CallStepHook(StepHook hook, const char* hook_name, uint64_t external_id) {
  if (!running_) return;
  for (size_t i = 0; i < tracers_.size(); ++i) {
    Tracer& tracer = tracers_[i];
    if (tracer.profiler == nullptr) continue;
    PluginErrorBuffer error;
    if ((tracer.library->registration().*hook)(tracer.profiler, external_id, error.get()) !=
            XDL_TRACE_PLUGIN_OK &&
        !tracer.step_error_reported) {
      tracer.step_error_reported = true;
      SetStatus(i, DeviceTracerState::kFailed, absl::StrCat(hook_name, ": ", error.message()));
    }
  }
}

absl::Status DeviceTracerSet::CollectOne(Tracer& tracer) {
  const XdlTracePluginRegistration& reg = tracer.library->registration();
  size_t size = 0;
  PluginErrorBuffer error;
  int32_t rc = reg.collect(tracer.profiler, nullptr, &size, error.get());
  if (rc != XDL_TRACE_PLUGIN_OK) {
    return absl::InternalError(absl::StrCat("device_tracers: '", tracer.entry,
                                            "': collect (size) failed (", rc,
                                            "): ", error.message()));
  }
  if (size == 0) return absl::OkStatus();
  std::string bytes(size, '\0');
  rc = reg.collect(tracer.profiler, reinterpret_cast<uint8_t*>(bytes.data()), &size, error.get());
  if (rc != XDL_TRACE_PLUGIN_OK || size > bytes.size()) {
    return absl::InternalError(absl::StrCat("device_tracers: '", tracer.entry, "': collect of ",
                                            bytes.size(), " bytes failed (", rc,
                                            "): ", error.message()));
  }
  bytes.resize(size);
  xdl::proto::DeviceTrace trace;
  if (!trace.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("device_tracers: '", tracer.entry,
                                            "': collect returned ", size,
                                            " bytes that are not a DeviceTrace"));
  }
  const size_t index = &tracer - tracers_.data();
  DeviceTracerStatus status = FromPluginStatus(tracer.type, trace.status());
  SetStatus(index, status.state, std::move(status.message));
  const int64_t events = CountEvents(trace);
  events_dropped_.fetch_add(trace.dropped_events(), std::memory_order_relaxed);
  if (events == 0 && trace.dropped_events() == 0) return absl::OkStatus();
  if (trace.tracer().empty()) {
    trace.set_tracer(tracer.type);
    bytes = trace.SerializeAsString();
  }
  if (pending_bytes_ + bytes.size() > options_.max_pending_bytes) {
    events_dropped_.fetch_add(events, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  events_collected_.fetch_add(events, std::memory_order_relaxed);
  pending_bytes_ += bytes.size();
  pending_.push_back(std::move(bytes));
  return absl::OkStatus();
}

absl::Status DeviceTracerSet::Collect() {
  absl::Status first;
  for (Tracer& tracer : tracers_) {
    if (tracer.profiler == nullptr) continue;
    absl::Status status = CollectOne(tracer);
    if (!status.ok()) {
      SetStatus(&tracer - tracers_.data(), DeviceTracerState::kFailed,
                std::string(status.message()));
      if (first.ok()) first = status;
    }
  }
  return first;
}

std::vector<std::string> DeviceTracerSet::TakePending() {
  std::vector<std::string> out;
  out.swap(pending_);
  pending_bytes_ = 0;
  return out;
}

}  // namespace internal
}  // namespace xdl_trace
