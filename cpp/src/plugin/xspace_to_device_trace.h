// Converts a TensorFlow XSpace (what a TensorFlow profiler plugin collects) into our DeviceTrace.
#ifndef XDL_TRACE_PLUGIN_XSPACE_TO_DEVICE_TRACE_H_
#define XDL_TRACE_PLUGIN_XSPACE_TO_DEVICE_TRACE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "device_trace.pb.h"
#include "xplane.pb.h"

namespace xdl_trace {
namespace internal {

// The host step (its correlation id) running at `time_ns`, or 0 for none.
using StepAtFn = std::function<uint64_t(int64_t time_ns)>;

// What ConvertXSpace left out: aggregated events (num_occurrences, no time)
// and stats whose value is raw bytes.
struct XSpaceConversionCounts {
  int64_t events = 0;
  int64_t aggregated_events_skipped = 0;
  int64_t bytes_stats_skipped = 0;
};

// Appends the events of `space` to `trace` (whose name table must hold ""
// at index 0; tracer and drop counts are the caller's), following the table
// in docs/device-tracing.md ("TensorFlow pluggable-profiler plugins"):
//  - a plane is a Device: "/device:<TYPE>:<N>" has id N, a "/host:..." plane is
//    the host pseudo device -1 (its events are RUNTIME_API), any other keeps its id;
//  - a line is a DeviceLine (id, display_name or name); an event starts at
//    line.timestamp_ns + offset_ps / 1000 and lasts duration_ps / 1000 ns;
//  - the kind comes from the event's name and stats (Memcpy*, Memset*,
//    MemoryAlloc/MemoryFree, *_details stats), a device plane's other events are kernels;
//  - stats (the event's, then its metadata's) keep their names and values; a
//    "correlation_id" stat becomes DeviceEvent.correlation_id; TensorFlow's
//    kernel_details / memcpy_details / memset_details / memalloc_details strings
//    are also unpacked into our names (grid, block, registers_per_thread,
//    shared_memory_bytes, bytes, src_memory, dst_memory, operation);
//  - external_id (the host step): a device event whose correlation_id matches a
//    host-plane event takes that event's step, any other event the step running
//    at its start, by `step_at` (may be empty: no steps).
// XSpace.errors, when present, are joined into trace->status.
XSpaceConversionCounts ConvertXSpace(const xdl::xplane::XSpace& space, const StepAtFn& step_at,
                                     xdl::proto::DeviceTrace* trace);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGIN_XSPACE_TO_DEVICE_TRACE_H_
