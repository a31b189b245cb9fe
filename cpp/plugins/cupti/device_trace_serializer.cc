// Serializes device events into an xdl.proto.DeviceTrace by hand (no protobuf runtime).
#include "device_trace_serializer.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "core/wire.h"

namespace xdl_trace {
namespace cupti {
namespace {

namespace fields = internal::device_trace_fields;
using internal::LengthDelimitedFieldSize;
using internal::Tag;
using internal::TagSize;
using internal::VarintFieldSize;
using internal::VarintSize;
using internal::WriteVarint;

// Writers at a pointer with room (DeviceTraceWriter::Plan sized it).
char* PutLength(uint32_t field, size_t bytes, char* p) {
  p = WriteVarint(Tag(field, internal::kWireLengthDelimited), p);
  return WriteVarint(bytes, p);
}
char* PutBytes(uint32_t field, std::string_view bytes, char* p) {
  p = PutLength(field, bytes.size(), p);
  std::memcpy(p, bytes.data(), bytes.size());
  return p + bytes.size();
}
// A proto3 scalar: nothing when 0.
char* PutVarintField(uint32_t field, uint64_t value, char* p) {
  if (value == 0) return p;
  p = WriteVarint(Tag(field, internal::kWireVarint), p);
  return WriteVarint(value, p);
}

using StartKey = std::pair<int64_t, uint32_t>;  // (start_ns, event index).

// Insertion sort by start: linear on a stream's nearly ordered records (a copy
// or memset a few places early). False past `budget` moves (`keys` is still a
// permutation then).
bool InsertionSortByStart(std::vector<StartKey>& keys, size_t budget) {
  size_t moves = 0;
  for (size_t i = 1; i < keys.size(); ++i) {
    const StartKey x = keys[i];
    size_t j = i;
    for (; j > 0 && keys[j - 1].first > x.first; --j) {
      keys[j] = keys[j - 1];
      if (++moves > budget) {
        keys[j - 1] = x;
        return false;
      }
    }
    keys[j] = x;
  }
  return true;
}

// Stable sort of `order` (indices into `events`) by start, on a copy of the
// keys beside the indices (the events themselves are 128 bytes apart): an
// insertion sort, else a sort of (start, index) pairs, which keeps equal
// starts in their order too.
void SortByStart(const std::vector<DeviceEventData>& events, std::vector<uint32_t>* order,
                 std::vector<StartKey>* keys) {
  keys->clear();
  for (uint32_t i : *order) keys->emplace_back(events[i].start_ns, i);
  if (!InsertionSortByStart(*keys, 8 * keys->size() + 64)) std::sort(keys->begin(), keys->end());
  for (size_t i = 0; i < keys->size(); ++i) (*order)[i] = (*keys)[i].second;
}

std::string DeviceName(int32_t device) {
  return device == kHostApiDevice ? std::string("CUDA API (host threads)")
                                  : "GPU " + std::to_string(device);
}

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

int32_t DeviceTraceWriter::Map(int32_t global) {
  int32_t& slot = local_[static_cast<size_t>(global)];
  if (slot < 0) {
    slot = static_cast<int32_t>(used_.size());
    used_.push_back(global);
  }
  return slot;
}

// Traverses fields in the order Write writes them, so trace-local name
// indices are assigned in order of first use.
size_t DeviceTraceWriter::EventPayload(const DeviceEventData& e) {
  size_t n = VarintFieldSize(fields::kEventNameIndex, static_cast<uint64_t>(Map(e.name))) +
             VarintFieldSize(fields::kEventKind, static_cast<uint64_t>(e.kind)) +
             VarintFieldSize(fields::kEventStartNs, static_cast<uint64_t>(e.start_ns)) +
             VarintFieldSize(fields::kEventEndNs, static_cast<uint64_t>(e.end_ns)) +
             VarintFieldSize(fields::kEventCorrelationId, e.correlation_id) +
             VarintFieldSize(fields::kEventExternalId, e.external_id);
  for (uint8_t k = 0; k < e.stat_count; ++k) {
    const EventStat s = e.stat(k);
    size_t stat = VarintFieldSize(fields::kStatNameIndex, static_cast<uint64_t>(Map(s.name)));
    if (s.type == EventStat::Type::kText) {
      stat += LengthDelimitedFieldSize(fields::kStatStrValue,
                                       names_->name(static_cast<int32_t>(s.value)).size());
    } else {
      const int64_t v =
          s.type == EventStat::Type::kNameIndex ? Map(static_cast<int32_t>(s.value)) : s.value;
      // int64_value, a oneof member: written even when 0.
      stat += TagSize(fields::kStatInt64Value) + VarintSize(static_cast<uint64_t>(v));
    }
    n += LengthDelimitedFieldSize(fields::kEventStat, stat);
  }
  return n;
}

size_t DeviceTraceWriter::Plan(const std::string& tracer, const NameSnapshot& names,
                               const std::vector<DeviceEventData>& events, int64_t dropped,
                               const std::string& status, int64_t dropped_buffers) {
  Clear();
  tracer_ = tracer;
  status_ = status;
  dropped_ = dropped;
  dropped_buffers_ = dropped_buffers;
  names_ = &names;
  events_ = &events;
  // Group by (device, line) in arrival order: few lines, the last one hit first.
  size_t last = 0;
  for (uint32_t i = 0; i < events.size(); ++i) {
    const DeviceEventData& e = events[i];
    if (lines_.empty() || lines_[last].device != e.device || lines_[last].id != e.line) {
      last = 0;
      while (last < lines_.size() &&
             (lines_[last].device != e.device || lines_[last].id != e.line)) {
        ++last;
      }
      if (last == lines_.size()) lines_.push_back({e.device, e.line, {}, 0});
    }
    lines_[last].events.push_back(i);
  }
  std::sort(lines_.begin(), lines_.end(), [](const Line& a, const Line& b) {
    return std::tie(a.device, a.id) < std::tie(b.device, b.id);
  });
  for (Line& line : lines_) SortByStart(events, &line.events, &sort_keys_);
  // Sizes, inside out; trace-local names in order of first use.
  local_.assign(names.size(), -1);
  local_[0] = 0;
  used_.push_back(0);
  event_bytes_.resize(events.size());
  size_t devices = 0;
  for (size_t l = 0; l < lines_.size();) {
    const int32_t device = lines_[l].device;
    size_t device_payload =
        VarintFieldSize(fields::kDeviceId, static_cast<uint64_t>(static_cast<int64_t>(device))) +
        LengthDelimitedFieldSize(fields::kDeviceName, DeviceName(device).size());
    for (; l < lines_.size() && lines_[l].device == device; ++l) {
      Line& line = lines_[l];
      line.payload = VarintFieldSize(fields::kLineId, static_cast<uint64_t>(line.id)) +
                     LengthDelimitedFieldSize(fields::kLineName, LineName(device, line.id).size());
      for (uint32_t i : line.events) {
        const size_t bytes = EventPayload(events[i]);
        event_bytes_[i] = static_cast<uint32_t>(bytes);
        line.payload += LengthDelimitedFieldSize(fields::kLineEvent, bytes);
      }
      device_payload += LengthDelimitedFieldSize(fields::kDeviceLine, line.payload);
    }
    devices += LengthDelimitedFieldSize(fields::kTraceDevice, device_payload);
  }
  size_ = LengthDelimitedFieldSize(fields::kTraceTracer, tracer_.size()) + devices +
          VarintFieldSize(fields::kTraceDroppedEvents, static_cast<uint64_t>(dropped_)) +
          (status_.empty() ? 0 : LengthDelimitedFieldSize(fields::kTraceStatus, status_.size())) +
          VarintFieldSize(fields::kTraceDroppedBuffers, static_cast<uint64_t>(dropped_buffers_));
  for (int32_t global : used_) {
    size_ += LengthDelimitedFieldSize(fields::kTraceName, names.name(global).size());
  }
  return size_;
}

void DeviceTraceWriter::Write(char* out) const {
  const std::vector<DeviceEventData>& events = *events_;
  const NameSnapshot& names = *names_;
  char* p = out;
  p = PutBytes(fields::kTraceTracer, tracer_, p);
  for (int32_t global : used_) p = PutBytes(fields::kTraceName, names.name(global), p);
  auto local = [&](int32_t global) {
    return static_cast<uint64_t>(local_[static_cast<size_t>(global)]);
  };
  for (size_t l = 0; l < lines_.size();) {
    const int32_t device = lines_[l].device;
    const std::string device_name = DeviceName(device);
    size_t device_payload =
        VarintFieldSize(fields::kDeviceId, static_cast<uint64_t>(static_cast<int64_t>(device))) +
        LengthDelimitedFieldSize(fields::kDeviceName, device_name.size());
    size_t end = l;
    for (; end < lines_.size() && lines_[end].device == device; ++end) {
      device_payload += LengthDelimitedFieldSize(fields::kDeviceLine, lines_[end].payload);
    }
    p = PutLength(fields::kTraceDevice, device_payload, p);
    p = PutVarintField(fields::kDeviceId, static_cast<uint64_t>(static_cast<int64_t>(device)), p);
    p = PutBytes(fields::kDeviceName, device_name, p);
    for (; l < end; ++l) {
      const Line& line = lines_[l];
      p = PutLength(fields::kDeviceLine, line.payload, p);
      p = PutVarintField(fields::kLineId, static_cast<uint64_t>(line.id), p);
      p = PutBytes(fields::kLineName, LineName(device, line.id), p);
      for (uint32_t i : line.events) {
        const DeviceEventData& e = events[i];
        p = PutLength(fields::kLineEvent, event_bytes_[i], p);
        p = PutVarintField(fields::kEventNameIndex, local(e.name), p);
        p = PutVarintField(fields::kEventKind, static_cast<uint64_t>(e.kind), p);
        p = PutVarintField(fields::kEventStartNs, static_cast<uint64_t>(e.start_ns), p);
        p = PutVarintField(fields::kEventEndNs, static_cast<uint64_t>(e.end_ns), p);
        p = PutVarintField(fields::kEventCorrelationId, e.correlation_id, p);
        p = PutVarintField(fields::kEventExternalId, e.external_id, p);
        for (uint8_t k = 0; k < e.stat_count; ++k) {
          const EventStat s = e.stat(k);
          const uint64_t name = local(s.name);
          if (s.type == EventStat::Type::kText) {
            const std::string& text = names.name(static_cast<int32_t>(s.value));
            p = PutLength(fields::kEventStat,
                          VarintFieldSize(fields::kStatNameIndex, name) +
                              LengthDelimitedFieldSize(fields::kStatStrValue, text.size()),
                          p);
            p = PutVarintField(fields::kStatNameIndex, name, p);
            p = PutBytes(fields::kStatStrValue, text, p);
          } else {
            const uint64_t v = s.type == EventStat::Type::kNameIndex
                                   ? local(static_cast<int32_t>(s.value))
                                   : static_cast<uint64_t>(s.value);
            p = PutLength(fields::kEventStat,
                          VarintFieldSize(fields::kStatNameIndex, name) +
                              TagSize(fields::kStatInt64Value) + VarintSize(v),
                          p);
            p = PutVarintField(fields::kStatNameIndex, name, p);
            p = WriteVarint(Tag(fields::kStatInt64Value, internal::kWireVarint), p);
            p = WriteVarint(v, p);
          }
        }
      }
    }
  }
  p = PutVarintField(fields::kTraceDroppedEvents, static_cast<uint64_t>(dropped_), p);
  if (!status_.empty()) p = PutBytes(fields::kTraceStatus, status_, p);
  p = PutVarintField(fields::kTraceDroppedBuffers, static_cast<uint64_t>(dropped_buffers_), p);
}

void DeviceTraceWriter::Clear() {
  for (Line& line : lines_) line.events.clear();
  lines_.clear();
  used_.clear();
  size_ = 0;
  events_ = nullptr;
  names_ = nullptr;
}

std::string SerializeDeviceTrace(const std::string& tracer, const NameSnapshot& names,
                                 const std::vector<DeviceEventData>& events, int64_t dropped,
                                 const std::string& status, int64_t dropped_buffers) {
  DeviceTraceWriter writer;
  std::string out(writer.Plan(tracer, names, events, dropped, status, dropped_buffers), '\0');
  writer.Write(out.data());
  return out;
}

}  // namespace cupti
}  // namespace xdl_trace
