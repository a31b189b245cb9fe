// RecordExtras: the seam through which device tracing adds Record fields >= 5 to each record.
#ifndef XDL_TRACE_RECORD_RECORD_EXTRAS_H_
#define XDL_TRACE_RECORD_RECORD_EXTRAS_H_

#include <cstdint>
#include <string>

#include "core/clock.h"
#include "xdl_trace/stats.h"

namespace xdl_trace {
namespace internal {

// Supplies serialized Record fields numbered >= 5 (device events, host spans)
// for the records of a tracer. Every tracer has one: NoRecordExtras when
// device tracing is off, plugin/device_tracing.h's DeviceTracing when it is on.
// Threading: every method runs on the training thread inside
// Step()/StepAt()/Close(), except FillStats (any thread).
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
// The span times come from SpanClockNs(), which reads the clock only for
// extras constructed with `timed` (so a step without device tracing reads no
// clock for them). At Close(), Finish() returns the fields not yet taken;
// when non-empty the tracer writes them in one last, device-only record (the
// last step's gstep/lstep, no column) before closing the writer.
class RecordExtras {
 public:
  virtual ~RecordExtras() = default;
  virtual void OnStepCalled(int64_t gstep, int64_t lstep) = 0;
  virtual std::string TakeTrailingFields() = 0;
  virtual void OnStepEncoded(int64_t begin_ns, int64_t end_ns) = 0;
  virtual void OnStepReturned(int64_t begin_ns, int64_t end_ns) = 0;
  virtual std::string Finish() = 0;
  virtual void FillStats(TraceStats* stats) const = 0;

  // WallClockNs() when these extras use span times, else 0 (no clock read).
  int64_t SpanClockNs() const { return timed_ ? WallClockNs() : 0; }

 protected:
  explicit RecordExtras(bool timed = true) : timed_(timed) {}

 private:
  const bool timed_;
};

// The extras of a tracer without device tracing: no fields, no clock reads.
class NoRecordExtras final : public RecordExtras {
 public:
  NoRecordExtras() : RecordExtras(/*timed=*/false) {}
  void OnStepCalled(int64_t, int64_t) override {}
  std::string TakeTrailingFields() override { return std::string(); }
  void OnStepEncoded(int64_t, int64_t) override {}
  void OnStepReturned(int64_t, int64_t) override {}
  std::string Finish() override { return std::string(); }
  void FillStats(TraceStats*) const override {}
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_RECORD_EXTRAS_H_
