// Rendering of the device-tracer states of xdl_trace/stats.h.
#include "xdl_trace/stats.h"

#include "absl/strings/str_cat.h"

namespace xdl_trace {

const char* DeviceTracerStateName(DeviceTracerState state) {
  switch (state) {
    case DeviceTracerState::kOk:
      return "ok";
    case DeviceTracerState::kUnavailable:
      return "unavailable";
    case DeviceTracerState::kFailed:
      return "error";
  }
  return "unknown";
}

std::string RenderDeviceTracerStatus(const std::vector<DeviceTracerStatus>& tracers) {
  std::string out;
  for (const DeviceTracerStatus& tracer : tracers) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", tracer.tracer, ": ",
                    DeviceTracerStateName(tracer.state));
    if (!tracer.message.empty()) absl::StrAppend(&out, ": ", tracer.message);
  }
  return out;
}

}  // namespace xdl_trace
