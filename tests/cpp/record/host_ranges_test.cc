// HostRanges: interning, kept only while a tracer listens, the per-record bound, the thread of
// each range, and RANGE spans encoded exactly as protobuf serializes them.
#include "record/host_ranges.h"

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "device_trace.pb.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

TEST_CASE("ranges are interned, kept while a tracer listens and carry their thread",
          "[record][host_ranges]") {
  HostRanges ranges;
  const int conv = ranges.Intern("layer1.conv", "forward");
  CHECK(ranges.Intern("layer1.conv", "forward") == conv);
  const int back = ranges.Intern("layer1.conv", "backward");
  CHECK(back != conv);
  CHECK_FALSE(ranges.Add(conv, 1, 2));  // No tracer listens: not kept.
  ranges.Listen();
  CHECK_FALSE(ranges.Add(99, 1, 2));  // An unknown id.
  CHECK(ranges.Add(conv, 100, 200));
  int64_t other = 0;
  std::thread autograd([&] {
    other = CurrentThreadId();
    CHECK(ranges.Add(back, 300, 400));
  });
  autograd.join();
  CHECK(ranges.Add(back, 500, 600, 77));  // A thread given: a range closed by another thread.
  std::vector<HostSpanInfo> spans;
  ranges.TakeInto(12, 3, &spans);
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].thread_id == CurrentThreadId());
  CHECK(spans[1].thread_id == other);
  CHECK(spans[1].thread_id != spans[0].thread_id);
  CHECK(spans[2].thread_id == 77);
  CHECK((spans[0].gstep == 12 && spans[0].lstep == 3));
  CHECK(*spans[1].name == "layer1.conv");
  CHECK(*spans[1].category == "backward");

  std::string fields;
  AppendHostSpanFields(spans, &fields);
  xdl::proto::Record expected;
  for (const HostSpanInfo& s : spans) {
    xdl::proto::HostSpan* m = expected.add_host_span();
    m->set_kind(xdl::proto::HostSpan::RANGE);
    m->set_start_ns(s.start_ns);
    m->set_end_ns(s.end_ns);
    m->set_gstep(s.gstep);
    m->set_lstep(s.lstep);
    m->set_thread_id(s.thread_id);
    m->set_name(*s.name);
    m->set_category(*s.category);
  }
  CHECK(fields == expected.SerializeAsString());
  spans.clear();
  ranges.TakeInto(13, 4, &spans);
  CHECK(spans.empty());  // Taken once.
  ranges.Unlisten();
  CHECK_FALSE(ranges.Add(conv, 1, 2));
}

TEST_CASE("past the per-record bound ranges are counted on the last kept",
          "[record][host_ranges]") {
  HostRanges ranges;
  const int id = ranges.Intern("fc", "forward");
  ranges.Listen();
  for (size_t i = 0; i < kMaxRangesPerRecord + 5; ++i) {
    ranges.Add(id, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);
  }
  std::vector<HostSpanInfo> spans;
  ranges.TakeInto(1, 1, &spans);
  REQUIRE(spans.size() == kMaxRangesPerRecord);
  CHECK(spans.back().spans_dropped == 5);
  ranges.Unlisten();
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
