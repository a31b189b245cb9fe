// Serializes device events into an xdl.proto.DeviceTrace by hand (no protobuf runtime).
#include "trace_writer.h"

#include <algorithm>
#include <tuple>

namespace xdl_trace {
namespace cupti {
namespace {

// Minimal protobuf wire writer.
class Writer {
 public:
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void Int(uint32_t field, uint64_t v) {
    if (v == 0) return;
    Varint(field << 3);
    Varint(v);
  }
  void Bytes(uint32_t field, std::string_view bytes) {
    Varint((field << 3) | 2);
    Varint(bytes.size());
    out_.append(bytes.data(), bytes.size());
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

std::string LineName(int32_t device, int64_t line) {
  if (device != kHostApiDevice) return "stream " + std::to_string(line);
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
                                 const std::string& status) {
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
    device_msg.Int(1, static_cast<uint64_t>(static_cast<int64_t>(device)));
    device_msg.Bytes(2, device == kHostApiDevice ? std::string("CUDA API (host threads)")
                                                 : "GPU " + std::to_string(device));
    while (i < events.size() && events[i].device == device) {
      const int64_t line = events[i].line;
      Writer line_msg;
      line_msg.Int(1, static_cast<uint64_t>(line));
      line_msg.Bytes(2, LineName(device, line));
      for (; i < events.size() && events[i].device == device && events[i].line == line; ++i) {
        const DeviceEventData& e = events[i];
        Writer event;
        event.Int(1, static_cast<uint64_t>(map(e.name)));
        event.Int(2, static_cast<uint64_t>(e.kind));
        event.Int(3, static_cast<uint64_t>(e.start_ns));
        event.Int(4, static_cast<uint64_t>(e.end_ns));
        event.Int(5, e.correlation_id);
        event.Int(6, e.external_id);
        for (const EventStat& s : e.stats) {
          Writer stat;
          stat.Int(1, static_cast<uint64_t>(map(s.name)));
          if (s.is_string) {
            stat.Bytes(5, s.text);
          } else {
            stat.Varint((2 << 3) | 0);  // int64_value, written even when 0.
            stat.Varint(static_cast<uint64_t>(s.value));
          }
          event.Bytes(7, stat.str());
        }
        line_msg.Bytes(3, event.str());
      }
      device_msg.Bytes(3, line_msg.str());
    }
    Writer wrapped;
    wrapped.Bytes(3, device_msg.str());
    devices += wrapped.str();
  }
  trace.Bytes(1, tracer);
  for (int32_t global : used) trace.Bytes(2, names.name(global));
  trace.str() += devices;
  trace.Int(4, static_cast<uint64_t>(dropped));
  if (!status.empty()) trace.Bytes(5, status);
  return trace.str();
}

}  // namespace cupti
}  // namespace xdl_trace
