// Where device tracing plugs into the tracer: builds the RecordExtras for config.device_tracers.
#include <memory>
#include <utility>

#include "core/status_macros.h"
#include "plugin/device_tracing.h"
#include "tracer/tracer_internal.h"

namespace xdl_trace {
namespace internal {

absl::StatusOr<std::unique_ptr<RecordExtras>> MakeDeviceRecordExtras(const TraceConfig& config) {
  XDL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceTracing> tracing, DeviceTracing::Start(config));
  return std::unique_ptr<RecordExtras>(std::move(tracing));
}

}  // namespace internal
}  // namespace xdl_trace
