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
    if (tracer.events_dropped != 0 || tracer.buffers_dropped != 0) {
      absl::StrAppend(&out, " (dropped ", tracer.events_dropped, " events");
      if (tracer.buffers_dropped != 0) {
        absl::StrAppend(&out, ", ", tracer.buffers_dropped,
                        tracer.buffers_dropped == 1 ? " buffer" : " buffers", " of unknown events");
      }
      absl::StrAppend(&out, ")");
    }
  }
  return out;
}

}  // namespace xdl_trace
