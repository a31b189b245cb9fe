// Converts a TensorFlow XSpace (what a TensorFlow profiler plugin collects) into our DeviceTrace.
#include "plugin/xspace_to_device_trace.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace xdl_trace {
namespace internal {
namespace {

using xdl::proto::DeviceEvent;
using xdl::proto::DeviceEventKind;
using xdl::proto::DeviceStat;

// TensorFlow's plane-name prefixes (tsl/profiler/utils/xplane_schema.h).
constexpr absl::string_view kDevicePlanePrefix = "/device:";
constexpr absl::string_view kHostPlanePrefix = "/host:";

// Interns names into DeviceTrace.name.
class NameTable {
 public:
  explicit NameTable(xdl::proto::DeviceTrace* trace) : trace_(trace) {
    if (trace_->name_size() == 0) trace_->add_name();
    for (int i = 0; i < trace_->name_size(); ++i) index_.emplace(trace_->name(i), i);
  }
  int32_t Intern(absl::string_view name) {
    auto [it, inserted] = index_.emplace(std::string(name), trace_->name_size());
    if (inserted) trace_->add_name(std::string(name));
    return it->second;
  }
  // The index of `name`, or -1 when it is not in the table.
  int32_t Find(absl::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? -1 : it->second;
  }

 private:
  xdl::proto::DeviceTrace* trace_;
  std::unordered_map<std::string, int32_t> index_;
};

// The device id of a plane: N of "/device:<TYPE>:<N>", -1 for a host plane,
// else the plane's own id (clamped to int32).
int32_t DeviceId(const xdl::xplane::XPlane& plane) {
  absl::string_view name = plane.name();
  if (absl::StartsWith(name, kHostPlanePrefix)) return -1;
  if (absl::StartsWith(name, kDevicePlanePrefix)) {
    const size_t colon = name.rfind(':');
    int32_t ordinal = 0;
    if (colon != absl::string_view::npos && absl::SimpleAtoi(name.substr(colon + 1), &ordinal)) {
      return ordinal;
    }
  }
  if (plane.id() > std::numeric_limits<int32_t>::max()) return std::numeric_limits<int32_t>::max();
  if (plane.id() < std::numeric_limits<int32_t>::min()) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(plane.id());
}

// "key:value key:value" (TensorFlow's *_details stats) as a map.
std::unordered_map<std::string, std::string> ParseDetails(absl::string_view details) {
  std::unordered_map<std::string, std::string> out;
  for (absl::string_view item : absl::StrSplit(details, ' ', absl::SkipEmpty())) {
    const size_t colon = item.find(':');
    if (colon == absl::string_view::npos) continue;
    out.emplace(std::string(item.substr(0, colon)), std::string(item.substr(colon + 1)));
  }
  return out;
}

// Builds the stats and kind of one event.
class EventBuilder {
 public:
  EventBuilder(const xdl::xplane::XPlane& plane, NameTable* names, XSpaceConversionCounts* counts)
      : plane_(plane), names_(names), counts_(counts) {}

  // Appends `stat` to `event` (its value as is; ref_value as the referenced
  // name) unless a stat of the same name is there already. Returns the name.
  std::string AddStat(const xdl::xplane::XStat& stat, DeviceEvent* event) {
    const std::string name = StatName(stat.metadata_id());
    if (HasStat(*event, name)) return name;
    if (name == "correlation_id") {
      if (stat.value_case() == xdl::xplane::XStat::kUint64Value) {
        event->set_correlation_id(stat.uint64_value());
        return name;
      }
      if (stat.value_case() == xdl::xplane::XStat::kInt64Value) {
        event->set_correlation_id(static_cast<uint64_t>(stat.int64_value()));
        return name;
      }
    }
    DeviceStat out;
    out.set_name_index(names_->Intern(name));
    switch (stat.value_case()) {
      case xdl::xplane::XStat::kDoubleValue:
        out.set_double_value(stat.double_value());
        break;
      case xdl::xplane::XStat::kUint64Value:
        out.set_uint64_value(stat.uint64_value());
        break;
      case xdl::xplane::XStat::kInt64Value:
        out.set_int64_value(stat.int64_value());
        break;
      case xdl::xplane::XStat::kStrValue:
        out.set_str_value(stat.str_value());
        details_.emplace_back(name, stat.str_value());
        break;
      case xdl::xplane::XStat::kRefValue:
        out.set_str_value(StatName(static_cast<int64_t>(stat.ref_value())));
        details_.emplace_back(name, out.str_value());
        break;
      case xdl::xplane::XStat::kBytesValue:
        ++counts_->bytes_stats_skipped;  // Raw bytes (often a serialized proto): not shown.
        return name;
      case xdl::xplane::XStat::VALUE_NOT_SET:
        return name;
    }
    *event->add_stat() = std::move(out);
    return name;
  }

  // The kind from the event's name and the stats added; unpacks TensorFlow's
  // *_details strings into our stat names.
  DeviceEventKind Finish(absl::string_view event_name, bool host_plane, DeviceEvent* event) {
    DeviceEventKind kind =
        host_plane ? xdl::proto::DEVICE_EVENT_RUNTIME_API : xdl::proto::DEVICE_EVENT_KERNEL;
    bool memory_free = event_name == "MemoryFree";
    for (const auto& [stat_name, value] : details_) {
      const auto details = ParseDetails(value);
      if (stat_name == "kernel_details") {
        Unpack(details, "grid", "grid", event, /*dims=*/true);
        Unpack(details, "block", "block", event, /*dims=*/true);
        Unpack(details, "regs", "registers_per_thread", event);
        int64_t shared = 0, part = 0;
        bool any = false;
        for (const char* key : {"static_shared", "dynamic_shared"}) {
          auto it = details.find(key);
          if (it != details.end() && absl::SimpleAtoi(it->second, &part)) {
            shared += part;
            any = true;
          }
        }
        if (any) SetInt(event, "shared_memory_bytes", shared);
      } else if (stat_name == "memcpy_details") {
        if (!host_plane) kind = xdl::proto::DEVICE_EVENT_MEMCPY;
        Unpack(details, "size", "bytes", event);
        Unpack(details, "kind_src", "src_memory", event);
        Unpack(details, "kind_dst", "dst_memory", event);
      } else if (stat_name == "memset_details") {
        if (!host_plane) kind = xdl::proto::DEVICE_EVENT_MEMSET;
        Unpack(details, "num_bytes", "bytes", event);
      } else if (stat_name == "memalloc_details" || stat_name == "memfree_details") {
        if (!host_plane) kind = xdl::proto::DEVICE_EVENT_MEMORY;
        memory_free = memory_free || stat_name == "memfree_details";
        Unpack(details, "num_bytes", "bytes", event);
      }
    }
    if (!host_plane) {
      if (absl::StartsWith(event_name, "Memcpy")) kind = xdl::proto::DEVICE_EVENT_MEMCPY;
      if (absl::StartsWith(event_name, "Memset")) kind = xdl::proto::DEVICE_EVENT_MEMSET;
      if (event_name == "MemoryAlloc" || event_name == "MemoryFree") {
        kind = xdl::proto::DEVICE_EVENT_MEMORY;
      }
      if (kind == xdl::proto::DEVICE_EVENT_MEMORY && !HasStat(*event, "operation")) {
        DeviceStat* op = event->add_stat();
        op->set_name_index(names_->Intern("operation"));
        op->set_str_value(memory_free ? "free" : "alloc");
      }
    }
    details_.clear();
    return kind;
  }

 private:
  std::string StatName(int64_t id) const {
    auto it = plane_.stat_metadata().find(id);
    return it == plane_.stat_metadata().end() ? "stat " + std::to_string(id) : it->second.name();
  }

  bool HasStat(const DeviceEvent& event, absl::string_view name) {
    const int32_t index = names_->Find(name);
    if (index < 0) return false;
    for (const DeviceStat& stat : event.stat()) {
      if (stat.name_index() == index) return true;
    }
    return false;
  }

  void SetInt(DeviceEvent* event, absl::string_view name, int64_t value) {
    if (HasStat(*event, name)) return;
    DeviceStat* stat = event->add_stat();
    stat->set_name_index(names_->Intern(name));
    stat->set_int64_value(value);
  }

  // details[key] as our stat `name`: an integer when it parses as one, "x,y,z"
  // dimensions as "XxYxZ" (dims), else the string.
  void Unpack(const std::unordered_map<std::string, std::string>& details, const char* key,
              absl::string_view name, DeviceEvent* event, bool dims = false) {
    auto it = details.find(key);
    if (it == details.end() || HasStat(*event, name)) return;
    int64_t number = 0;
    if (!dims && absl::SimpleAtoi(it->second, &number)) {
      SetInt(event, name, number);
      return;
    }
    DeviceStat* stat = event->add_stat();
    stat->set_name_index(names_->Intern(name));
    stat->set_str_value(dims ? absl::StrReplaceAll(it->second, {{",", "x"}}) : it->second);
  }

  const xdl::xplane::XPlane& plane_;
  NameTable* names_;
  XSpaceConversionCounts* counts_;
  std::vector<std::pair<std::string, std::string>> details_;  // String stats of this event.
};

// a + b, saturating instead of overflowing.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b) {
    return std::numeric_limits<int64_t>::max();
  }
  if (b < 0 && a < std::numeric_limits<int64_t>::min() - b) {
    return std::numeric_limits<int64_t>::min();
  }
  return a + b;
}

}  // namespace

XSpaceConversionCounts ConvertXSpace(const xdl::xplane::XSpace& space, const StepAtFn& step_at,
                                     xdl::proto::DeviceTrace* trace) {
  XSpaceConversionCounts counts;
  NameTable names(trace);
  // Host-plane events by correlation id: a device event launched by one of
  // them belongs to the launching call's step (its start on the host).
  std::unordered_map<uint64_t, uint64_t> launch_step;
  std::vector<DeviceEvent*> device_events;
  auto step_of = [&](int64_t time_ns) -> uint64_t { return step_at ? step_at(time_ns) : 0; };
  for (const xdl::xplane::XPlane& plane : space.planes()) {
    const bool host_plane = absl::StartsWith(plane.name(), kHostPlanePrefix);
    xdl::proto::Device* device = nullptr;
    EventBuilder builder(plane, &names, &counts);
    for (const xdl::xplane::XLine& line : plane.lines()) {
      xdl::proto::DeviceLine* out_line = nullptr;
      for (const xdl::xplane::XEvent& event : line.events()) {
        if (event.data_case() == xdl::xplane::XEvent::kNumOccurrences) {
          ++counts.aggregated_events_skipped;
          continue;
        }
        if (device == nullptr) {
          device = trace->add_device();
          device->set_id(DeviceId(plane));
          device->set_name(plane.name());
        }
        if (out_line == nullptr) {
          out_line = device->add_line();
          out_line->set_id(line.id());
          out_line->set_name(line.display_name().empty() ? line.name() : line.display_name());
        }
        DeviceEvent* out = out_line->add_event();
        std::string name;
        auto metadata = plane.event_metadata().find(event.metadata_id());
        if (metadata != plane.event_metadata().end()) {
          name = metadata->second.display_name().empty() ? metadata->second.name()
                                                         : metadata->second.display_name();
        }
        out->set_name_index(names.Intern(name));
        // Picoseconds to nanoseconds: start rounded down, end computed from
        // the picosecond end so durations lose at most 1 ns.
        const int64_t start_ps = event.offset_ps();
        const int64_t end_ps = SaturatingAdd(start_ps, std::max<int64_t>(event.duration_ps(), 0));
        out->set_start_ns(SaturatingAdd(line.timestamp_ns(), start_ps / 1000));
        out->set_end_ns(SaturatingAdd(line.timestamp_ns(), end_ps / 1000));
        for (const xdl::xplane::XStat& stat : event.stats()) builder.AddStat(stat, out);
        if (metadata != plane.event_metadata().end()) {
          for (const xdl::xplane::XStat& stat : metadata->second.stats()) {
            builder.AddStat(stat, out);
          }
        }
        out->set_kind(builder.Finish(name, host_plane, out));
        ++counts.events;
        if (host_plane) {
          out->set_external_id(step_of(out->start_ns()));
          if (out->correlation_id() != 0) {
            launch_step.emplace(out->correlation_id(), out->external_id());
          }
        } else {
          device_events.push_back(out);
        }
      }
    }
  }
  for (DeviceEvent* event : device_events) {
    auto launch = launch_step.find(event->correlation_id());
    const bool launched = event->correlation_id() != 0 && launch != launch_step.end();
    event->set_external_id(launched ? launch->second : step_of(event->start_ns()));
  }
  if (space.errors_size() > 0) {
    trace->set_status("plugin reported: " + absl::StrJoin(space.errors(), "; "));
  }
  return counts;
}

}  // namespace internal
}  // namespace xdl_trace
