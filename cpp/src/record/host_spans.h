// Host spans (Record field 6) every tracer writes: their plain form, their one encoder and the
// recorder of the step spans that device tracing extends.
#ifndef XDL_TRACE_RECORD_HOST_SPANS_H_
#define XDL_TRACE_RECORD_HOST_SPANS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "device_trace.pb.h"
#include "record/record_extras.h"

namespace xdl_trace {
namespace internal {

// xdl.proto.HostSpan.Kind, by the generated values (the .proto is their one source).
enum class HostSpanKind : int {
  kStep = xdl::proto::HostSpan::STEP,
  kCaptureEncode = xdl::proto::HostSpan::CAPTURE_ENCODE,
  kQueueWait = xdl::proto::HostSpan::QUEUE_WAIT,
  kDeviceCollect = xdl::proto::HostSpan::DEVICE_COLLECT,
  kStepNotTraced = xdl::proto::HostSpan::STEP_NOT_TRACED,
  kIoWrite = xdl::proto::HostSpan::IO_WRITE,
  kRange = xdl::proto::HostSpan::RANGE,
};

// One xdl.proto.HostSpan (proto/device_trace.proto), kept as a plain struct
// until its record is encoded.
struct HostSpanInfo {
  HostSpanKind kind = HostSpanKind::kStep;
  int64_t start_ns = 0;  // CLOCK_REALTIME (core/clock.h WallClockNs).
  int64_t end_ns = 0;
  int64_t gstep = 0;
  int64_t lstep = 0;
  uint64_t correlation_id = 0;
  int64_t thread_id = 0;
  int64_t spans_dropped = 0;  // Spans of this kind not kept since the previous record.
  int64_t records = 0;        // kIoWrite: records in the write.
  // kRange: its name and category, interned for the process (record/host_ranges.h).
  const std::string* name = nullptr;
  const std::string* category = nullptr;
};

// Appends each span as a Record field 6 (length-delimited HostSpan), exactly
// as protobuf serializes it (proto3: zero fields left out).
void AppendHostSpanFields(absl::Span<const HostSpanInfo> spans, std::string* out);

// Spans waiting for the next record, at most `capacity` of them: the rest are
// counted, and the count rides on the last span kept (spans_dropped). Not
// synchronized: one owner, or a lock around it (io/io_loop.h).
class BoundedSpanLog {
 public:
  explicit BoundedSpanLog(size_t capacity) : capacity_(capacity) { spans_.reserve(capacity); }

  void Add(const HostSpanInfo& span) {
    if (spans_.size() < capacity_) {
      spans_.push_back(span);
    } else {
      ++dropped_;
    }
  }
  // Appends what is pending to `out` (the dropped count on its last span; a
  // count with nothing kept is lost) and starts over.
  void TakeInto(std::vector<HostSpanInfo>* out);
  bool empty() const { return spans_.empty(); }

 private:
  const size_t capacity_;
  std::vector<HostSpanInfo> spans_;
  int64_t dropped_ = 0;
};

// The host spans of a tracer's steps and the step-span state machine, the one
// place both live: the RecordExtras of a tracer without device tracing, and
// the base of plugin/device_tracing.h's DeviceTracing, which adds device
// events and collect spans around it.
//
// STEP runs from the previous step's end (Step() returned, a step the hook
// did not trace ended, or construction) to this Step() call; CAPTURE_ENCODE
// and QUEUE_WAIT are a Step()'s own work and ride in the next record.
// STEP_NOT_TRACED runs from the previous step's end to OnStepNotTraced, with
// that step's gstep/lstep; at most kMaxNotTracedSpans wait for a
// record, the rest counted (spans_dropped on the last kept), and they follow
// the other spans in it. Every other span carries the gstep/lstep of the last
// Step() call. All carry the thread that constructed the recorder and the
// step's correlation id: with `correlated` the steps are numbered 1, 2, ...
// (device tracers attach the number to the work launched meanwhile), each
// step the hook saw, traced or not, taking the next; without it every id is 0.
// Costs a few clock reads and about 30 bytes a span. Threading: one thread at
// a time, as RecordExtras (the protected helpers too): the tracer calls it
// under its step mutex.
// How many STEP_NOT_TRACED spans wait for one record; the rest are counted.
inline constexpr size_t kMaxNotTracedSpans = 4096;

class HostSpanRecorder : public RecordExtras {
 public:
  explicit HostSpanRecorder(bool correlated = false);

  void OnStepCalled(int64_t gstep, int64_t lstep) override;
  // The spans noted since the last call, as Record field 6 each.
  std::string TakeTrailingFields() override;
  void OnStepEncoded(int64_t begin_ns, int64_t end_ns) override;
  void OnStepReturned(int64_t begin_ns, int64_t end_ns) override;
  void OnStepNotTraced(int64_t gstep, int64_t lstep) override;
  // Correlation id of the step in progress (0: uncorrelated).
  uint64_t CurrentCorrelationId() const { return step_id_; }
  // Spans alone do not justify a record of their own: the last step's
  // capture/encode and queue-wait spans are not written.
  std::string Finish(std::vector<std::string>*) override { return std::string(); }
  void FillStats(TraceStats*) const override {}

 protected:
  // OnStepCalled with the STEP span's end read by the caller.
  void StepCalledAt(int64_t gstep, int64_t lstep, int64_t now_ns);
  // OnStepNotTraced with the STEP_NOT_TRACED span's end read by the caller.
  void StepNotTracedAt(int64_t gstep, int64_t lstep, int64_t now_ns);
  // A span of the step in progress (its steps, correlation id and thread).
  void AddSpan(HostSpanKind kind, int64_t start_ns, int64_t end_ns);
  // Spans made elsewhere, after those noted so far; `spans` is left empty.
  void MoveSpans(std::vector<HostSpanInfo>* spans);
  // Appends the spans noted so far, the not-traced ones last, to `out` (Record
  // field 6 each) and forgets them.
  void TakeSpansInto(std::string* out);
  // Forgets the spans noted so far, the not-traced ones too.
  void DropSpans();

 private:
  // The step ended at `end_ns`: the next STEP span starts there, with the next id.
  void EndStep(int64_t end_ns);

  const bool correlated_;
  const int64_t thread_id_;  // The thread that started the tracer.
  uint64_t step_id_;         // Correlation id of the step in progress (0: uncorrelated).
  int64_t gstep_ = 0;        // Of the last Step() call.
  int64_t lstep_ = 0;
  int64_t step_begin_ns_;            // End of the previous step the hook saw (or construction).
  std::vector<HostSpanInfo> spans_;  // Finished, not yet in a record.
  BoundedSpanLog not_traced_;        // STEP_NOT_TRACED spans, not yet in a record.
};

// The OS thread id of the calling thread (gettid).
int64_t CurrentThreadId();

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_HOST_SPANS_H_
