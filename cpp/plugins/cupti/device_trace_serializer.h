// Serializes device events into an xdl.proto.DeviceTrace by hand (core/wire.h, no protobuf
// runtime).
#ifndef XDL_TRACE_PLUGINS_CUPTI_DEVICE_TRACE_SERIALIZER_H_
#define XDL_TRACE_PLUGINS_CUPTI_DEVICE_TRACE_SERIALIZER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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

// One stat, no heap: string values are NameTable entries too (their values
// repeat: "128x1x1", "HtoD", "pageable").
struct EventStat {
  enum class Type : uint8_t {
    kInt,       // int64_value = value.
    kText,      // str_value = the NameTable entry `value`.
    kNameIndex  // int64_value = the trace's own index of NameTable entry `value`.
  };
  int32_t name = 0;  // NameTable index.
  Type type = Type::kInt;
  int64_t value = 0;
};

// The most stats a CUPTI event carries (a peer copy: 6).
inline constexpr size_t kMaxEventStats = 6;

// 128 bytes (two cache lines): the collector walks a second's worth of these
// (1 Mi at a GPU's rate) twice, to size and to write, so their size is its
// memory traffic. Stats are kept as packed name/type keys beside their values.
struct DeviceEventData {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t correlation_id = 0;
  uint64_t external_id = 0;
  int64_t line = 0;    // Stream id, or thread id on kHostApiDevice.
  int32_t name = 0;    // NameTable index.
  int32_t device = 0;  // kHostApiDevice for API calls.
  EventKind kind = EventKind::kOther;
  uint8_t stat_count = 0;

  void AddStat(int32_t stat_name, EventStat::Type type, int64_t value) {
    if (stat_count == kMaxEventStats) return;
    stat_keys_[stat_count] = static_cast<uint32_t>(stat_name) << 2 | static_cast<uint32_t>(type);
    stat_values_[stat_count++] = value;
  }
  EventStat stat(size_t k) const {
    return {static_cast<int32_t>(stat_keys_[k] >> 2),
            static_cast<EventStat::Type>(stat_keys_[k] & 3), stat_values_[k]};
  }

 private:
  uint32_t stat_keys_[kMaxEventStats] = {};  // NameTable index << 2 | EventStat::Type.
  int64_t stat_values_[kMaxEventStats] = {};
};
static_assert(sizeof(DeviceEventData) == 128);

// Interned names for the tracer's lifetime (distinct kernel names stay few).
// Threading: one thread at a time (the collecting thread).
class NameTable {
 public:
  NameTable() { Intern(""); }
  int32_t Intern(std::string_view name);
  const std::string& name(int32_t index) const { return names_[index]; }
  size_t size() const { return names_.size(); }

 private:
  std::unordered_map<std::string_view, int32_t> index_;  // Views into names_' strings.
  std::deque<std::string> names_;                        // A deque: its strings never move.
};

// The names of a NameTable at one moment, readable while the table grows on
// another thread: its strings never move, so pointers to them stay valid.
// Take it under the table's lock; read it without.
class NameSnapshot {
 public:
  NameSnapshot() = default;
  explicit NameSnapshot(const NameTable& table);
  const std::string& name(int32_t index) const { return *names_[static_cast<size_t>(index)]; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<const std::string*> names_;
};

class EventBlocks;  // event_blocks.h

// A device's own stats (xdl.proto.Device.stat): its limits, where the tracer
// knows them (NameTable index, value).
struct DeviceStats {
  int32_t device = 0;
  std::vector<std::pair<int32_t, int64_t>> stats;
};

// Lays out an xdl.proto.DeviceTrace of `events`, grouped by device then line
// and sorted by start (stable: events of one start keep their order), with a
// name table holding only the names they use. Plan reads each event once: it
// encodes it into a buffer of the writer's own (kept from one collect to the
// next), assigning trace-local name indices in order of first use; Write then
// puts the header, the name table and the device and line headers around the
// lines' encoded events, at the trace's exact size, wherever the caller wants
// (the C ABI's buffer). Events are never moved: lines hold indices, and a line
// already in order (one stream's records arrive in order) is not sorted.
// Threading: one thread at a time; `names` must outlive Write (`events` need
// only outlive Plan).
class DeviceTraceWriter {
 public:
  // Returns the serialized size. `devices`: the stats of the devices that have
  // events here (others are not written).
  size_t Plan(const std::string& tracer, const NameSnapshot& names,
              const std::vector<DeviceEventData>& events, int64_t dropped,
              const std::string& status, int64_t dropped_buffers = 0,
              const std::vector<DeviceStats>& devices = {});
  size_t Plan(const std::string& tracer, const NameSnapshot& names, const EventBlocks& events,
              int64_t dropped, const std::string& status, int64_t dropped_buffers = 0,
              const std::vector<DeviceStats>& devices = {});
  size_t size() const { return size_; }
  // Writes exactly size() bytes at `out`.
  void Write(char* out) const;
  // Forgets the plan (keeps its storage for the next one).
  void Clear();

 private:
  struct Line {
    int32_t device;
    int64_t id;
    // (start_ns, index into the planned events), in start order.
    std::vector<std::pair<int64_t, uint32_t>> events;
    size_t payload = 0;         // Bytes of the Line message.
    size_t begin = 0, end = 0;  // Its encoded events in encoded_.
    std::string name;           // Read once at Plan (a thread's name may change or go).
  };
  // Plan for either kind of event sequence (indexable, size()).
  template <typename Events>
  size_t PlanEvents(const std::string& tracer, const NameSnapshot& names, const Events& events,
                    int64_t dropped, const std::string& status, int64_t dropped_buffers,
                    const std::vector<DeviceStats>& devices);
  // The Device.stat fields of `device`'s entry in `devices` (names mapped), "" when none.
  std::string EncodeDeviceStats(int32_t device, const std::vector<DeviceStats>& devices);
  // The trace-local index of NameTable entry `global` (assigned on first use).
  int32_t Map(int32_t global);
  // Appends the Line.event field of `e` to encoded_ (names mapped in field order).
  void Encode(const DeviceEventData& e);
  // Room for `bytes` more at the end of encoded_ (grown by doubling, never zero-filled).
  char* Room(size_t bytes);

  std::string tracer_;
  std::string status_;
  int64_t dropped_ = 0;
  int64_t dropped_buffers_ = 0;
  const NameSnapshot* names_ = nullptr;
  std::vector<Line> lines_;  // In (device, line) order once planned.
  std::vector<std::pair<int32_t, std::string>> device_stats_;  // Encoded, per device planned.
  std::vector<int32_t> local_;       // NameTable index -> trace index (-1: unused).
  std::vector<int32_t> used_;        // Trace index -> NameTable index.
  std::unique_ptr<char[]> encoded_;  // The lines' Line.event fields, line after line.
  size_t encoded_size_ = 0;
  size_t encoded_capacity_ = 0;
  size_t size_ = 0;
};

// Serialized xdl.proto.DeviceTrace of `events` (DeviceTraceWriter's layout).
std::string SerializeDeviceTrace(const std::string& tracer, const NameSnapshot& names,
                                 const std::vector<DeviceEventData>& events, int64_t dropped,
                                 const std::string& status, int64_t dropped_buffers = 0);
inline std::string SerializeDeviceTrace(const std::string& tracer, const NameTable& names,
                                        const std::vector<DeviceEventData>& events, int64_t dropped,
                                        const std::string& status, int64_t dropped_buffers = 0) {
  return SerializeDeviceTrace(tracer, NameSnapshot(names), events, dropped, status,
                              dropped_buffers);
}

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_DEVICE_TRACE_SERIALIZER_H_
