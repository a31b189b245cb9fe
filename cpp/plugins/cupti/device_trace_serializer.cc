// Serializes device events into an xdl.proto.DeviceTrace by hand (no protobuf runtime).
#include "device_trace_serializer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>

#include "core/wire.h"
#include "event_blocks.h"

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

// Events fetched ahead of the one being encoded (lines interleave, so the
// hardware prefetcher sees no plain stride).
constexpr size_t kPrefetchAhead = 8;

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

// Stable sort of a line's (start, index) pairs by start (the keys sit beside
// the indices, so sorting never reads the events, which are 128 bytes apart):
// an insertion sort, else a sort of the pairs, which keeps equal starts in
// their order too.
void SortByStart(std::vector<StartKey>* keys) {
  if (!InsertionSortByStart(*keys, 8 * keys->size() + 64)) std::sort(keys->begin(), keys->end());
}

// The name of thread `tid` of this process (/proc/self/task/<tid>/comm), "" when there is none.
std::string ThreadComm(int64_t tid) {
  if (tid <= 0) return "";
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/comm";
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[64] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string name(buf, n);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\0')) name.pop_back();
  return name;
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
  // An OS thread id (CUPTI's SYSTEM thread-id type) of a live thread: named as the OS
  // names it ("python3", autograd's "pt_autograd_0"), which /proc says.
  const std::string comm = ThreadComm(line);
  if (!comm.empty()) return comm + " (tid " + std::to_string(line) + ")";
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

char* DeviceTraceWriter::Room(size_t bytes) {
  if (encoded_size_ + bytes > encoded_capacity_) {
    const size_t capacity = std::max(encoded_size_ + bytes, 2 * encoded_capacity_);
    std::unique_ptr<char[]> grown(new char[capacity]);
    if (encoded_size_ > 0) std::memcpy(grown.get(), encoded_.get(), encoded_size_);
    encoded_ = std::move(grown);
    encoded_capacity_ = capacity;
  }
  return encoded_.get() + encoded_size_;
}

// Maps names in the order the fields are written (name, then each stat's name
// and name-index value), so trace-local indices follow first use.
void DeviceTraceWriter::Encode(const DeviceEventData& e) {
  const uint64_t name = static_cast<uint64_t>(Map(e.name));
  size_t n = VarintFieldSize(fields::kEventNameIndex, name) +
             VarintFieldSize(fields::kEventKind, static_cast<uint64_t>(e.kind)) +
             VarintFieldSize(fields::kEventStartNs, static_cast<uint64_t>(e.start_ns)) +
             VarintFieldSize(fields::kEventEndNs, static_cast<uint64_t>(e.end_ns)) +
             VarintFieldSize(fields::kEventCorrelationId, e.correlation_id) +
             VarintFieldSize(fields::kEventExternalId, e.external_id);
  uint64_t stat_name[kMaxEventStats], stat_value[kMaxEventStats];
  size_t stat_bytes[kMaxEventStats];
  const std::string* stat_text[kMaxEventStats];
  for (uint8_t k = 0; k < e.stat_count; ++k) {
    const EventStat s = e.stat(k);
    stat_name[k] = static_cast<uint64_t>(Map(s.name));
    size_t stat = VarintFieldSize(fields::kStatNameIndex, stat_name[k]);
    if (s.type == EventStat::Type::kText) {
      stat_text[k] = &names_->name(static_cast<int32_t>(s.value));
      stat += LengthDelimitedFieldSize(fields::kStatStrValue, stat_text[k]->size());
    } else {
      stat_text[k] = nullptr;
      stat_value[k] = s.type == EventStat::Type::kNameIndex
                          ? static_cast<uint64_t>(Map(static_cast<int32_t>(s.value)))
                          : static_cast<uint64_t>(s.value);
      // int64_value, a oneof member: written even when 0.
      stat += TagSize(fields::kStatInt64Value) + VarintSize(stat_value[k]);
    }
    stat_bytes[k] = stat;
    n += LengthDelimitedFieldSize(fields::kEventStat, stat);
  }
  char* const begin = Room(LengthDelimitedFieldSize(fields::kLineEvent, n));
  char* p = PutLength(fields::kLineEvent, n, begin);
  p = PutVarintField(fields::kEventNameIndex, name, p);
  p = PutVarintField(fields::kEventKind, static_cast<uint64_t>(e.kind), p);
  p = PutVarintField(fields::kEventStartNs, static_cast<uint64_t>(e.start_ns), p);
  p = PutVarintField(fields::kEventEndNs, static_cast<uint64_t>(e.end_ns), p);
  p = PutVarintField(fields::kEventCorrelationId, e.correlation_id, p);
  p = PutVarintField(fields::kEventExternalId, e.external_id, p);
  for (uint8_t k = 0; k < e.stat_count; ++k) {
    p = PutLength(fields::kEventStat, stat_bytes[k], p);
    p = PutVarintField(fields::kStatNameIndex, stat_name[k], p);
    if (stat_text[k] != nullptr) {
      p = PutBytes(fields::kStatStrValue, *stat_text[k], p);
    } else {
      p = WriteVarint(Tag(fields::kStatInt64Value, internal::kWireVarint), p);
      p = WriteVarint(stat_value[k], p);
    }
  }
  encoded_size_ += static_cast<size_t>(p - begin);
}

std::string DeviceTraceWriter::EncodeDeviceStats(int32_t device,
                                                 const std::vector<DeviceStats>& devices) {
  const auto found = std::find_if(devices.begin(), devices.end(),
                                  [device](const DeviceStats& d) { return d.device == device; });
  if (found == devices.end()) return {};
  struct Mapped {
    uint64_t name, value;  // The trace's name index, the value.
    size_t size;           // Of the DeviceStat message.
  };
  std::vector<Mapped> mapped;
  size_t total = 0;
  for (const auto& [global, stat_value] : found->stats) {
    const auto name = static_cast<uint64_t>(Map(global));
    const auto value = static_cast<uint64_t>(stat_value);
    const size_t size = VarintFieldSize(fields::kStatNameIndex, name) +
                        TagSize(fields::kStatInt64Value) + VarintSize(value);
    mapped.push_back({name, value, size});
    total += LengthDelimitedFieldSize(fields::kDeviceStat, size);
  }
  std::string out(total, '\0');
  char* p = out.data();
  for (const auto& [name, value, size] : mapped) {
    p = PutLength(fields::kDeviceStat, size, p);
    p = PutVarintField(fields::kStatNameIndex, name, p);
    p = WriteVarint(Tag(fields::kStatInt64Value, internal::kWireVarint), p);  // Even when 0.
    p = WriteVarint(value, p);
  }
  return out;
}

template <typename Events>
size_t DeviceTraceWriter::PlanEvents(const std::string& tracer, const NameSnapshot& names,
                                     const Events& events, int64_t dropped,
                                     const std::string& status, int64_t dropped_buffers,
                                     const std::vector<DeviceStats>& known) {
  Clear();
  tracer_ = tracer;
  status_ = status;
  dropped_ = dropped;
  dropped_buffers_ = dropped_buffers;
  names_ = &names;
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
      if (last == lines_.size()) {
        Line& line = lines_.emplace_back();
        line.device = e.device;
        line.id = e.line;
      }
    }
    lines_[last].events.emplace_back(e.start_ns, i);
  }
  std::sort(lines_.begin(), lines_.end(), [](const Line& a, const Line& b) {
    return std::tie(a.device, a.id) < std::tie(b.device, b.id);
  });
  for (Line& line : lines_) SortByStart(&line.events);
  // Each event encoded once, in writing order; trace-local names in order of first use.
  local_.assign(names.size(), -1);
  local_[0] = 0;
  used_.push_back(0);
  size_t devices = 0;
  for (size_t l = 0; l < lines_.size();) {
    const int32_t device = lines_[l].device;
    size_t device_payload =
        VarintFieldSize(fields::kDeviceId, static_cast<uint64_t>(static_cast<int64_t>(device))) +
        LengthDelimitedFieldSize(fields::kDeviceName, DeviceName(device).size());
    for (; l < lines_.size() && lines_[l].device == device; ++l) {
      Line& line = lines_[l];
      line.begin = encoded_size_;
      const size_t count = line.events.size();
      for (size_t j = 0; j < count; ++j) {
        // The next events of a line are a few events apart: fetch ahead.
        if (j + kPrefetchAhead < count)
          __builtin_prefetch(&events[line.events[j + kPrefetchAhead].second]);
        Encode(events[line.events[j].second]);
      }
      line.end = encoded_size_;
      line.name = LineName(device, line.id);
      line.payload = VarintFieldSize(fields::kLineId, static_cast<uint64_t>(line.id)) +
                     LengthDelimitedFieldSize(fields::kLineName, line.name.size()) +
                     (line.end - line.begin);
      device_payload += LengthDelimitedFieldSize(fields::kDeviceLine, line.payload);
    }
    device_stats_.emplace_back(device, EncodeDeviceStats(device, known));
    device_payload += device_stats_.back().second.size();
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

size_t DeviceTraceWriter::Plan(const std::string& tracer, const NameSnapshot& names,
                               const std::vector<DeviceEventData>& events, int64_t dropped,
                               const std::string& status, int64_t dropped_buffers,
                               const std::vector<DeviceStats>& devices) {
  return PlanEvents(tracer, names, events, dropped, status, dropped_buffers, devices);
}

size_t DeviceTraceWriter::Plan(const std::string& tracer, const NameSnapshot& names,
                               const EventBlocks& events, int64_t dropped,
                               const std::string& status, int64_t dropped_buffers,
                               const std::vector<DeviceStats>& devices) {
  return PlanEvents(tracer, names, events, dropped, status, dropped_buffers, devices);
}

void DeviceTraceWriter::Write(char* out) const {
  const NameSnapshot& names = *names_;
  char* p = out;
  p = PutBytes(fields::kTraceTracer, tracer_, p);
  for (int32_t global : used_) p = PutBytes(fields::kTraceName, names.name(global), p);
  size_t planned = 0;  // Index into device_stats_: devices in writing order.
  for (size_t l = 0; l < lines_.size();) {
    const int32_t device = lines_[l].device;
    const std::string device_name = DeviceName(device);
    const std::string& stats = device_stats_[planned++].second;
    size_t device_payload =
        VarintFieldSize(fields::kDeviceId, static_cast<uint64_t>(static_cast<int64_t>(device))) +
        LengthDelimitedFieldSize(fields::kDeviceName, device_name.size()) + stats.size();
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
      p = PutBytes(fields::kLineName, line.name, p);
      std::memcpy(p, encoded_.get() + line.begin, line.end - line.begin);
      p += line.end - line.begin;
    }
    std::memcpy(p, stats.data(), stats.size());
    p += stats.size();
  }
  p = PutVarintField(fields::kTraceDroppedEvents, static_cast<uint64_t>(dropped_), p);
  if (!status_.empty()) p = PutBytes(fields::kTraceStatus, status_, p);
  p = PutVarintField(fields::kTraceDroppedBuffers, static_cast<uint64_t>(dropped_buffers_), p);
}

void DeviceTraceWriter::Clear() {
  for (Line& line : lines_) line.events.clear();
  lines_.clear();
  device_stats_.clear();
  used_.clear();
  encoded_size_ = 0;
  size_ = 0;
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
