// Host spans: the hand encoder against protobuf, the bounded log, HostSpanRecorder's step spans.
#include "record/host_spans.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/clock.h"
#include "device_trace.pb.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/tracer.h"

namespace xdl_trace {
namespace internal {
namespace {

std::vector<xdl::proto::HostSpan> Parse(const std::string& fields) {
  xdl::proto::Record record;
  REQUIRE(record.ParseFromString(fields));
  return {record.host_span().begin(), record.host_span().end()};
}

// A recorder whose not-traced steps end at given times.
class TimedRecorder : public HostSpanRecorder {
 public:
  using HostSpanRecorder::HostSpanRecorder;
  using HostSpanRecorder::StepNotTracedAt;
};

TEST_CASE("host spans encode exactly as protobuf serializes them", "[record][host_spans]") {
  std::vector<HostSpanInfo> spans(3);
  spans[0] = {HostSpanKind::kStep, 1700000000000000000, 1700000000000500000, 12, 3, 7, 4242};
  spans[1] = {HostSpanKind::kStepNotTraced, 5, 6, -1, 0, 0, 1};  // Negative gstep: 10 bytes.
  spans[1].spans_dropped = 9;
  spans[2] = {HostSpanKind::kIoWrite, 0, 0, 0, 0, 0, 0};  // All zero but the kind.
  spans[2].records = 4;
  std::string ours;
  AppendHostSpanFields(spans, &ours);

  xdl::proto::Record expected;
  for (const HostSpanInfo& s : spans) {
    xdl::proto::HostSpan* m = expected.add_host_span();
    m->set_kind(static_cast<xdl::proto::HostSpan::Kind>(s.kind));
    m->set_start_ns(s.start_ns);
    m->set_end_ns(s.end_ns);
    m->set_gstep(s.gstep);
    m->set_lstep(s.lstep);
    m->set_correlation_id(s.correlation_id);
    m->set_thread_id(s.thread_id);
    m->set_spans_dropped(s.spans_dropped);
    m->set_records(s.records);
  }
  CHECK(ours == expected.SerializeAsString());
  const std::vector<xdl::proto::HostSpan> parsed = Parse(ours);
  REQUIRE(parsed.size() == 3);
  CHECK(parsed[1].kind() == xdl::proto::HostSpan::STEP_NOT_TRACED);
  CHECK(parsed[1].gstep() == -1);
  CHECK(parsed[2].records() == 4);
}

TEST_CASE("the span log keeps its capacity and counts the rest on the last span",
          "[record][host_spans]") {
  BoundedSpanLog log(3);
  for (int64_t g = 0; g < 5; ++g) log.Add(HostSpanInfo{HostSpanKind::kStepNotTraced, g, g, g});
  std::vector<HostSpanInfo> out;
  log.TakeInto(&out);
  REQUIRE(out.size() == 3);
  CHECK(out[0].gstep == 0);
  CHECK(out[2].gstep == 2);
  CHECK(out[0].spans_dropped == 0);
  CHECK(out[2].spans_dropped == 2);
  CHECK(log.empty());
  log.Add(HostSpanInfo{HostSpanKind::kStepNotTraced, 9, 9, 9});
  out.clear();
  log.TakeInto(&out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].spans_dropped == 0);  // The count started over.
}

TEST_CASE("HostSpanRecorder: one STEP span per traced step, starting where the last step ended",
          "[record][host_spans]") {
  TimedRecorder extras;
  const int64_t start = WallClockNs();
  extras.OnStepCalled(10, 0);
  std::vector<xdl::proto::HostSpan> first = Parse(extras.TakeTrailingFields());
  REQUIRE(first.size() == 1);
  CHECK(first[0].kind() == xdl::proto::HostSpan::STEP);
  CHECK(first[0].gstep() == 10);
  CHECK(first[0].start_ns() <= start);  // From the tracer's start.
  CHECK(first[0].thread_id() > 0);
  extras.OnStepEncoded(100, 200);
  extras.OnStepReturned(200, 300);
  // Steps 11 and 12 not traced: the next STEP span starts at the end of 12.
  extras.StepNotTracedAt(11, 1, 400);
  extras.StepNotTracedAt(12, 2, 500);
  extras.OnStepCalled(13, 3);
  const std::vector<xdl::proto::HostSpan> second = Parse(extras.TakeTrailingFields());
  REQUIRE(second.size() == 5);
  CHECK(second[0].kind() == xdl::proto::HostSpan::CAPTURE_ENCODE);
  CHECK(second[0].gstep() == 10);
  CHECK(second[1].kind() == xdl::proto::HostSpan::QUEUE_WAIT);
  CHECK(second[1].end_ns() == 300);
  CHECK(second[2].kind() == xdl::proto::HostSpan::STEP);
  CHECK(second[2].gstep() == 13);
  CHECK(second[2].start_ns() == 500);
  // The not-traced steps follow, each with its own steps and times.
  CHECK(second[3].kind() == xdl::proto::HostSpan::STEP_NOT_TRACED);
  CHECK(second[3].gstep() == 11);
  CHECK(second[3].lstep() == 1);
  CHECK(second[3].start_ns() == 300);
  CHECK(second[3].end_ns() == 400);
  CHECK(second[3].thread_id() == first[0].thread_id());
  CHECK(second[4].kind() == xdl::proto::HostSpan::STEP_NOT_TRACED);
  CHECK(second[4].gstep() == 12);
  CHECK(second[4].start_ns() == 400);
  CHECK(second[4].end_ns() == 500);
  CHECK(second[4].spans_dropped() == 0);
  std::vector<std::string> traces;
  CHECK(extras.Finish(&traces).empty());  // Spans alone make no record.
  CHECK(traces.empty());
  CHECK(second[2].correlation_id() == 0);  // Uncorrelated: every id is 0.
  CHECK(extras.CurrentCorrelationId() == 0);
}

TEST_CASE("HostSpanRecorder (correlated): every step the hook saw takes the next id",
          "[record][host_spans]") {
  TimedRecorder recorder(/*correlated=*/true);
  CHECK(recorder.CurrentCorrelationId() == 1);
  recorder.OnStepCalled(10, 0);
  recorder.OnStepEncoded(100, 200);
  recorder.OnStepReturned(200, 300);  // Step 1 ends; step 2 begins.
  CHECK(recorder.CurrentCorrelationId() == 2);
  recorder.StepNotTracedAt(11, 1, 400);  // Step 2 (not traced) ends.
  CHECK(recorder.CurrentCorrelationId() == 3);
  recorder.OnStepCalled(12, 2);
  recorder.OnStepReturned(500, 500);  // A failed step: no queue-wait span, still an id.
  CHECK(recorder.CurrentCorrelationId() == 4);
  const std::vector<xdl::proto::HostSpan> spans = Parse(recorder.TakeTrailingFields());
  REQUIRE(spans.size() == 5);
  CHECK(spans[0].kind() == xdl::proto::HostSpan::STEP);
  CHECK(spans[0].correlation_id() == 1);
  CHECK(spans[1].kind() == xdl::proto::HostSpan::CAPTURE_ENCODE);
  CHECK(spans[1].correlation_id() == 1);
  CHECK(spans[2].kind() == xdl::proto::HostSpan::QUEUE_WAIT);
  CHECK(spans[2].correlation_id() == 1);
  CHECK(spans[3].kind() == xdl::proto::HostSpan::STEP);
  CHECK(spans[3].correlation_id() == 3);
  CHECK(spans[3].start_ns() == 400);  // Where the not-traced step ended.
  CHECK(spans[3].gstep() == 12);
  CHECK(spans[4].kind() == xdl::proto::HostSpan::STEP_NOT_TRACED);
  CHECK(spans[4].correlation_id() == 2);  // Its own step's id.
  CHECK(spans[4].start_ns() == 300);
}

TEST_CASE("HostSpanRecorder: not-traced spans are bounded per record and the rest counted",
          "[record][host_spans]") {
  HostSpanRecorder recorder;
  const int64_t constructed = WallClockNs();
  const int64_t total = static_cast<int64_t>(internal::kMaxNotTracedSpans) + 5;
  for (int64_t g = 0; g < total; ++g) recorder.OnStepNotTraced(g, g);
  std::vector<xdl::proto::HostSpan> spans = Parse(recorder.TakeTrailingFields());
  REQUIRE(spans.size() == internal::kMaxNotTracedSpans);
  CHECK(spans.front().start_ns() <= constructed);  // The first from the recorder's start.
  CHECK(spans.front().end_ns() >= constructed);
  CHECK(spans[1].start_ns() == spans[0].end_ns());
  CHECK(spans.front().spans_dropped() == 0);
  CHECK(spans.back().gstep() == total - 6);
  CHECK(spans.back().spans_dropped() == 5);
  recorder.OnStepNotTraced(total, total);
  spans = Parse(recorder.TakeTrailingFields());
  REQUIRE(spans.size() == 1);
  CHECK(spans[0].spans_dropped() == 0);  // The count started over.
  CHECK(Parse(recorder.TakeTrailingFields()).empty());
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
