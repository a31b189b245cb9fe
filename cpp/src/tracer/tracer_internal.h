// Internal seams of the Tracer: where device tracing plugs in, Start with test hooks.
#ifndef XDL_TRACE_TRACER_TRACER_INTERNAL_H_
#define XDL_TRACE_TRACER_TRACER_INTERNAL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "io/trace_writer.h"
#include "record/record_extras.h"
#include "xdl_trace/config.h"
#include "xdl_trace/stats.h"
#include "xdl_trace/tracer.h"

namespace xdl_trace {
namespace internal {

// The extras for config.device_tracers, created by Tracer::Start when that
// list is non-empty (defined in device_record_extras.cc, the one place device
// tracing is wired into the tracer).
absl::StatusOr<std::unique_ptr<RecordExtras>> MakeDeviceRecordExtras(const TraceConfig& config);

struct TracerOptions {
  WriterTestHooks writer_hooks;
  // When set, used instead of MakeDeviceRecordExtras(config) or
  // HostSpanRecorder.
  std::unique_ptr<RecordExtras> extras;
};

// Tracer::Start with internal options (tests, device tracing).
class TracerFactory {
 public:
  static absl::StatusOr<std::unique_ptr<Tracer>> Start(const TraceConfig& config,
                                                       std::shared_ptr<Registry> registry,
                                                       std::vector<std::string> scopes,
                                                       TracerOptions options);
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_TRACER_TRACER_INTERNAL_H_
