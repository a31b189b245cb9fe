// Where device tracing plugs into the tracer: builds the RecordExtras for config.device_tracers.
#include <memory>
#include <utility>

#include "plugin/device_tracing.h"
#include "tracer/tracer_internal.h"

namespace xdl_trace {
namespace internal {

absl::StatusOr<std::unique_ptr<RecordExtras>> MakeDeviceRecordExtras(const TraceConfig& config) {
  absl::StatusOr<std::unique_ptr<DeviceTracing>> tracing = DeviceTracing::Start(config);
  if (!tracing.ok()) return tracing.status();
  return std::unique_ptr<RecordExtras>(std::move(*tracing));
}

}  // namespace internal
}  // namespace xdl_trace
