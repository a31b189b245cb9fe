// Counters a tracer exposes; read at any time from any thread.
#ifndef XDL_TRACE_STATS_H_
#define XDL_TRACE_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "xdl_trace/config.h"

namespace xdl_trace {

// How one configured device tracer is doing (docs/device-tracing.md).
enum class DeviceTracerState {
  kOk,           // Running (or stopped after running) without trouble.
  kUnavailable,  // No device, driver or library: started as a no-op.
  kFailed,       // Failed to start (left out for the run) or reported an error.
};

struct DeviceTracerStatus {
  std::string tracer;  // Profiler type ("cupti", "fake"), or the configured entry.
  DeviceTracerState state = DeviceTracerState::kOk;
  std::string message;  // Why, for kUnavailable and kFailed; "" for kOk.
  // Events this tracer lost (its own caps, and the core's pending cap).
  int64_t events_dropped = 0;
  // Activity buffers it lost whole, their events unknown (DeviceTrace.dropped_buffers).
  int64_t buffers_dropped = 0;
};

// "ok", "unavailable" or "error".
const char* DeviceTracerStateName(DeviceTracerState state);
// "cupti: unavailable: no GPU (...); fake: ok": "tracer: state[: message]" per
// tracer, joined by "; "; "" for none. Drops follow as " (dropped 12 events,
// 1 buffer of unknown events)" when there were any.
std::string RenderDeviceTracerStatus(const std::vector<DeviceTracerStatus>& tracers);

struct TraceStats {
  int64_t steps_traced = 0;     // Step() calls that produced a record.
  int64_t records_written = 0;  // Records on disk (IO thread).
  int64_t bytes_written = 0;    // Data-file bytes, headers included.
  int64_t records_dropped = 0;  // Overflow under kDrop, or after a write error.
  int64_t files_written = 0;    // Data files opened by this tracer.
  int64_t pending_bytes = 0;    // Queued, not yet written.
  int64_t queue_high_water_bytes = 0;
  // Gradients missing at a traced step: empty columns under kEmptyColumn,
  // failed steps under kError (one per failed step).
  int64_t missing_gradients = 0;
  absl::Status last_error;  // Sticky write error, OK if none.
  // Records with deferred (device) columns whose copies failed: not written,
  // also counted in records_dropped; the latest such error, OK if none.
  int64_t deferred_failed = 0;
  absl::Status last_deferred_error;
  // Who writes the records: kIoThread or kInline (TraceConfig::write_mode
  // resolved; never kAuto).
  WriteMode write_mode = WriteMode::kIoThread;
  // Device tracing (config.device_tracers; docs/device-tracing.md).
  int64_t device_events = 0;                       // Device events collected into records.
  int64_t device_events_dropped = 0;               // Lost at a tracer's or the core's byte cap.
  int64_t device_buffers_dropped = 0;              // Activity buffers lost whole (events unknown).
  std::vector<DeviceTracerStatus> device_tracers;  // One per configured tracer.
  std::string device_tracer_status;                // RenderDeviceTracerStatus(device_tracers).
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_STATS_H_
