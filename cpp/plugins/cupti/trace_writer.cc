// Serializes device events into an xdl.proto.DeviceTrace by hand (no protobuf runtime).
#include "trace_writer.h"

#include <algorithm>
#include <tuple>

#include "core/wire.h"

namespace xdl_trace {
namespace cupti {
namespace {

namespace fields = internal::device_trace_fields;
using internal::AppendLengthDelimitedField;
using internal::AppendVarintField;

std::string LineName(int32_t device, int64_t line) {
  if (device != kHostApiDevice) {
    return line == kMemoryLine ? std::string("memory") : "stream " + std::to_string(line);
  }
  if (line == -2) return "synchronization";
  if (line == -3) return "profiler overhead";
  return "thread " + std::to_string(line);
}

}  // namespace

int32_t NameTable::Intern(std::string_view name) {
  auto it = index_.find(name);
  if (it != index_.end()) return it->second;
  const int32_t index = static_cast<int32_t>(names_.size());
  names_.emplace_back(name);
  index_.emplace(std::string_view(names_.back()), index);
  return index;
}

NameSnapshot::NameSnapshot(const NameTable& table) {
  names_.reserve(table.size());
  for (size_t i = 0; i < table.size(); ++i) names_.push_back(&table.name(static_cast<int32_t>(i)));
}

std::string SerializeDeviceTrace(const std::string& tracer, const NameSnapshot& names,
                                 std::vector<DeviceEventData>& events, int64_t dropped,
                                 const std::string& status, int64_t dropped_buffers) {
  // Mostly in order already (one stream's records arrive in order).
  std::stable_sort(
      events.begin(), events.end(), [](const DeviceEventData& a, const DeviceEventData& b) {
        return std::tie(a.device, a.line, a.start_ns) < std::tie(b.device, b.line, b.start_ns);
      });
  // Local name table: only the names these events use; index 0 is "".
  std::vector<int32_t> local(names.size(), -1);
  std::vector<int32_t> used = {0};
  local[0] = 0;
  auto map = [&](int32_t global) {
    int32_t& slot = local[static_cast<size_t>(global)];
    if (slot < 0) {
      slot = static_cast<int32_t>(used.size());
      used.push_back(global);
    }
    return slot;
  };

  // Scratch messages, reused: no allocation per event once warm.
  std::string devices, device_msg, line_msg, event, stat;
  size_t i = 0;
  while (i < events.size()) {
    const int32_t device = events[i].device;
    device_msg.clear();
    AppendVarintField(fields::kDeviceId, static_cast<uint64_t>(static_cast<int64_t>(device)),
                      &device_msg);
    AppendLengthDelimitedField(fields::kDeviceName,
                               device == kHostApiDevice ? std::string("CUDA API (host threads)")
                                                        : "GPU " + std::to_string(device),
                               &device_msg);
    while (i < events.size() && events[i].device == device) {
      const int64_t line = events[i].line;
      line_msg.clear();
      AppendVarintField(fields::kLineId, static_cast<uint64_t>(line), &line_msg);
      AppendLengthDelimitedField(fields::kLineName, LineName(device, line), &line_msg);
      for (; i < events.size() && events[i].device == device && events[i].line == line; ++i) {
        const DeviceEventData& e = events[i];
        event.clear();
        AppendVarintField(fields::kEventNameIndex, static_cast<uint64_t>(map(e.name)), &event);
        AppendVarintField(fields::kEventKind, static_cast<uint64_t>(e.kind), &event);
        AppendVarintField(fields::kEventStartNs, static_cast<uint64_t>(e.start_ns), &event);
        AppendVarintField(fields::kEventEndNs, static_cast<uint64_t>(e.end_ns), &event);
        AppendVarintField(fields::kEventCorrelationId, e.correlation_id, &event);
        AppendVarintField(fields::kEventExternalId, e.external_id, &event);
        for (uint8_t k = 0; k < e.stat_count; ++k) {
          const EventStat& s = e.stats[k];
          stat.clear();
          AppendVarintField(fields::kStatNameIndex, static_cast<uint64_t>(map(s.name)), &stat);
          if (s.type == EventStat::Type::kText) {
            AppendLengthDelimitedField(fields::kStatStrValue,
                                       names.name(static_cast<int32_t>(s.value)), &stat);
          } else {
            const int64_t v = s.type == EventStat::Type::kNameIndex
                                  ? map(static_cast<int32_t>(s.value))
                                  : s.value;
            // int64_value, a oneof member: written even when 0.
            internal::AppendTag(fields::kStatInt64Value, internal::kWireVarint, &stat);
            internal::AppendVarint(static_cast<uint64_t>(v), &stat);
          }
          AppendLengthDelimitedField(fields::kEventStat, stat, &event);
        }
        AppendLengthDelimitedField(fields::kLineEvent, event, &line_msg);
      }
      AppendLengthDelimitedField(fields::kDeviceLine, line_msg, &device_msg);
    }
    AppendLengthDelimitedField(fields::kTraceDevice, device_msg, &devices);
  }
  std::string trace;
  trace.reserve(devices.size() + 64 * used.size() + 64);
  AppendLengthDelimitedField(fields::kTraceTracer, tracer, &trace);
  for (int32_t global : used)
    AppendLengthDelimitedField(fields::kTraceName, names.name(global), &trace);
  trace += devices;
  AppendVarintField(fields::kTraceDroppedEvents, static_cast<uint64_t>(dropped), &trace);
  if (!status.empty()) AppendLengthDelimitedField(fields::kTraceStatus, status, &trace);
  AppendVarintField(fields::kTraceDroppedBuffers, static_cast<uint64_t>(dropped_buffers), &trace);
  return trace;
}

}  // namespace cupti
}  // namespace xdl_trace
