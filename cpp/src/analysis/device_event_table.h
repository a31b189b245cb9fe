// The device events of a run as columns for the report's GPU section: every DeviceTrace payload
// (a Record field 5) parsed once, its names interned into one table, one row per event.
#ifndef XDL_TRACE_ANALYSIS_DEVICE_EVENT_TABLE_H_
#define XDL_TRACE_ANALYSIS_DEVICE_EVENT_TABLE_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace xdl_trace {
namespace internal {

// Columns of events, appended payload by payload. Not thread-safe: one owner (the report's scan
// of a run, on the thread that calls Append).
class DeviceEventTable {
 public:
  // Parses one serialized xdl.proto.DeviceTrace written by `rank` and appends its events.
  // Names (any string field) that are not UTF-8 are read with U+FFFD for their bad bytes and
  // counted (replaced_strings()), not refused. InvalidArgument when the payload does not parse
  // otherwise (nothing is appended then).
  absl::Status Append(absl::string_view payload, int64_t rank);
  // Parses one serialized xdl.proto.HostSpan (a Record field 6) written by `rank` and appends it
  // to the range columns when it is a RANGE (other kinds are skipped); its name and category
  // are interned with the event names. InvalidArgument when it does not parse.
  absl::Status AppendRange(absl::string_view payload, int64_t rank);

  size_t size() const { return kind_.size(); }
  // Interned event names, in order of first appearance; name_ indexes them.
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<int32_t>& kind() const { return kind_; }  // DeviceEventKind
  const std::vector<int32_t>& name() const { return name_; }
  const std::vector<int64_t>& rank() const { return rank_; }
  const std::vector<int32_t>& device() const { return device_; }  // -1: host API threads.
  const std::vector<int64_t>& line() const { return line_; }      // Stream or thread id.
  const std::vector<int64_t>& start_ns() const { return start_ns_; }
  const std::vector<int64_t>& end_ns() const { return end_ns_; }
  const std::vector<uint64_t>& correlation_id() const { return correlation_id_; }
  const std::vector<uint64_t>& external_id() const { return external_id_; }
  // The event's "bytes" stat when it has an int64 one (copies, memsets, allocations), else 0.
  const std::vector<int64_t>& bytes() const { return bytes_; }
  // The named host ranges (HostSpan RANGE: a module's forward or backward, the optimizer
  // step), one row each: name and category index names(); thread: the OS thread that ran it.
  struct Ranges {
    std::vector<int32_t> name, category;
    std::vector<int64_t> rank, thread, start_ns, end_ns;
    int64_t dropped = 0;  // Ranges the writer did not keep (its per-record bound).
  };
  const Ranges& ranges() const { return ranges_; }
  // The launch configuration of each kernel event that carries one (the CUPTI plugin's stats
  // "grid", "block" as "128x1x1" texts, "registers_per_thread", "shared_memory_bytes", static
  // plus dynamic, "active_blocks_per_sm" by the occupancy calculator), one row each: row is the
  // event's row; grid and block index names() (0: "" where the stat is missing), the others -1
  // where missing.
  struct Launches {
    std::vector<int64_t> row;
    std::vector<int32_t> grid, block;
    std::vector<int64_t> registers, shared_memory, active_blocks;
  };
  const Launches& launches() const { return launches_; }
  // A device's own stats (Device.stat: its limits, "sm_count", "max_threads_per_sm", ...), the
  // last payload's for each (rank, device) that had any; names index names().
  struct DeviceStats {
    int64_t rank = 0;
    int32_t device = 0;
    std::vector<std::pair<int32_t, int64_t>> stats;
  };
  const std::vector<DeviceStats>& devices() const { return devices_; }
  int64_t dropped_events() const { return dropped_events_; }
  int64_t dropped_buffers() const { return dropped_buffers_; }
  // String fields that were not UTF-8, over every payload appended (RepairUtf8Strings).
  int64_t replaced_strings() const { return replaced_strings_; }

 private:
  int32_t Intern(const std::string& name);

  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> name_ids_;
  std::vector<int32_t> kind_, name_, device_;
  std::vector<int64_t> rank_, line_, start_ns_, end_ns_, bytes_;
  std::vector<uint64_t> correlation_id_, external_id_;
  Ranges ranges_;
  Launches launches_;
  std::vector<DeviceStats> devices_;
  int64_t dropped_events_ = 0;
  int64_t dropped_buffers_ = 0;
  int64_t replaced_strings_ = 0;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_DEVICE_EVENT_TABLE_H_
