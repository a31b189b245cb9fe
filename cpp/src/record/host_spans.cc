// Host spans: the hand-written HostSpan encoder, the bounded span log and HostSpanExtras.
#include "record/host_spans.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/wire.h"
#include "device_trace.pb.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {

// Field numbers from the generated code: the .proto is their one source.
using xdl::proto::HostSpan;
using xdl::proto::Record;

void AppendHostSpanFields(absl::Span<const HostSpanInfo> spans, std::string* out) {
  char payload[9 * (1 + kMaxVarintBytes)];  // Nine varint fields at most.
  for (const HostSpanInfo& span : spans) {
    char* p = payload;
    auto field = [&p](uint32_t number, uint64_t value) {
      if (value == 0) return;
      p = WriteVarint(Tag(number, kWireVarint), p);
      p = WriteVarint(value, p);
    };
    field(HostSpan::kKindFieldNumber, SignExtend(static_cast<int>(span.kind)));
    field(HostSpan::kStartNsFieldNumber, SignExtend(span.start_ns));
    field(HostSpan::kEndNsFieldNumber, SignExtend(span.end_ns));
    field(HostSpan::kGstepFieldNumber, SignExtend(span.gstep));
    field(HostSpan::kLstepFieldNumber, SignExtend(span.lstep));
    field(HostSpan::kCorrelationIdFieldNumber, span.correlation_id);
    field(HostSpan::kThreadIdFieldNumber, SignExtend(span.thread_id));
    field(HostSpan::kSpansDroppedFieldNumber, SignExtend(span.spans_dropped));
    field(HostSpan::kRecordsFieldNumber, SignExtend(span.records));
    AppendLengthDelimitedField(Record::kHostSpanFieldNumber,
                               std::string_view(payload, static_cast<size_t>(p - payload)), out);
  }
}

void BoundedSpanLog::TakeInto(std::vector<HostSpanInfo>* out) {
  if (!spans_.empty()) {
    spans_.back().spans_dropped += dropped_;
    out->insert(out->end(), spans_.begin(), spans_.end());
  }
  spans_.clear();
  dropped_ = 0;
}

int64_t CurrentThreadId() { return static_cast<int64_t>(::syscall(SYS_gettid)); }

HostSpanExtras::HostSpanExtras()
    : RecordExtras(/*timed=*/true), thread_id_(CurrentThreadId()), step_begin_ns_(WallClockNs()) {}

void HostSpanExtras::Add(HostSpanKind kind, int64_t start_ns, int64_t end_ns) {
  spans_.push_back(HostSpanInfo{kind, start_ns, end_ns, gstep_, lstep_, 0, thread_id_});
}

void HostSpanExtras::OnStepCalled(int64_t gstep, int64_t lstep) {
  gstep_ = gstep;
  lstep_ = lstep;
  Add(HostSpanKind::kStep, step_begin_ns_, WallClockNs());
}

std::string HostSpanExtras::TakeTrailingFields() {
  std::string fields;
  AppendHostSpanFields(spans_, &fields);
  spans_.clear();
  return fields;
}

void HostSpanExtras::OnStepEncoded(int64_t begin_ns, int64_t end_ns) {
  Add(HostSpanKind::kCaptureEncode, begin_ns, end_ns);
}

void HostSpanExtras::OnStepReturned(int64_t begin_ns, int64_t end_ns) {
  if (end_ns > begin_ns) Add(HostSpanKind::kQueueWait, begin_ns, end_ns);
  step_begin_ns_ = end_ns;
}

void HostSpanExtras::OnStepNotTraced(int64_t, int64_t, int64_t, int64_t end_ns) {
  step_begin_ns_ = end_ns;
}

}  // namespace internal
}  // namespace xdl_trace
