// Internal seams of the Tracer: per-step record extras (device tracing), Start with test hooks.
#ifndef XDL_TRACE_TRACER_TRACER_INTERNAL_H_
#define XDL_TRACE_TRACER_TRACER_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "io/trace_writer.h"
#include "xdl_trace/config.h"
#include "xdl_trace/stats.h"
#include "xdl_trace/tracer.h"

namespace xdl_trace {
namespace internal {

// Supplies serialized Record fields numbered >= 5 (device events, host spans)
// for the records of a tracer. Threading: every method runs on the training
// thread inside Step()/StepAt()/Close(), except FillStats (any thread).
//
// Per Step() the tracer calls, in order:
//   OnStepCalled(gstep, lstep)           before any entry is captured;
//   TakeTrailingFields()                 after capture, before encoding (only
//                                        when every entry captured): appended
//                                        as is after Record field 4;
//   OnStepEncoded(begin_ns, end_ns)      capture + encode span (CLOCK_REALTIME);
//   OnStepReturned(begin_ns, end_ns)     queue wait (Submit) span, then Step()
//                                        returns; also called when the step
//                                        failed, with begin_ns == end_ns.
// At Close(), Finish() returns the fields not yet taken; when non-empty the
// tracer writes them in one last record (the last step's gstep/lstep, every
// column an empty float32 [0]) before closing the writer.
class RecordExtras {
 public:
  virtual ~RecordExtras() = default;
  virtual void OnStepCalled(int64_t gstep, int64_t lstep) = 0;
  virtual std::string TakeTrailingFields() = 0;
  virtual void OnStepEncoded(int64_t begin_ns, int64_t end_ns) = 0;
  virtual void OnStepReturned(int64_t begin_ns, int64_t end_ns) = 0;
  virtual std::string Finish() = 0;
  virtual void FillStats(TraceStats* stats) const = 0;
};

// The extras for config.device_tracers, created by Tracer::Start when that
// list is non-empty (defined in device_record_extras.cc, the one place device
// tracing is wired into the tracer).
absl::StatusOr<std::unique_ptr<RecordExtras>> MakeDeviceRecordExtras(const TraceConfig& config);

struct TracerOptions {
  WriterTestHooks writer_hooks;
  // When set, used instead of MakeDeviceRecordExtras(config).
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

// CLOCK_REALTIME in nanoseconds (the clock host spans use).
int64_t WallClockNs();

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_TRACER_TRACER_INTERNAL_H_
