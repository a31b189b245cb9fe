// Runs the configured device-tracer plugins: start/stop, step markers, bounded collection.
#include "plugin/device_tracer_set.h"

#include <chrono>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "core/wire_reader.h"
#include "device_trace.pb.h"
#include "plugin/collect_pages.h"

namespace xdl_trace {
namespace internal {
namespace {

// Field numbers from the generated code: the .proto is their one source.
using xdl::proto::Device;
using xdl::proto::DeviceEvent;
using xdl::proto::DeviceLine;
using xdl::proto::DeviceTrace;

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

// A field of a message that must itself parse as a message (when it is
// length-delimited) with `inner` called for each of its fields.
template <typename F>
bool Nested(const WireField& field, F inner) {
  return field.wire_type != kWireLengthDelimited || ForEachWireField(field.payload, inner);
}

// The std::string_view of a field's bytes (core/wire.h's writers take std views).
std::string_view StdView(absl::string_view bytes) { return {bytes.data(), bytes.size()}; }

}  // namespace

bool SummarizeDeviceTrace(std::string_view bytes, DeviceTraceSummary* out) {
  *out = DeviceTraceSummary{};
  auto stat = [](const WireField&) { return true; };
  auto event = [&](const WireField& f) {
    return f.number != DeviceEvent::kStatFieldNumber || Nested(f, stat);
  };
  auto line = [&](const WireField& f) {
    if (f.number != DeviceLine::kEventFieldNumber) return true;
    ++out->events;
    return Nested(f, event);
  };
  auto device = [&](const WireField& f) {
    return f.number != Device::kLineFieldNumber || Nested(f, line);
  };
  return ForEachWireField(absl::string_view(bytes.data(), bytes.size()), [&](const WireField& f) {
    const bool text = f.wire_type == kWireLengthDelimited;
    if (f.number == DeviceTrace::kTracerFieldNumber && text) out->tracer = std::string(f.payload);
    if (f.number == DeviceTrace::kStatusFieldNumber && text) out->status = std::string(f.payload);
    if (f.number == DeviceTrace::kDroppedEventsFieldNumber && f.wire_type == kWireVarint) {
      out->dropped_events = static_cast<int64_t>(f.varint);
    }
    if (f.number == DeviceTrace::kDroppedBuffersFieldNumber && f.wire_type == kWireVarint) {
      out->dropped_buffers = static_cast<int64_t>(f.varint);
    }
    return f.number != DeviceTrace::kDeviceFieldNumber || Nested(f, device);
  });
}

namespace {

// A top-level DeviceTrace read off the wire: the last tracer/status/drop
// values (a later occurrence wins, as protobuf reads them), the name fields
// and the devices as they are.
struct WireTrace {
  std::string_view tracer, status;
  uint64_t dropped_events = 0, dropped_buffers = 0;
  std::vector<std::string_view> names;
  struct Line {
    uint64_t id = 0;
    std::string_view name;
    std::vector<std::string_view> events;  // Event payloads.
    // The event fields follow one another with nothing between them, so the
    // bytes from the first payload to the last hold events only.
    bool packed = true;
    const char* events_end = nullptr;  // End of the last event field read.
  };
  struct Device {
    uint64_t id = 0;
    std::string_view name;
    std::vector<Line> lines;
  };
  std::vector<Device> devices;
};

// With `summary`, also what SummarizeDeviceTrace reads and checks (each
// event's fields and its stats' nesting, every event field counted), in the
// same walk.
bool ReadWireTrace(std::string_view bytes, WireTrace* out, DeviceTraceSummary* summary = nullptr) {
  auto stat = [](const WireField&) { return true; };
  auto event = [&](const WireField& f) {
    return f.number != DeviceEvent::kStatFieldNumber || Nested(f, stat);
  };
  const bool read =
      ForEachWireField(absl::string_view(bytes.data(), bytes.size()), [&](const WireField& f) {
        const bool text = f.wire_type == kWireLengthDelimited;
        if (f.number == DeviceTrace::kTracerFieldNumber && text) out->tracer = StdView(f.payload);
        if (f.number == DeviceTrace::kNameFieldNumber && text)
          out->names.push_back(StdView(f.payload));
        if (f.number == DeviceTrace::kStatusFieldNumber && text) out->status = StdView(f.payload);
        if (f.number == DeviceTrace::kDroppedEventsFieldNumber && f.wire_type == kWireVarint)
          out->dropped_events = f.varint;
        if (f.number == DeviceTrace::kDroppedBuffersFieldNumber && f.wire_type == kWireVarint)
          out->dropped_buffers = f.varint;
        if (f.number != DeviceTrace::kDeviceFieldNumber || !text) return true;
        WireTrace::Device& device = out->devices.emplace_back();
        return ForEachWireField(f.payload, [&](const WireField& d) {
          if (d.number == Device::kIdFieldNumber && d.wire_type == kWireVarint)
            device.id = d.varint;
          if (d.number == Device::kNameFieldNumber && d.wire_type == kWireLengthDelimited)
            device.name = StdView(d.payload);
          if (d.number != Device::kLineFieldNumber || d.wire_type != kWireLengthDelimited)
            return true;
          WireTrace::Line& line = device.lines.emplace_back();
          return ForEachWireField(d.payload, [&](const WireField& l) {
            if (l.number == DeviceLine::kEventFieldNumber && summary != nullptr) {
              ++summary->events;
              if (!Nested(l, event)) return false;
            }
            if (l.number == DeviceLine::kEventFieldNumber && l.wire_type == kWireLengthDelimited) {
              if (!line.events.empty() && line.events_end != l.encoded.data()) line.packed = false;
              line.events.push_back(StdView(l.payload));
              line.events_end = l.encoded.data() + l.encoded.size();
              return true;
            }
            if (!line.events.empty()) line.packed = false;  // Something between events.
            if (l.number == DeviceLine::kIdFieldNumber && l.wire_type == kWireVarint)
              line.id = l.varint;
            if (l.number == DeviceLine::kNameFieldNumber && l.wire_type == kWireLengthDelimited)
              line.name = StdView(l.payload);
            return true;
          });
        });
      });
  if (read && summary != nullptr) {
    summary->tracer = std::string(out->tracer);
    summary->status = std::string(out->status);
    summary->dropped_events = static_cast<int64_t>(out->dropped_events);
    summary->dropped_buffers = static_cast<int64_t>(out->dropped_buffers);
  }
  return read;
}

// proto3 string field: nothing when empty.
size_t StringFieldSize(uint32_t field, std::string_view s) {
  return s.empty() ? 0 : LengthDelimitedFieldSize(field, s.size());
}
void AppendStringField(uint32_t field, std::string_view s, std::string* out) {
  if (!s.empty()) AppendLengthDelimitedField(field, s, out);
}

// The events [begin, end) of one line placed in a part.
struct LineRun {
  size_t device, line, begin, end;
};

// Splits `trace` as SplitDeviceTraceBytes does, handing each part to `emit`
// as soon as it is written, after `copied(begin, end)` for each range of the
// trace's bytes that held only events of that part (read no more).
void SplitWireTrace(const WireTrace& trace, size_t max_bytes,
                    absl::FunctionRef<void(DeviceTracePart)> emit,
                    absl::FunctionRef<void(const char*, const char*)> copied) {
  // Every part: tracer and names; the first also the drop counts and status.
  size_t base = StringFieldSize(DeviceTrace::kTracerFieldNumber, trace.tracer);
  for (std::string_view name : trace.names)
    base += LengthDelimitedFieldSize(DeviceTrace::kNameFieldNumber, name.size());
  const size_t first_extra =
      VarintFieldSize(DeviceTrace::kDroppedEventsFieldNumber, trace.dropped_events) +
      StringFieldSize(DeviceTrace::kStatusFieldNumber, trace.status) +
      VarintFieldSize(DeviceTrace::kDroppedBuffersFieldNumber, trace.dropped_buffers);
  // Plan with the size bounds of device_tracer_set.h, so every split agrees.
  std::vector<std::vector<LineRun>> plan(1);
  size_t size = base + first_extra;
  size_t events_in_part = 0;
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    const WireTrace::Device& device = trace.devices[d];
    const size_t device_bytes =
        kPartFieldOverhead + kPartIntFieldBytes + kPartFieldOverhead + device.name.size();
    bool device_open = false;
    for (size_t l = 0; l < device.lines.size(); ++l) {
      const WireTrace::Line& line = device.lines[l];
      const size_t line_bytes =
          kPartFieldOverhead + kPartIntFieldBytes + kPartFieldOverhead + line.name.size();
      bool line_open = false;
      for (size_t e = 0; e < line.events.size(); ++e) {
        const size_t event_bytes = kPartFieldOverhead + line.events[e].size();
        size_t needed =
            event_bytes + (line_open ? 0 : line_bytes) + (device_open ? 0 : device_bytes);
        if (events_in_part > 0 && size + needed > max_bytes) {
          plan.emplace_back();
          size = base;
          events_in_part = 0;
          device_open = line_open = false;
          needed = event_bytes + line_bytes + device_bytes;
        }
        if (!line_open) plan.back().push_back({d, l, e, e});
        plan.back().back().end = e + 1;
        device_open = line_open = true;
        size += needed;
        ++events_in_part;
      }
    }
  }
  // Write each part with exact lengths, copying every event once.
  for (size_t p = 0; p < plan.size(); ++p) {
    const std::vector<LineRun>& runs = plan[p];
    DeviceTracePart part;
    // Payload sizes of each line run and of each device (runs of one device are adjacent).
    std::vector<size_t> line_size(runs.size()), device_size(runs.size(), 0);
    size_t total = base + (p == 0 ? first_extra : 0);
    for (size_t r = 0; r < runs.size(); ++r) {
      const WireTrace::Device& device = trace.devices[runs[r].device];
      const WireTrace::Line& line = device.lines[runs[r].line];
      size_t n = VarintFieldSize(DeviceLine::kIdFieldNumber, line.id) +
                 StringFieldSize(DeviceLine::kNameFieldNumber, line.name);
      for (size_t e = runs[r].begin; e < runs[r].end; ++e) {
        n += LengthDelimitedFieldSize(DeviceLine::kEventFieldNumber, line.events[e].size());
      }
      line_size[r] = n;
    }
    for (size_t r = 0; r < runs.size();) {
      const WireTrace::Device& device = trace.devices[runs[r].device];
      size_t n = VarintFieldSize(Device::kIdFieldNumber, device.id) +
                 StringFieldSize(Device::kNameFieldNumber, device.name);
      size_t last = r;
      for (; last < runs.size() && runs[last].device == runs[r].device; ++last) {
        n += LengthDelimitedFieldSize(Device::kLineFieldNumber, line_size[last]);
      }
      device_size[r] = n;
      total += LengthDelimitedFieldSize(DeviceTrace::kDeviceFieldNumber, n);
      r = last;
    }
    std::string& out = part.bytes;
    out.reserve(total);
    AppendStringField(DeviceTrace::kTracerFieldNumber, trace.tracer, &out);
    for (std::string_view name : trace.names)
      AppendLengthDelimitedField(DeviceTrace::kNameFieldNumber, name, &out);
    for (size_t r = 0; r < runs.size(); ++r) {
      const WireTrace::Device& device = trace.devices[runs[r].device];
      if (r == 0 || runs[r - 1].device != runs[r].device) {
        AppendTag(DeviceTrace::kDeviceFieldNumber, kWireLengthDelimited, &out);
        AppendVarint(device_size[r], &out);
        AppendVarintField(Device::kIdFieldNumber, device.id, &out);
        AppendStringField(Device::kNameFieldNumber, device.name, &out);
      }
      const WireTrace::Line& line = device.lines[runs[r].line];
      AppendTag(Device::kLineFieldNumber, kWireLengthDelimited, &out);
      AppendVarint(line_size[r], &out);
      AppendVarintField(DeviceLine::kIdFieldNumber, line.id, &out);
      AppendStringField(DeviceLine::kNameFieldNumber, line.name, &out);
      for (size_t e = runs[r].begin; e < runs[r].end; ++e) {
        AppendLengthDelimitedField(DeviceLine::kEventFieldNumber, line.events[e], &out);
      }
      part.events += static_cast<int64_t>(runs[r].end - runs[r].begin);
    }
    if (p == 0) {
      AppendVarintField(DeviceTrace::kDroppedEventsFieldNumber, trace.dropped_events, &out);
      AppendStringField(DeviceTrace::kStatusFieldNumber, trace.status, &out);
      AppendVarintField(DeviceTrace::kDroppedBuffersFieldNumber, trace.dropped_buffers, &out);
    }
    for (const LineRun& run : runs) {
      const WireTrace::Line& line = trace.devices[run.device].lines[run.line];
      if (line.packed) {
        const std::string_view last = line.events[run.end - 1];
        copied(line.events[run.begin].data(), last.data() + last.size());
      }
    }
    emit(std::move(part));
  }
}

}  // namespace

bool SplitDeviceTraceBytes(std::string_view bytes, size_t max_bytes,
                           std::vector<DeviceTracePart>* parts) {
  WireTrace trace;
  if (!ReadWireTrace(bytes, &trace)) return false;
  parts->clear();
  SplitWireTrace(
      trace, max_bytes, [&](DeviceTracePart part) { parts->push_back(std::move(part)); },
      [](const char*, const char*) {});
  return true;
}

bool SplitCollectPages(CollectPages* pages, size_t size, size_t max_bytes, std::string_view tracer,
                       absl::FunctionRef<bool(const DeviceTraceSummary&)> on_summary,
                       absl::FunctionRef<void(DeviceTracePart)> emit) {
  WireTrace trace;
  DeviceTraceSummary summary;
  if (size > pages->size() ||
      !ReadWireTrace(std::string_view(pages->data(), size), &trace, &summary)) {
    return false;
  }
  if (!on_summary(summary)) return true;
  // A later occurrence of a string field wins: as if `tracer` were appended.
  if (summary.tracer.empty()) trace.tracer = tracer;
  SplitWireTrace(trace, max_bytes, emit,
                 [&](const char* begin, const char* end) { pages->Release(begin, end); });
  return true;
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
      if (tracer.library->registration().abi_minor < 1) {
        tracer.serial = std::make_unique<std::timed_mutex>();
      }
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

void DeviceTracerSet::Abandon(const std::string& message) {
  MutexLock lock(&status_mu_);
  for (DeviceTracerStatus& status : status_) {
    if (status.state == DeviceTracerState::kFailed) continue;
    status.state = DeviceTracerState::kFailed;
    status.message = message;
  }
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
  // A tracer whose first collect fails is marked kFailed and said so in the
  // status (Collect does both); training starts all the same, as with a start
  // that fails.
  Collect().IgnoreError();
  return absl::OkStatus();
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
    int32_t rc;
    if (tracer.serial != nullptr) {
      if (!LockForStep(i, hook_name)) continue;
      std::lock_guard<std::timed_mutex> lock(*tracer.serial, std::adopt_lock);
      rc = (tracer.library->registration().*hook)(tracer.profiler, external_id, error.get());
    } else {
      rc = (tracer.library->registration().*hook)(tracer.profiler, external_id, error.get());
    }
    if (rc != XDL_TRACE_PLUGIN_OK && !tracer.step_error_reported) {
      tracer.step_error_reported = true;
      SetStatus(i, DeviceTracerState::kFailed, absl::StrCat(hook_name, ": ", error.message()));
    }
  }
}

bool DeviceTracerSet::LockForStep(size_t index, const char* hook_name) {
  Tracer& tracer = tracers_[index];
  if (tracer.serial->try_lock()) {
    tracer.collect_hung = false;  // That collect returned.
    return true;
  }
  if (tracer.collect_hung) return false;
  if (tracer.serial->try_lock_for(std::chrono::duration<double>(options_.serial_wait_s))) {
    return true;
  }
  tracer.collect_hung = true;
  if (!tracer.step_error_reported) {
    tracer.step_error_reported = true;
    SetStatus(index, DeviceTracerState::kFailed,
              absl::StrCat(hook_name, " skipped: a collect of this ABI 1.0 plugin (whose calls ",
                           "the core serializes) did not return within ", options_.serial_wait_s,
                           " s; its step markers are skipped until it returns"));
  }
  return false;
}

absl::Status DeviceTracerSet::CollectOne(Tracer& tracer, bool wait_for_room) {
  const XdlTracePluginRegistration& reg = tracer.library->registration();
  const size_t index = &tracer - tracers_.data();
  size_t size = 0;
  PluginErrorBuffer error;
  // A collect that will be one part is written into the string that becomes
  // it; a larger one into pages of its own, which the split hands back as it
  // copies their events out (plugin/collect_pages.h).
  std::string bytes;
  CollectPages pages;
  {
    std::unique_lock<std::timed_mutex> serial;
    if (tracer.serial != nullptr) serial = std::unique_lock<std::timed_mutex>(*tracer.serial);
    int32_t rc = reg.collect(tracer.profiler, nullptr, &size, error.get());
    if (rc != XDL_TRACE_PLUGIN_OK) {
      return absl::InternalError(absl::StrCat("device_tracers: '", tracer.entry,
                                              "': collect (size) failed (", rc,
                                              "): ", error.message()));
    }
    if (size == 0) return absl::OkStatus();
    // The announced size is the plugin's word: past the cap nothing is
    // allocated, and the collect is lost (counted as a lost buffer) and said so.
    const uint64_t cap = options_.MaxCollectBytes();
    if (size > cap) {
      CountDrops(index, 0, 1);
      return absl::ResourceExhaustedError(
          absl::StrCat("device_tracers: '", tracer.entry, "': collect announced ", size,
                       " bytes, above the cap of ", cap, " (4 x max_buffer_bytes); not taken"));
    }
    const size_t announced = size;
    char* out = nullptr;
    if (size > options_.max_trace_part_bytes && pages.Map(size)) {
      out = pages.data();
    } else {
      bytes.resize(size);  // Zero-fills what the plugin then overwrites.
      out = bytes.data();
    }
    rc = reg.collect(tracer.profiler, reinterpret_cast<uint8_t*>(out), &size, error.get());
    if (rc != XDL_TRACE_PLUGIN_OK || size > announced) {
      return absl::InternalError(absl::StrCat("device_tracers: '", tracer.entry, "': collect of ",
                                              announced, " bytes failed (", rc,
                                              "): ", error.message()));
    }
  }
  auto not_a_trace = [&] {
    return absl::DataLossError(absl::StrCat("device_tracers: '", tracer.entry,
                                            "': collect returned ", size,
                                            " bytes that are not a DeviceTrace"));
  };
  if (pages.data() != nullptr && size <= options_.max_trace_part_bytes) {
    bytes.assign(pages.data(), size);  // Shorter than announced: one part after all.
    pages.Reset();
  }
  auto admit = [&](DeviceTracePart part) {
    Admit(index, std::move(part.bytes), part.events, wait_for_room);
  };
  // Status and drops are noted before any part waits for room; a trace with
  // no events and no drops is not kept.
  auto note = [&](const DeviceTraceSummary& summary) {
    DeviceTracerStatus status = FromPluginStatus(tracer.type, summary.status);
    SetStatus(index, status.state, std::move(status.message));
    CountDrops(index, summary.dropped_events, summary.dropped_buffers);
    return summary.events != 0 || summary.dropped_events != 0 || summary.dropped_buffers != 0;
  };
  if (pages.data() != nullptr) {
    if (!SplitCollectPages(&pages, size, static_cast<size_t>(options_.max_trace_part_bytes),
                           tracer.type, note, admit)) {
      return not_a_trace();
    }
    return absl::OkStatus();
  }
  bytes.resize(size);
  DeviceTraceSummary summary;
  if (!SummarizeDeviceTrace(bytes, &summary)) return not_a_trace();
  if (!note(summary)) return absl::OkStatus();
  if (summary.tracer.empty()) {
    // A later occurrence of a string field wins: appending names the trace.
    AppendLengthDelimitedField(DeviceTrace::kTracerFieldNumber, tracer.type, &bytes);
  }
  if (bytes.size() <= options_.max_trace_part_bytes) {
    Admit(index, std::move(bytes), summary.events, wait_for_room);
    return absl::OkStatus();
  }
  // Too large for one part: split on the wire, so the pending cap keeps what fits.
  std::vector<DeviceTracePart> parts;
  if (!SplitDeviceTraceBytes(bytes, static_cast<size_t>(options_.max_trace_part_bytes), &parts)) {
    return not_a_trace();
  }
  std::string().swap(bytes);  // The parts hold their own copy.
  for (DeviceTracePart& part : parts) admit(std::move(part));
  return absl::OkStatus();
}

void DeviceTracerSet::Admit(size_t index, std::string bytes, int64_t events, bool wait_for_room) {
  {
    MutexLock lock(&pending_mu_);
    if (collect_into_ != nullptr) {  // CollectAll: the caller writes it at once.
      events_collected_.fetch_add(events, std::memory_order_relaxed);
      collect_into_->push_back(std::move(bytes));
      return;
    }
    // A part larger than the whole cap never fits: it is not waited for.
    while (wait_for_room && !stop_waiting_ && bytes.size() <= options_.max_pending_bytes &&
           pending_bytes_ + bytes.size() > options_.max_pending_bytes) {
      room_.Wait(&pending_mu_);
    }
    if (pending_bytes_ + bytes.size() <= options_.max_pending_bytes) {
      events_collected_.fetch_add(events, std::memory_order_relaxed);
      pending_bytes_ += bytes.size();
      pending_.push_back(std::move(bytes));
      return;
    }
  }
  CountDrops(index, events, 0);
}

absl::Status DeviceTracerSet::Collect(bool wait_for_room) {
  absl::Status first;
  for (Tracer& tracer : tracers_) {
    if (tracer.profiler == nullptr) continue;
    absl::Status status = CollectOne(tracer, wait_for_room);
    if (!status.ok()) {
      SetStatus(&tracer - tracers_.data(), DeviceTracerState::kFailed,
                std::string(status.message()));
      if (first.ok()) first = status;
    }
  }
  return first;
}

absl::Status DeviceTracerSet::CollectAll(std::vector<std::string>* out) {
  {
    MutexLock lock(&pending_mu_);
    collect_into_ = out;
  }
  absl::Status status = Collect();
  MutexLock lock(&pending_mu_);
  collect_into_ = nullptr;
  return status;
}

std::vector<std::string> DeviceTracerSet::TakePending(uint64_t max_bytes) {
  std::vector<std::string> out;
  {
    MutexLock lock(&pending_mu_);
    uint64_t taken = 0;
    while (!pending_.empty() && (out.empty() || taken + pending_.front().size() <= max_bytes)) {
      taken += pending_.front().size();
      out.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    pending_bytes_ -= taken;
  }
  if (!out.empty()) room_.SignalAll();
  return out;
}

void DeviceTracerSet::StopWaiting() {
  {
    MutexLock lock(&pending_mu_);
    stop_waiting_ = true;
  }
  room_.SignalAll();
}

uint64_t DeviceTracerSet::pending_bytes() const {
  MutexLock lock(&pending_mu_);
  return pending_bytes_;
}

}  // namespace internal
}  // namespace xdl_trace
