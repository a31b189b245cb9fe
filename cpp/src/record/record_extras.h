// RecordExtras: the seam through which device tracing adds Record fields >= 5 to each record.
#ifndef XDL_TRACE_RECORD_RECORD_EXTRAS_H_
#define XDL_TRACE_RECORD_RECORD_EXTRAS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "xdl_trace/stats.h"

namespace xdl_trace {
namespace internal {

// Supplies serialized Record fields numbered >= 5 (device events, host spans)
// for the records of a tracer. Every tracer has one: record/host_spans.h's
// HostSpanRecorder (the traced steps' host spans) when device tracing is off,
// plugin/device_tracing.h's DeviceTracing (that recorder extended: the same
// spans with correlation ids, plus device events) when it is on. The tracer itself appends the
// IO-write spans after what TakeTrailingFields (or Finish) returns.
// Threading: every method runs on the training thread, under the tracer's
// step mutex (inside Step()/StepAt()/Close()/NoteStepNotTraced()), except
// FillStats (any thread).
//
// Per Step() the tracer calls, in order:
//   OnStepCalled(gstep, lstep)           before any entry is captured;
//   TakeDeviceTraces()                   after capture, before encoding (only
//                                        when every entry captured): Record
//                                        field 5 payloads, moved into the
//                                        record, never copied;
//   TakeTrailingFields()                 after capture, before encoding (only
//                                        when every entry captured): appended
//                                        as is after Record field 4;
//   OnStepEncoded(begin_ns, end_ns)      capture + encode span (CLOCK_REALTIME);
//   OnStepReturned(begin_ns, end_ns)     queue wait (Submit) span, then Step()
//                                        returns; also called when the step
//                                        failed, with begin_ns == end_ns.
// Between traced steps, OnStepNotTraced(gstep, lstep) tells of each step the
// hook saw but did not trace (Tracer::NoteStepNotTraced): HostSpanRecorder
// notes its STEP_NOT_TRACED span (from the previous step's end) for the next
// record and starts the next STEP span at its end, so no span covers several
// steps. Span times are core/clock.h's WallClockNs(). At Close(),
// Finish(&device_traces) returns the trailing fields not yet taken and moves
// the serialized DeviceTrace parts (Record field 5, first) into
// `device_traces`, as TakeDeviceTraces() does for a step's record (no whole
// collect copied twice); when either is non-empty the tracer writes them in one
// last, device-only record (the last step's gstep/lstep, no column) before
// closing the writer.
class RecordExtras {
 public:
  virtual ~RecordExtras() = default;
  virtual void OnStepCalled(int64_t gstep, int64_t lstep) = 0;
  virtual std::vector<std::string> TakeDeviceTraces() { return {}; }
  virtual std::string TakeTrailingFields() = 0;
  virtual void OnStepEncoded(int64_t begin_ns, int64_t end_ns) = 0;
  virtual void OnStepReturned(int64_t begin_ns, int64_t end_ns) = 0;
  virtual void OnStepNotTraced(int64_t gstep, int64_t lstep) = 0;
  virtual std::string Finish(std::vector<std::string>* device_traces) = 0;
  virtual void FillStats(TraceStats* stats) const = 0;
  // After Finish: threads of its own are still inside code it does not
  // control (a device plugin that never returned), so its owner must never
  // destroy it (leaked for the process's life).
  virtual bool Abandoned() const { return false; }
  // Any thread, also while Finish waits (Ctrl-C during close): Finish stops
  // waiting for threads of its own and abandons them (then Abandoned()).
  virtual void AbandonWaits() {}
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_RECORD_EXTRAS_H_
