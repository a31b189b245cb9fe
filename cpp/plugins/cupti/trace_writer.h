// Serializes device events into an xdl.proto.DeviceTrace by hand (core/wire.h, no protobuf
// runtime).
#ifndef XDL_TRACE_PLUGINS_CUPTI_TRACE_WRITER_H_
#define XDL_TRACE_PLUGINS_CUPTI_TRACE_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/device_trace_fields.h"

namespace xdl_trace {
namespace cupti {

// Values of xdl.proto.DeviceEventKind (core/device_trace_fields.h).
using EventKind = internal::DeviceEventKind;

// Device id of the pseudo device whose lines are host threads calling CUDA.
inline constexpr int32_t kHostApiDevice = -1;
// Line of a GPU device holding its memory allocations and frees.
inline constexpr int64_t kMemoryLine = -4;

struct EventStat {
  int32_t name = 0;  // NameTable index.
  bool is_string = false;
  int64_t value = 0;
  std::string text;
};

struct DeviceEventData {
  int32_t name = 0;  // NameTable index.
  EventKind kind = EventKind::kOther;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t correlation_id = 0;
  uint64_t external_id = 0;
  int32_t device = 0;  // kHostApiDevice for API calls.
  int64_t line = 0;    // Stream id, or thread id on kHostApiDevice.
  std::vector<EventStat> stats;
};

// Interned names for the tracer's lifetime (distinct kernel names stay few).
// Threading: one thread at a time (the collecting thread).
class NameTable {
 public:
  NameTable() { Intern(""); }
  int32_t Intern(std::string_view name);
  const std::string& name(int32_t index) const { return names_[index]; }

 private:
  std::unordered_map<std::string, int32_t> index_;
  std::vector<std::string> names_;
};

// Serialized xdl.proto.DeviceTrace of `events` (grouped by device then line,
// sorted by start), with a name table holding only the names they use.
std::string SerializeDeviceTrace(const std::string& tracer, const NameTable& names,
                                 std::vector<DeviceEventData> events, int64_t dropped,
                                 const std::string& status, int64_t dropped_buffers = 0);

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_TRACE_WRITER_H_
