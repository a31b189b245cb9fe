// DeviceEventTable: DeviceTrace payloads to event columns (see device_event_table.h).
#include "analysis/device_event_table.h"

#include <algorithm>
#include <string>

#include "analysis/utf8_repair.h"
#include "device_trace.pb.h"

namespace xdl_trace {
namespace internal {

int32_t DeviceEventTable::Intern(const std::string& name) {
  auto [it, added] = name_ids_.emplace(name, static_cast<int32_t>(names_.size()));
  if (added) names_.push_back(name);
  return it->second;
}

absl::Status DeviceEventTable::Append(absl::string_view payload, int64_t rank) {
  // A plugin's name that is not UTF-8 would make protobuf refuse the whole payload.
  std::string repaired;
  const int64_t replaced =
      RepairUtf8Strings(*xdl::proto::DeviceTrace::descriptor(), payload, &repaired);
  if (replaced > 0) payload = repaired;
  xdl::proto::DeviceTrace trace;
  if (!trace.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::InvalidArgumentError("a device trace payload does not parse");
  }
  replaced_strings_ += replaced;
  dropped_events_ += trace.dropped_events();
  dropped_buffers_ += trace.dropped_buffers();
  // The payload's name table, mapped once into ours; an index out of range names "".
  std::vector<int32_t> ids;
  ids.reserve(trace.name_size());
  for (const std::string& name : trace.name()) ids.push_back(Intern(name));
  const int32_t empty = Intern("");
  // The "bytes" stat (a copy's, a memset's, an allocation's size): its index in this payload.
  int32_t bytes_name = -1;
  for (int i = 0; i < trace.name_size(); ++i) {
    if (trace.name(i) == "bytes") bytes_name = i;
  }
  for (const xdl::proto::Device& device : trace.device()) {
    for (const xdl::proto::DeviceLine& line : device.line()) {
      for (const xdl::proto::DeviceEvent& event : line.event()) {
        const int32_t index = event.name_index();
        kind_.push_back(static_cast<int32_t>(event.kind()));
        name_.push_back(index >= 0 && index < static_cast<int32_t>(ids.size()) ? ids[index]
                                                                               : empty);
        rank_.push_back(rank);
        device_.push_back(device.id());
        line_.push_back(line.id());
        start_ns_.push_back(event.start_ns());
        end_ns_.push_back(std::max(event.end_ns(), event.start_ns()));
        correlation_id_.push_back(event.correlation_id());
        external_id_.push_back(event.external_id());
        int64_t bytes = 0;
        for (const xdl::proto::DeviceStat& stat : event.stat()) {
          if (stat.name_index() != bytes_name) continue;
          if (stat.value_case() == xdl::proto::DeviceStat::kInt64Value) bytes = stat.int64_value();
          if (stat.value_case() == xdl::proto::DeviceStat::kUint64Value) {
            bytes = static_cast<int64_t>(stat.uint64_value());
          }
        }
        bytes_.push_back(bytes);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceEventTable::AppendRange(absl::string_view payload, int64_t rank) {
  std::string repaired;
  const int64_t replaced =
      RepairUtf8Strings(*xdl::proto::HostSpan::descriptor(), payload, &repaired);
  if (replaced > 0) payload = repaired;
  xdl::proto::HostSpan span;
  if (!span.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::InvalidArgumentError("a host span payload does not parse");
  }
  if (span.kind() != xdl::proto::HostSpan::RANGE) return absl::OkStatus();
  replaced_strings_ += replaced;
  ranges_.name.push_back(Intern(span.name()));
  ranges_.category.push_back(Intern(span.category()));
  ranges_.rank.push_back(rank);
  ranges_.thread.push_back(span.thread_id());
  ranges_.start_ns.push_back(span.start_ns());
  ranges_.end_ns.push_back(std::max(span.end_ns(), span.start_ns()));
  ranges_.dropped += span.spans_dropped();
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace xdl_trace
