// Host spans: the hand-written HostSpan encoder, the bounded span log and HostSpanRecorder.
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
    const std::string_view numbers(payload, static_cast<size_t>(p - payload));
    if (span.name == nullptr && span.category == nullptr) {
      AppendLengthDelimitedField(Record::kHostSpanFieldNumber, numbers, out);
      continue;
    }
    std::string message(numbers);  // A RANGE: its strings follow the numbers.
    if (span.name != nullptr && !span.name->empty()) {
      AppendLengthDelimitedField(HostSpan::kNameFieldNumber, *span.name, &message);
    }
    if (span.category != nullptr && !span.category->empty()) {
      AppendLengthDelimitedField(HostSpan::kCategoryFieldNumber, *span.category, &message);
    }
    AppendLengthDelimitedField(Record::kHostSpanFieldNumber, message, out);
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

HostSpanRecorder::HostSpanRecorder(bool correlated)
    : correlated_(correlated),
      thread_id_(CurrentThreadId()),
      step_id_(correlated ? 1 : 0),
      step_begin_ns_(WallClockNs()),
      not_traced_(kMaxNotTracedSpans) {}

void HostSpanRecorder::AddSpan(HostSpanKind kind, int64_t start_ns, int64_t end_ns) {
  spans_.push_back(HostSpanInfo{kind, start_ns, end_ns, gstep_, lstep_, step_id_, thread_id_});
}

void HostSpanRecorder::MoveSpans(std::vector<HostSpanInfo>* spans) {
  spans_.insert(spans_.end(), spans->begin(), spans->end());
  spans->clear();
}

void HostSpanRecorder::TakeSpansInto(std::string* out) {
  not_traced_.TakeInto(&spans_);
  AppendHostSpanFields(spans_, out);
  spans_.clear();
}

void HostSpanRecorder::DropSpans() {
  not_traced_.TakeInto(&spans_);
  spans_.clear();
}

void HostSpanRecorder::EndStep(int64_t end_ns) {
  step_begin_ns_ = end_ns;
  if (correlated_) ++step_id_;
}

void HostSpanRecorder::StepCalledAt(int64_t gstep, int64_t lstep, int64_t now_ns) {
  gstep_ = gstep;
  lstep_ = lstep;
  AddSpan(HostSpanKind::kStep, step_begin_ns_, now_ns);
}

void HostSpanRecorder::OnStepCalled(int64_t gstep, int64_t lstep) {
  StepCalledAt(gstep, lstep, WallClockNs());
}

std::string HostSpanRecorder::TakeTrailingFields() {
  std::string fields;
  TakeSpansInto(&fields);
  return fields;
}

void HostSpanRecorder::OnStepEncoded(int64_t begin_ns, int64_t end_ns) {
  AddSpan(HostSpanKind::kCaptureEncode, begin_ns, end_ns);
}

void HostSpanRecorder::OnStepReturned(int64_t begin_ns, int64_t end_ns) {
  if (end_ns > begin_ns) AddSpan(HostSpanKind::kQueueWait, begin_ns, end_ns);
  EndStep(end_ns);
}

void HostSpanRecorder::StepNotTracedAt(int64_t gstep, int64_t lstep, int64_t now_ns) {
  not_traced_.Add(HostSpanInfo{HostSpanKind::kStepNotTraced, step_begin_ns_, now_ns, gstep, lstep,
                               step_id_, thread_id_});
  EndStep(now_ns);
}

void HostSpanRecorder::OnStepNotTraced(int64_t gstep, int64_t lstep) {
  StepNotTracedAt(gstep, lstep, WallClockNs());
}

}  // namespace internal
}  // namespace xdl_trace
