// Host spans (Record field 6) every tracer writes: their plain form, encoder and the default
// extras.
#ifndef XDL_TRACE_RECORD_HOST_SPANS_H_
#define XDL_TRACE_RECORD_HOST_SPANS_H_

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

// The RecordExtras of a tracer without device tracing: the host spans of its
// traced steps (STEP, CAPTURE_ENCODE, QUEUE_WAIT, as DeviceTracing writes
// them, with correlation id 0) and nothing else. Costs a few clock reads and
// about 30 bytes per span. Threading: the training thread, as RecordExtras.
class HostSpanExtras final : public RecordExtras {
 public:
  HostSpanExtras();
  void OnStepCalled(int64_t gstep, int64_t lstep) override;
  std::string TakeTrailingFields() override;
  void OnStepEncoded(int64_t begin_ns, int64_t end_ns) override;
  void OnStepReturned(int64_t begin_ns, int64_t end_ns) override;
  void OnStepNotTraced(int64_t gstep, int64_t lstep, int64_t begin_ns, int64_t end_ns) override;
  // Spans alone do not justify a record of their own: the last step's
  // capture/encode and queue-wait spans are not written.
  std::string Finish() override { return std::string(); }
  void FillStats(TraceStats*) const override {}

 private:
  void Add(HostSpanKind kind, int64_t start_ns, int64_t end_ns);

  const int64_t thread_id_;  // The thread that started the tracer.
  int64_t gstep_ = 0;
  int64_t lstep_ = 0;
  int64_t step_begin_ns_;            // End of the previous step the hook saw (or Start).
  std::vector<HostSpanInfo> spans_;  // Finished, not yet in a record.
};

// The OS thread id of the calling thread (gettid).
int64_t CurrentThreadId();

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_HOST_SPANS_H_
