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

// One message being written: proto3 scalars (nothing when 0) and
// length-delimited fields, through core/wire.h.
class Writer {
 public:
  void Int(uint32_t field, uint64_t v) { AppendVarintField(field, v, &out_); }
  // A varint field written even when 0 (a oneof member).
  void IntAlways(uint32_t field, uint64_t v) {
    internal::AppendTag(field, internal::kWireVarint, &out_);
    internal::AppendVarint(v, &out_);
  }
  void Bytes(uint32_t field, std::string_view bytes) {
    AppendLengthDelimitedField(field, bytes, &out_);
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

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
  auto it = index_.find(std::string(name));
  if (it != index_.end()) return it->second;
  const int32_t index = static_cast<int32_t>(names_.size());
  names_.emplace_back(name);
  index_.emplace(names_.back(), index);
  return index;
}

std::string SerializeDeviceTrace(const std::string& tracer, const NameTable& names,
                                 std::vector<DeviceEventData> events, int64_t dropped,
                                 const std::string& status, int64_t dropped_buffers) {
  std::sort(events.begin(), events.end(), [](const DeviceEventData& a, const DeviceEventData& b) {
    return std::tie(a.device, a.line, a.start_ns) < std::tie(b.device, b.line, b.start_ns);
  });
  // Local name table: only the names these events use; index 0 is "".
  std::unordered_map<int32_t, int32_t> local;
  std::vector<int32_t> used = {0};
  local[0] = 0;
  auto map = [&](int32_t global) {
    auto [it, inserted] = local.emplace(global, static_cast<int32_t>(used.size()));
    if (inserted) used.push_back(global);
    return it->second;
  };

  Writer trace;
  std::string devices;
  size_t i = 0;
  while (i < events.size()) {
    const int32_t device = events[i].device;
    Writer device_msg;
    device_msg.Int(fields::kDeviceId, static_cast<uint64_t>(static_cast<int64_t>(device)));
    device_msg.Bytes(fields::kDeviceName, device == kHostApiDevice
                                              ? std::string("CUDA API (host threads)")
                                              : "GPU " + std::to_string(device));
    while (i < events.size() && events[i].device == device) {
      const int64_t line = events[i].line;
      Writer line_msg;
      line_msg.Int(fields::kLineId, static_cast<uint64_t>(line));
      line_msg.Bytes(fields::kLineName, LineName(device, line));
      for (; i < events.size() && events[i].device == device && events[i].line == line; ++i) {
        const DeviceEventData& e = events[i];
        Writer event;
        event.Int(fields::kEventNameIndex, static_cast<uint64_t>(map(e.name)));
        event.Int(fields::kEventKind, static_cast<uint64_t>(e.kind));
        event.Int(fields::kEventStartNs, static_cast<uint64_t>(e.start_ns));
        event.Int(fields::kEventEndNs, static_cast<uint64_t>(e.end_ns));
        event.Int(fields::kEventCorrelationId, e.correlation_id);
        event.Int(fields::kEventExternalId, e.external_id);
        for (const EventStat& s : e.stats) {
          Writer stat;
          stat.Int(fields::kStatNameIndex, static_cast<uint64_t>(map(s.name)));
          if (s.is_string) {
            stat.Bytes(fields::kStatStrValue, s.text);
          } else {
            // int64_value, a oneof member: written even when 0.
            stat.IntAlways(fields::kStatInt64Value, static_cast<uint64_t>(s.value));
          }
          event.Bytes(fields::kEventStat, stat.str());
        }
        line_msg.Bytes(fields::kLineEvent, event.str());
      }
      device_msg.Bytes(fields::kDeviceLine, line_msg.str());
    }
    Writer wrapped;
    wrapped.Bytes(fields::kTraceDevice, device_msg.str());
    devices += wrapped.str();
  }
  trace.Bytes(fields::kTraceTracer, tracer);
  for (int32_t global : used) trace.Bytes(fields::kTraceName, names.name(global));
  trace.str() += devices;
  trace.Int(fields::kTraceDroppedEvents, static_cast<uint64_t>(dropped));
  if (!status.empty()) trace.Bytes(fields::kTraceStatus, status);
  trace.Int(fields::kTraceDroppedBuffers, static_cast<uint64_t>(dropped_buffers));
  return trace.str();
}

}  // namespace cupti
}  // namespace xdl_trace
