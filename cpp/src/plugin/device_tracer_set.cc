// Runs the configured device-tracer plugins: start/stop, step markers, bounded collection.
#include "plugin/device_tracer_set.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/device_trace_fields.h"
#include "core/status_macros.h"
#include "core/wire.h"
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

// Bytes a length-delimited field of `n` payload bytes takes beyond the payload
// (a one- or two-byte tag, at most five bytes of length).
constexpr size_t kFieldOverhead = 7;
// An int64 varint field, at most.
constexpr size_t kIntFieldBytes = 11;

// Calls field(number, wire_type, varint, payload) for every field of the
// message in `bytes`; false when a tag, length or value is cut short or bad.
template <typename F>
bool ForEachField(std::string_view bytes, F field) {
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  while (p < end) {
    uint64_t tag = 0, value = 0;
    if (!ReadVarint(&p, end, &tag) || (tag >> 3) == 0) return false;
    std::string_view payload;
    switch (static_cast<uint32_t>(tag & 7)) {
      case kWireVarint:
        if (!ReadVarint(&p, end, &value)) return false;
        break;
      case kWireFixed64:
        if (end - p < 8) return false;
        p += 8;
        break;
      case kWireLengthDelimited:
        if (!ReadVarint(&p, end, &value) || value > static_cast<uint64_t>(end - p)) return false;
        payload = std::string_view(p, value);
        p += value;
        break;
      case kWireFixed32:
        if (end - p < 4) return false;
        p += 4;
        break;
      default:
        return false;
    }
    if (!field(static_cast<uint32_t>(tag >> 3), static_cast<uint32_t>(tag & 7), value, payload)) {
      return false;
    }
  }
  return true;
}

// A field of a message that must itself parse as a message (when it is
// length-delimited) with `inner` called for each of its fields.
template <typename F>
bool Nested(uint32_t wire, std::string_view payload, F inner) {
  return wire != kWireLengthDelimited || ForEachField(payload, inner);
}

}  // namespace

bool SummarizeDeviceTrace(std::string_view bytes, DeviceTraceSummary* out) {
  namespace f = device_trace_fields;
  *out = DeviceTraceSummary{};
  auto stat = [](uint32_t, uint32_t, uint64_t, std::string_view) { return true; };
  auto event = [&](uint32_t n, uint32_t wire, uint64_t, std::string_view payload) {
    return n != f::kEventStat || Nested(wire, payload, stat);
  };
  auto line = [&](uint32_t n, uint32_t wire, uint64_t, std::string_view payload) {
    if (n != f::kLineEvent) return true;
    ++out->events;
    return Nested(wire, payload, event);
  };
  auto device = [&](uint32_t n, uint32_t wire, uint64_t, std::string_view payload) {
    return n != f::kDeviceLine || Nested(wire, payload, line);
  };
  return ForEachField(bytes,
                      [&](uint32_t n, uint32_t wire, uint64_t value, std::string_view payload) {
                        if (n == f::kTraceTracer && wire == kWireLengthDelimited)
                          out->tracer = std::string(payload);
                        if (n == f::kTraceStatus && wire == kWireLengthDelimited)
                          out->status = std::string(payload);
                        if (n == f::kTraceDroppedEvents && wire == kWireVarint) {
                          out->dropped_events = static_cast<int64_t>(value);
                        }
                        if (n == f::kTraceDroppedBuffers && wire == kWireVarint) {
                          out->dropped_buffers = static_cast<int64_t>(value);
                        }
                        return n != f::kTraceDevice || Nested(wire, payload, device);
                      });
}

std::vector<xdl::proto::DeviceTrace> SplitDeviceTrace(const xdl::proto::DeviceTrace& trace,
                                                      size_t max_bytes) {
  xdl::proto::DeviceTrace base;
  base.set_tracer(trace.tracer());
  *base.mutable_name() = trace.name();
  std::vector<xdl::proto::DeviceTrace> parts;
  parts.push_back(base);
  parts.back().set_dropped_events(trace.dropped_events());
  parts.back().set_dropped_buffers(trace.dropped_buffers());
  parts.back().set_status(trace.status());
  // Upper bound of the current part's serialized size, and where its
  // device and line for the event being placed are (null: not opened yet).
  size_t size = parts.back().ByteSizeLong();
  size_t events_in_part = 0;
  for (const xdl::proto::Device& device : trace.device()) {
    const size_t device_bytes =
        kFieldOverhead + kIntFieldBytes + kFieldOverhead + device.name().size();
    xdl::proto::Device* part_device = nullptr;
    for (const xdl::proto::DeviceLine& line : device.line()) {
      const size_t line_bytes =
          kFieldOverhead + kIntFieldBytes + kFieldOverhead + line.name().size();
      xdl::proto::DeviceLine* part_line = nullptr;
      for (const xdl::proto::DeviceEvent& event : line.event()) {
        const size_t event_bytes = kFieldOverhead + event.ByteSizeLong();
        size_t needed = event_bytes + (part_line == nullptr ? line_bytes : 0) +
                        (part_device == nullptr ? device_bytes : 0);
        if (events_in_part > 0 && size + needed > max_bytes) {
          parts.push_back(base);
          size = parts.back().ByteSizeLong();
          events_in_part = 0;
          part_device = nullptr;
          part_line = nullptr;
          needed = event_bytes + line_bytes + device_bytes;
        }
        if (part_device == nullptr) {
          part_device = parts.back().add_device();
          part_device->set_id(device.id());
          part_device->set_name(device.name());
        }
        if (part_line == nullptr) {
          part_line = part_device->add_line();
          part_line->set_id(line.id());
          part_line->set_name(line.name());
        }
        *part_line->add_event() = event;
        size += needed;
        ++events_in_part;
      }
    }
  }
  return parts;
}

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
          tracer.library->CreateProfiler(&profiler_options, &tracer.profiler, error.get());
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

void DeviceTracerSet::CountDrops(size_t index, int64_t events, int64_t buffers) {
  if (events == 0 && buffers == 0) return;
  events_dropped_.fetch_add(events, std::memory_order_relaxed);
  buffers_dropped_.fetch_add(buffers, std::memory_order_relaxed);
  MutexLock lock(&status_mu_);
  status_[index].events_dropped += events;
  status_[index].buffers_dropped += buffers;
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
  DeviceTraceSummary summary;
  if (!SummarizeDeviceTrace(bytes, &summary)) {
    return absl::DataLossError(absl::StrCat("device_tracers: '", tracer.entry,
                                            "': collect returned ", size,
                                            " bytes that are not a DeviceTrace"));
  }
  const size_t index = &tracer - tracers_.data();
  DeviceTracerStatus status = FromPluginStatus(tracer.type, summary.status);
  SetStatus(index, status.state, std::move(status.message));
  CountDrops(index, summary.dropped_events, summary.dropped_buffers);
  if (summary.events == 0 && summary.dropped_events == 0 && summary.dropped_buffers == 0) {
    return absl::OkStatus();
  }
  if (summary.tracer.empty()) {
    // A later occurrence of a string field wins: appending names the trace.
    AppendLengthDelimitedField(device_trace_fields::kTraceTracer, tracer.type, &bytes);
  }
  if (bytes.size() <= options_.max_trace_part_bytes) {
    Admit(index, std::move(bytes), summary.events);
    return absl::OkStatus();
  }
  // Too large for one part: split, so the pending cap keeps what fits.
  xdl::proto::DeviceTrace trace;
  if (!trace.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("device_tracers: '", tracer.entry,
                                            "': collect returned ", size,
                                            " bytes that are not a DeviceTrace"));
  }
  for (const xdl::proto::DeviceTrace& part :
       SplitDeviceTrace(trace, static_cast<size_t>(options_.max_trace_part_bytes))) {
    Admit(index, part.SerializeAsString(), CountEvents(part));
  }
  return absl::OkStatus();
}

void DeviceTracerSet::Admit(size_t index, std::string bytes, int64_t events) {
  if (pending_bytes_ + bytes.size() > options_.max_pending_bytes) {
    CountDrops(index, events, 0);
    return;
  }
  events_collected_.fetch_add(events, std::memory_order_relaxed);
  pending_bytes_ += bytes.size();
  pending_.push_back(std::move(bytes));
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
