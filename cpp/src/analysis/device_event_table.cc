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
  // The stats read, by their index in this payload's name table: "bytes" (a copy's, a memset's,
  // an allocation's size) and a kernel's launch configuration.
  int32_t bytes_name = -1, grid_name = -1, block_name = -1, registers_name = -1, shared_name = -1,
          active_name = -1;
  for (int i = 0; i < trace.name_size(); ++i) {
    const std::string& n = trace.name(i);
    int32_t* slot = n == "bytes"                  ? &bytes_name
                    : n == "grid"                 ? &grid_name
                    : n == "block"                ? &block_name
                    : n == "registers_per_thread" ? &registers_name
                    : n == "shared_memory_bytes"  ? &shared_name
                    : n == "active_blocks_per_sm" ? &active_name
                                                  : nullptr;
    if (slot != nullptr) *slot = i;
  }
  // A stat's integer value (int64 or uint64), or `missing`.
  auto int_value = [](const xdl::proto::DeviceStat& stat, int64_t missing) {
    if (stat.value_case() == xdl::proto::DeviceStat::kInt64Value) return stat.int64_value();
    if (stat.value_case() == xdl::proto::DeviceStat::kUint64Value) {
      return static_cast<int64_t>(stat.uint64_value());
    }
    return missing;
  };
  for (const xdl::proto::Device& device : trace.device()) {
    if (device.stat_size() > 0) {
      DeviceStats stats{rank, device.id(), {}};
      for (const xdl::proto::DeviceStat& stat : device.stat()) {
        const int32_t at = stat.name_index();
        if (at < 0 || at >= static_cast<int32_t>(ids.size())) continue;
        stats.stats.emplace_back(ids[at], int_value(stat, 0));
      }
      auto known = std::find_if(devices_.begin(), devices_.end(), [&](const DeviceStats& d) {
        return d.rank == rank && d.device == device.id();
      });
      if (known != devices_.end()) {
        *known = std::move(stats);
      } else {
        devices_.push_back(std::move(stats));
      }
    }
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
        int32_t grid = 0, block = 0;
        int64_t registers = -1, shared = -1, active = -1;
        for (const xdl::proto::DeviceStat& stat : event.stat()) {
          const int32_t at = stat.name_index();
          if (at == bytes_name) bytes = int_value(stat, bytes);
          if (at == registers_name) registers = int_value(stat, registers);
          if (at == shared_name) shared = int_value(stat, shared);
          if (at == active_name) active = int_value(stat, active);
          if ((at == grid_name || at == block_name) &&
              stat.value_case() == xdl::proto::DeviceStat::kStrValue) {
            (at == grid_name ? grid : block) = Intern(stat.str_value());
          }
        }
        bytes_.push_back(bytes);
        if (event.kind() == xdl::proto::DEVICE_EVENT_KERNEL &&
            (grid != 0 || block != 0 || registers >= 0 || shared >= 0)) {
          launches_.row.push_back(static_cast<int64_t>(kind_.size()) - 1);
          launches_.grid.push_back(grid);
          launches_.block.push_back(block);
          launches_.registers.push_back(registers);
          launches_.shared_memory.push_back(shared);
          launches_.active_blocks.push_back(active);
        }
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
