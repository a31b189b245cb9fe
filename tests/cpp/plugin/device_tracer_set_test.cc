// The RFC's requirements for device-tracer plugins, via DeviceTracerSet and the fake C plugin.
#include "plugin/device_tracer_set.h"

#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "core/clock.h"
#include "core/wire.h"
#include "device_trace.pb.h"
#include "plugin/collect_pages.h"
#include "plugin/device_tracing.h"
#include "record/record_encoder.h"
#include "xdl_trace.pb.h"

#ifdef XDL_TRACE_TEST_PLUGIN_DIR
namespace xdl_trace {
namespace internal {
namespace {

std::string FakePlugin() {
  return std::string(XDL_TRACE_TEST_PLUGIN_DIR) + "/libxdl_trace_fake.so";
}

std::unique_ptr<DeviceTracerSet> MakeSet(std::vector<std::string> entries,
                                         DeviceTracerSetOptions options = {}) {
  absl::StatusOr<std::unique_ptr<DeviceTracerSet>> set =
      DeviceTracerSet::Create(entries, std::move(options));
  INFO(set.status().ToString());
  REQUIRE(set.ok());
  return std::move(*set);
}

std::vector<xdl::proto::DeviceTrace> Parse(const std::vector<std::string>& serialized) {
  std::vector<xdl::proto::DeviceTrace> traces;
  for (const std::string& bytes : serialized) {
    traces.emplace_back();
    REQUIRE(traces.back().ParseFromString(bytes));
  }
  return traces;
}

// Polls `done` for up to 60 s (a hang guard, not a timing assertion).
template <typename F>
bool WaitUntil(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

int64_t Events(const xdl::proto::DeviceTrace& trace) {
  int64_t n = 0;
  for (const auto& d : trace.device()) {
    for (const auto& l : d.line()) n += l.event_size();
  }
  return n;
}

// Resident set size in bytes (Linux).
int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

// The fields of the tracer's last, device-only record: Finish()'s DeviceTrace
// parts, then its host spans ("" when it would write none).
std::string FinishedFields(DeviceTracing& t) {
  std::vector<std::string> traces;
  const std::string spans = t.Finish(&traces);
  return EncodeDeviceTrailingFields(traces, {}) + spans;
}

// The split as a message-level model (test-only): `trace` cut into parts
// whose serialized size is at most `max_bytes`, by the bounds
// SplitDeviceTraceBytes uses; its parts must equal SplitDeviceTraceBytes'.
std::vector<xdl::proto::DeviceTrace> SplitDeviceTrace(const xdl::proto::DeviceTrace& trace,
                                                      size_t max_bytes) {
  xdl::proto::DeviceTrace base;
  base.set_tracer(trace.tracer());
  *base.mutable_name() = trace.name();
  std::vector<xdl::proto::DeviceTrace> parts;
  parts.push_back(base);
  parts.back().set_dropped_events(trace.dropped_events());
  parts.back().set_dropped_buffers(trace.dropped_buffers());
  parts.back().set_status(trace.status());
  // Upper bound of the current part's serialized size, and where its
  // device and line for the event being placed are (null: not opened yet).
  size_t size = parts.back().ByteSizeLong();
  size_t events_in_part = 0;
  for (const xdl::proto::Device& device : trace.device()) {
    const size_t device_bytes =
        kPartFieldOverhead + kPartIntFieldBytes + kPartFieldOverhead + device.name().size();
    xdl::proto::Device* part_device = nullptr;
    for (const xdl::proto::DeviceLine& line : device.line()) {
      const size_t line_bytes =
          kPartFieldOverhead + kPartIntFieldBytes + kPartFieldOverhead + line.name().size();
      xdl::proto::DeviceLine* part_line = nullptr;
      for (const xdl::proto::DeviceEvent& event : line.event()) {
        const size_t event_bytes = kPartFieldOverhead + event.ByteSizeLong();
        size_t needed = event_bytes + (part_line == nullptr ? line_bytes : 0) +
                        (part_device == nullptr ? device_bytes : 0);
        if (events_in_part > 0 && size + needed > max_bytes) {
          parts.push_back(base);
          size = parts.back().ByteSizeLong();
          events_in_part = 0;
          part_device = nullptr;
          part_line = nullptr;
          needed = event_bytes + line_bytes + device_bytes;
        }
        if (part_device == nullptr) {
          part_device = parts.back().add_device();
          part_device->set_id(device.id());
          part_device->set_name(device.name());
        }
        if (part_line == nullptr) {
          part_line = part_device->add_line();
          part_line->set_id(line.id());
          part_line->set_name(line.name());
        }
        *part_line->add_event() = event;
        size += needed;
        ++events_in_part;
      }
    }
  }
  return parts;
}

}  // namespace

TEST_CASE("no device: start and stop do nothing and collect returns nothing", "[plugin]") {
  DeviceTracerSetOptions options;
  options.plugin_config = "unavailable=1";
  auto set = MakeSet({FakePlugin()}, options);
  REQUIRE(set->Start().ok());
  for (uint64_t step = 1; step <= 3; ++step) {
    set->StepBegin(step);
    set->StepEnd(step);
  }
  REQUIRE(set->Collect().ok());
  CHECK(set->TakePending().empty());
  REQUIRE(set->Stop().ok());
  CHECK(set->events_collected() == 0);
  CHECK(absl::StrContains(set->StatusSummary(), "fake: unavailable"));
  const std::vector<DeviceTracerStatus> statuses = set->Statuses();
  REQUIRE(statuses.size() == 1);
  CHECK(statuses[0].tracer == "fake");
  CHECK(statuses[0].state == DeviceTracerState::kUnavailable);
  CHECK(statuses[0].message == "fake device absent (unavailable=1)");
  CHECK(set->AnyNotOk());
}

TEST_CASE("events from the C plugin come back as a DeviceTrace with step ids", "[plugin]") {
  auto set = MakeSet({FakePlugin()});
  REQUIRE(set->Start().ok());
  for (uint64_t step = 1; step <= 3; ++step) {
    set->StepBegin(step);
    set->StepEnd(step);
  }
  REQUIRE(set->Collect().ok());
  const auto traces = Parse(set->TakePending());
  REQUIRE(traces.size() == 1);
  const xdl::proto::DeviceTrace& trace = traces[0];
  CHECK(trace.tracer() == "fake");
  CHECK(trace.status().empty());
  // Per step: 2 kernels + 1 memcpy on the device, 3 launches on the API line.
  CHECK(Events(trace) == 3 * 6);
  CHECK(set->events_collected() == 18);
  REQUIRE(trace.device_size() == 2);
  const auto& gpu = trace.device(0);
  REQUIRE(gpu.line_size() == 2);
  CHECK(gpu.line(0).name() == "stream 7");
  CHECK(gpu.line(0).event_size() == 6);
  const auto& kernel = gpu.line(0).event(0);
  CHECK(trace.name(kernel.name_index()) == "fake_kernel");
  CHECK(kernel.kind() == xdl::proto::DEVICE_EVENT_KERNEL);
  CHECK(kernel.external_id() == 1);
  CHECK(kernel.end_ns() >= kernel.start_ns());
  CHECK(kernel.start_ns() > 1600000000000000000);  // CLOCK_REALTIME ns.
  const auto& copy = gpu.line(1).event(2);
  CHECK(trace.name(copy.name_index()) == "fake_memcpy");
  CHECK(copy.external_id() == 3);
  REQUIRE(copy.stat_size() == 1);
  CHECK(trace.name(copy.stat(0).name_index()) == "bytes");
  CHECK(copy.stat(0).int64_value() == 4096);
  // Collect again: nothing new.
  REQUIRE(set->Collect().ok());
  CHECK(set->TakePending().empty());
  REQUIRE(set->Stop().ok());
}

TEST_CASE("restartable: 1000 start/stop cycles without leaks", "[plugin]") {
  auto set = MakeSet({FakePlugin()});
  auto cycle = [&](uint64_t step) {
    REQUIRE(set->Start().ok());
    set->StepBegin(step);
    set->StepEnd(step);
    REQUIRE(set->Stop().ok());
    REQUIRE(set->Collect().ok());
    REQUIRE(set->TakePending().size() == 1);
  };
  for (uint64_t i = 1; i <= 100; ++i) cycle(i);  // Warm up allocators.
  const int64_t rss_before = RssBytes();
  for (uint64_t i = 101; i <= 1100; ++i) cycle(i);
  const int64_t growth = RssBytes() - rss_before;
  std::printf("plugin start/stop x1000: RSS growth %lld bytes\n", static_cast<long long>(growth));
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Sanitizers hold freed memory in quarantine: RSS says nothing; LeakSanitizer checks at exit.
  WARN("RSS bound not checked under a sanitizer (growth " << growth << " bytes)");
#else
  CHECK(growth < 2 * 1024 * 1024);
#endif
  CHECK(set->events_collected() == 1100 * 6);
}

TEST_CASE("bounded memory: plugin and core caps drop and count", "[plugin]") {
  SECTION("the plugin's own cap (max_buffer_bytes_per_tracer)") {
    DeviceTracerSetOptions options;
    options.max_buffer_bytes_per_tracer = 400;  // 10 events of 40 bytes.
    auto set = MakeSet({FakePlugin()}, options);
    REQUIRE(set->Start().ok());
    for (uint64_t step = 1; step <= 10; ++step) {
      set->StepBegin(step);
      set->StepEnd(step);
    }
    REQUIRE(set->Collect().ok());
    const auto traces = Parse(set->TakePending());
    REQUIRE(traces.size() == 1);
    CHECK(Events(traces[0]) == 10);
    CHECK(traces[0].dropped_events() == 50);
    CHECK(set->events_dropped() == 50);
  }
  SECTION("the core's pending cap (max_pending_bytes)") {
    DeviceTracerSetOptions options;
    options.max_pending_bytes = 2000;
    auto set = MakeSet({FakePlugin()}, options);
    REQUIRE(set->Start().ok());
    int64_t produced = 0;
    for (uint64_t step = 1; step <= 20; ++step) {
      set->StepBegin(step);
      set->StepEnd(step);
      produced += 6;
      REQUIRE(set->Collect().ok());  // Never taken: the cap must hold.
      CHECK(set->pending_bytes() <= 2000);
    }
    CHECK(set->events_dropped() > 0);
    CHECK(set->events_collected() + set->events_dropped() == produced);
  }
  SECTION("the last collect at close (CollectAll) is not held to the pending cap") {
    DeviceTracerSetOptions options;
    options.max_pending_bytes = 2000;
    options.max_trace_part_bytes = 500;
    auto set = MakeSet({FakePlugin()}, options);
    REQUIRE(set->Start().ok());
    for (uint64_t step = 1; step <= 50; ++step) {  // 300 events, far past 2000 bytes.
      set->StepBegin(step);
      set->StepEnd(step);
    }
    REQUIRE(set->Stop().ok());
    std::vector<std::string> parts;
    REQUIRE(set->CollectAll(&parts).ok());
    CHECK(parts.size() > 4);  // Split at 500 bytes, every part kept.
    int64_t events = 0;
    for (const auto& trace : Parse(parts)) events += Events(trace);
    CHECK(events == 300);
    CHECK(set->events_dropped() == 0);
    CHECK(set->events_collected() == 300);
    CHECK(set->pending_bytes() == 0);
  }
}

// Every event of `parts`, as (name, line id, correlation id), checking each
// part is self-contained: its name indexes resolve in its own table.
std::vector<std::tuple<std::string, int64_t, uint64_t>> Flat(
    const std::vector<xdl::proto::DeviceTrace>& parts) {
  std::vector<std::tuple<std::string, int64_t, uint64_t>> out;
  for (const auto& part : parts) {
    for (const auto& d : part.device()) {
      for (const auto& l : d.line()) {
        for (const auto& e : l.event()) {
          REQUIRE(e.name_index() < part.name_size());
          out.emplace_back(part.name(e.name_index()), l.id(), e.correlation_id());
        }
      }
    }
  }
  return out;
}

TEST_CASE("an oversized collect is split into parts, every event kept", "[plugin]") {
  DeviceTracerSetOptions options;
  options.max_trace_part_bytes = 64 << 10;
  options.plugin_config = "events_per_step=40000";
  auto set = MakeSet({FakePlugin()}, options);
  REQUIRE(set->Start().ok());
  set->StepBegin(1);
  set->StepEnd(1);
  REQUIRE(set->Collect().ok());
  const std::vector<std::string> pending = set->TakePending();
  REQUIRE(pending.size() > 10);
  for (const std::string& part : pending) CHECK(part.size() <= (64u << 10));
  const auto parts = Parse(pending);
  const auto events = Flat(parts);
  CHECK(events.size() == 2 * 40001);
  CHECK(set->events_collected() == 2 * 40001);
  CHECK(set->events_dropped() == 0);
  CHECK(set->StatusSummary() == "fake: ok");
  // The same events as one unsplit collect gives, in the same order.
  DeviceTracerSetOptions whole_options = options;
  whole_options.max_trace_part_bytes = 1ull << 40;
  auto whole = MakeSet({FakePlugin()}, whole_options);
  REQUIRE(whole->Start().ok());
  whole->StepBegin(1);
  whole->StepEnd(1);
  REQUIRE(whole->Collect().ok());
  const auto one = Parse(whole->TakePending());
  REQUIRE(one.size() == 1);
  auto a = Flat(one), b = events;
  CHECK(a == b);
  for (const auto& part : parts) CHECK(part.tracer() == "fake");
}

TEST_CASE("a collect above the pending cap keeps what fits and says what it dropped", "[plugin]") {
  // The defaults scaled down 8x (sanitizer builds run this too): a 4 MiB
  // pending cap, 512 KiB parts, one collect of 200 k events (about 5 MiB).
  // Before splitting, such a collect kept 0 of its events while the status
  // said ok (at the defaults: 0 of 1.6 M fake events above 32 MiB).
  DeviceTracerSetOptions options;
  options.max_pending_bytes = 4u << 20;
  options.max_trace_part_bytes = 512u << 10;
  options.plugin_config = "events_per_step=99999";
  auto set = MakeSet({FakePlugin()}, options);
  REQUIRE(set->Start().ok());
  set->StepBegin(1);
  set->StepEnd(1);
  REQUIRE(set->Collect().ok());
  const int64_t produced = 2 * 100000;
  CHECK(set->pending_bytes() <= (4u << 20));
  CHECK(set->events_collected() > produced / 2);  // Most of it, not nothing.
  CHECK(set->events_dropped() > 0);
  CHECK(set->events_collected() + set->events_dropped() == produced);
  const auto status = set->Statuses();
  REQUIRE(status.size() == 1);
  CHECK(status[0].events_dropped == set->events_dropped());
  const std::string summary = set->StatusSummary();
  INFO(summary);
  CHECK(summary == "fake: ok (dropped " + std::to_string(set->events_dropped()) + " events)");
  int64_t taken = 0;
  for (const auto& part : Parse(set->TakePending())) taken += Events(part);
  CHECK(taken == set->events_collected());
}

TEST_CASE("drops are counted in events per tracer, lost buffers apart", "[plugin]") {
  DeviceTracerSetOptions options;
  options.plugin_config = "max_events=4";  // 6 events per step: 2 dropped each.
  auto set = MakeSet({FakePlugin()}, options);
  REQUIRE(set->Start().ok());
  for (uint64_t step = 1; step <= 3; ++step) {
    set->StepBegin(step);
    set->StepEnd(step);
    REQUIRE(set->Collect().ok());
  }
  CHECK(set->events_collected() == 3 * 4);
  CHECK(set->events_dropped() == 3 * 2);
  CHECK(set->buffers_dropped() == 0);
  CHECK(set->Statuses()[0].events_dropped == 6);
  CHECK(set->StatusSummary() == "fake: ok (dropped 6 events)");
  // DeviceTrace.dropped_buffers (a CUPTI buffer refused at its cap) is kept
  // apart: the rendering names it, the events count is untouched.
  DeviceTracerStatus with_buffers;
  with_buffers.tracer = "cupti";
  with_buffers.events_dropped = 15;
  with_buffers.buffers_dropped = 2;
  CHECK(RenderDeviceTracerStatus({with_buffers}) ==
        "cupti: ok (dropped 15 events, 2 buffers of unknown events)");
}

TEST_CASE("SummarizeDeviceTrace reads what protobuf reads and refuses bad wire data", "[plugin]") {
  xdl::proto::DeviceTrace trace;
  trace.set_tracer("t");
  trace.add_name("");
  trace.add_name("k");
  trace.set_dropped_events(7);
  trace.set_dropped_buffers(3);
  trace.set_status("unavailable: why");
  for (int d = 0; d < 2; ++d) {
    auto* device = trace.add_device();
    device->set_id(d - 1);
    for (int l = 0; l < 3; ++l) {
      auto* line = device->add_line();
      line->set_id(l);
      for (int e = 0; e < 5 + l; ++e) {
        auto* event = line->add_event();
        event->set_name_index(1);
        event->set_start_ns(-5);  // A negative varint: ten bytes.
        event->add_stat()->set_double_value(0.5);
        event->add_stat()->set_str_value("x");
      }
    }
  }
  const std::string bytes = trace.SerializeAsString();
  DeviceTraceSummary summary;
  REQUIRE(SummarizeDeviceTrace(bytes, &summary));
  CHECK(summary.tracer == "t");
  CHECK(summary.status == "unavailable: why");
  CHECK(summary.dropped_events == 7);
  CHECK(summary.dropped_buffers == 3);
  CHECK(summary.events == 2 * (5 + 6 + 7));
  REQUIRE(SummarizeDeviceTrace("", &summary));  // The empty message.
  CHECK(summary.events == 0);
  // Every truncation of the message is refused, as protobuf refuses it.
  for (size_t n = 1; n < bytes.size(); ++n) {
    xdl::proto::DeviceTrace parsed;
    const bool protobuf_ok = parsed.ParseFromString(bytes.substr(0, n));
    INFO(n);
    CHECK(SummarizeDeviceTrace(bytes.substr(0, n), &summary) == protobuf_ok);
  }
  CHECK_FALSE(SummarizeDeviceTrace(std::string("\x1f\x00", 2), &summary));      // Wire type 7.
  CHECK_FALSE(SummarizeDeviceTrace(std::string("\x1a\x05\x1a", 3), &summary));  // Length.
  // An event that is not a message inside a line.
  CHECK_FALSE(SummarizeDeviceTrace(std::string("\x1a\x04\x1a\x02\x1a\x05", 6), &summary));
}

xdl::proto::DeviceTrace SplitInput() {
  xdl::proto::DeviceTrace trace;
  trace.set_tracer("t");
  trace.add_name("");
  trace.add_name("k");
  trace.set_dropped_events(7);
  trace.set_dropped_buffers(2);
  trace.set_status("unavailable: partly");
  for (int d = 0; d < 2; ++d) {
    auto* device = trace.add_device();
    device->set_id(d);
    device->set_name("dev " + std::to_string(d));
    for (int l = 0; l < 3; ++l) {
      auto* line = device->add_line();
      line->set_id(100 + l);
      line->set_name("stream " + std::to_string(l));
      for (int e = 0; e < 50; ++e) {
        auto* event = line->add_event();
        event->set_name_index(1);
        event->set_start_ns(1700000000000000000 + e);
        event->set_end_ns(1700000000000000000 + e + 1);
        event->set_correlation_id(d * 1000 + l * 100 + e);
        if (e % 3 == 0) {
          auto* stat = event->add_stat();
          stat->set_name_index(1);
          stat->set_str_value("x" + std::to_string(e));
        }
      }
    }
  }
  return trace;
}

TEST_CASE("SplitDeviceTraceBytes: the parts of SplitDeviceTrace, byte for byte", "[plugin]") {
  const xdl::proto::DeviceTrace trace = SplitInput();
  const std::string bytes = trace.SerializeAsString();
  for (size_t max_bytes : {size_t{1}, size_t{200}, size_t{1000}, size_t{4096}, size_t{1} << 20}) {
    INFO(max_bytes);
    const auto expected = SplitDeviceTrace(trace, max_bytes);
    std::vector<DeviceTracePart> parts;
    REQUIRE(SplitDeviceTraceBytes(bytes, max_bytes, &parts));
    REQUIRE(parts.size() == expected.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      CHECK(parts[i].bytes == expected[i].SerializeAsString());
      CHECK(parts[i].events == Events(expected[i]));
    }
  }
  std::vector<DeviceTracePart> parts;
  CHECK_FALSE(SplitDeviceTraceBytes(bytes.substr(0, bytes.size() / 2), 1000, &parts));
  CHECK_FALSE(SplitDeviceTraceBytes(std::string("\x1a\x04\x1a\x02\x1a\x05", 6), 1000, &parts));
}

// A collect's bytes in pages of their own, as CollectOne holds a large one.
void ToPages(const std::string& bytes, CollectPages* pages) {
  REQUIRE(pages->Map(bytes.size()));
  std::memcpy(pages->data(), bytes.data(), bytes.size());
}

TEST_CASE("SplitCollectPages: SplitDeviceTraceBytes' parts in one walk, pages handed back",
          "[plugin]") {
  xdl::proto::DeviceTrace trace = SplitInput();
  for (auto& device : *trace.mutable_device()) {
    for (auto& line : *device.mutable_line()) {
      for (int e = 0; e < 4000; ++e) *line.add_event() = line.event(e % 50);  // Many pages.
    }
  }
  for (const bool named : {true, false}) {
    INFO(named);
    xdl::proto::DeviceTrace input = trace;
    if (!named) input.clear_tracer();
    const std::string bytes = input.SerializeAsString();
    DeviceTraceSummary expected_summary;
    REQUIRE(SummarizeDeviceTrace(bytes, &expected_summary));
    // An unnamed trace is named as if the field were appended.
    xdl::proto::DeviceTrace named_input = input;
    named_input.set_tracer(named ? "t" : "fake");
    std::vector<DeviceTracePart> expected;
    REQUIRE(SplitDeviceTraceBytes(named_input.SerializeAsString(), 64 << 10, &expected));
    CollectPages pages;
    ToPages(bytes, &pages);
    DeviceTraceSummary summary;
    std::vector<DeviceTracePart> parts;
    REQUIRE(SplitCollectPages(
        &pages, bytes.size(), 64 << 10, "fake",
        [&](const DeviceTraceSummary& s) {
          summary = s;
          return true;
        },
        [&](DeviceTracePart part) { parts.push_back(std::move(part)); }));
    CHECK(summary.tracer == expected_summary.tracer);
    CHECK(summary.status == expected_summary.status);
    CHECK(summary.dropped_events == expected_summary.dropped_events);
    CHECK(summary.dropped_buffers == expected_summary.dropped_buffers);
    CHECK(summary.events == expected_summary.events);
    REQUIRE(parts.size() == expected.size());
    REQUIRE(parts.size() > 10);
    for (size_t i = 0; i < parts.size(); ++i) {
      CHECK(parts[i].bytes == expected[i].bytes);
      CHECK(parts[i].events == expected[i].events);
    }
    CHECK(pages.released() > bytes.size() * 3 / 4);  // All but the partial pages.
    // Told not to keep it: nothing emitted.
    ToPages(bytes, &pages);
    parts.clear();
    REQUIRE(SplitCollectPages(
        &pages, bytes.size(), 64 << 10, "fake", [](const DeviceTraceSummary&) { return false; },
        [&](DeviceTracePart part) { parts.push_back(std::move(part)); }));
    CHECK(parts.empty());
  }
}

TEST_CASE(
    "SplitCollectPages: a line with fields between its events keeps its pages, bad stats fail",
    "[plugin]") {
  // One line whose name comes after its events (protobuf reads any order):
  // the bytes between its first and last event are not all events, so none
  // of them is handed back, and the parts are still SplitDeviceTraceBytes'.
  xdl::proto::DeviceLine line;
  line.set_id(3);
  for (int e = 0; e < 20000; ++e) {
    auto* event = line.add_event();
    event->set_name_index(1);
    event->set_start_ns(1000 + e);
  }
  std::string line_bytes = line.SerializeAsString();
  AppendLengthDelimitedField(xdl::proto::DeviceLine::kNameFieldNumber, "late", &line_bytes);
  AppendLengthDelimitedField(xdl::proto::DeviceLine::kEventFieldNumber,
                             line.event(7).SerializeAsString(), &line_bytes);
  std::string device_bytes;
  AppendLengthDelimitedField(xdl::proto::Device::kLineFieldNumber, line_bytes, &device_bytes);
  xdl::proto::DeviceTrace head;
  head.set_tracer("t");
  head.add_name("");
  head.add_name("k");
  std::string bytes = head.SerializeAsString();
  AppendLengthDelimitedField(xdl::proto::DeviceTrace::kDeviceFieldNumber, device_bytes, &bytes);
  std::vector<DeviceTracePart> expected;
  REQUIRE(SplitDeviceTraceBytes(bytes, 32 << 10, &expected));
  CollectPages pages;
  ToPages(bytes, &pages);
  std::vector<DeviceTracePart> parts;
  auto keep = [](const DeviceTraceSummary&) { return true; };
  auto emit = [&](DeviceTracePart part) { parts.push_back(std::move(part)); };
  REQUIRE(SplitCollectPages(&pages, bytes.size(), 32 << 10, "fake", keep, emit));
  CHECK(pages.released() == 0);
  REQUIRE(parts.size() == expected.size());
  for (size_t i = 0; i < parts.size(); ++i) CHECK(parts[i].bytes == expected[i].bytes);
  // A stat that is not a message: the split alone does not look inside
  // events, but this walk also makes SummarizeDeviceTrace's checks.
  std::string event_bytes;
  AppendLengthDelimitedField(xdl::proto::DeviceEvent::kStatFieldNumber, "\xff", &event_bytes);
  std::string bad_line, bad_device, bad;
  AppendLengthDelimitedField(xdl::proto::DeviceLine::kEventFieldNumber, event_bytes, &bad_line);
  AppendLengthDelimitedField(xdl::proto::Device::kLineFieldNumber, bad_line, &bad_device);
  AppendLengthDelimitedField(xdl::proto::DeviceTrace::kDeviceFieldNumber, bad_device, &bad);
  DeviceTraceSummary summary;
  CHECK_FALSE(SummarizeDeviceTrace(bad, &summary));
  CHECK(SplitDeviceTraceBytes(bad, 1000, &expected));
  ToPages(bad, &pages);
  parts.clear();
  bool called = false;
  CHECK_FALSE(SplitCollectPages(
      &pages, bad.size(), 1000, "fake", [&](const DeviceTraceSummary&) { return called = true; },
      emit));
  CHECK_FALSE(called);
  CHECK(parts.empty());
}

TEST_CASE("SplitDeviceTrace: bounds, drops and status in the first part only", "[plugin]") {
  const xdl::proto::DeviceTrace trace = SplitInput();
  for (size_t max_bytes : {size_t{1}, size_t{200}, size_t{1000}, size_t{1} << 20}) {
    INFO(max_bytes);
    const auto parts = SplitDeviceTrace(trace, max_bytes);
    REQUIRE(!parts.empty());
    int64_t events = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const auto& part = parts[i];
      if (max_bytes >= 200 && Events(part) > 1) CHECK(part.ByteSizeLong() <= max_bytes);
      CHECK(part.dropped_events() == (i == 0 ? 7 : 0));
      CHECK(part.dropped_buffers() == (i == 0 ? 2 : 0));
      CHECK(part.status() == (i == 0 ? "unavailable: partly" : ""));
      CHECK(part.name_size() == 2);
      for (const auto& d : part.device()) {
        CHECK(d.name() == "dev " + std::to_string(d.id()));
        for (const auto& l : d.line()) {
          CHECK(l.name() == "stream " + std::to_string(l.id() - 100));
          for (const auto& e : l.event()) {
            CHECK(e.correlation_id() / 1000 == static_cast<uint64_t>(d.id()));
            CHECK(e.correlation_id() / 100 % 10 == static_cast<uint64_t>(l.id() - 100));
            ++events;
          }
        }
      }
    }
    CHECK(events == 300);
    if (max_bytes == 1) CHECK(parts.size() == 300);
    if (max_bytes == (size_t{1} << 20)) CHECK(parts.size() == 1);
  }
}

TEST_CASE("a tracer that fails to start is left out and reported; tracing goes on", "[plugin]") {
  DeviceTracerSetOptions options;
  options.plugin_config = "fail_start=1";
  auto set = MakeSet({FakePlugin()}, options);
  REQUIRE(set->Start().ok());
  CHECK(set->StatusSummary() ==
        "fake: error: start failed (4): fake: start failed as configured (fail_start=1)");
  for (uint64_t step = 1; step <= 3; ++step) {
    set->StepBegin(step);
    set->StepEnd(step);
  }
  REQUIRE(set->Collect().ok());
  CHECK(set->TakePending().empty());
  CHECK(set->events_collected() == 0);
  CHECK(set->Stop().ok());
  CHECK(absl::StrContains(set->StatusSummary(), "start failed"));  // Kept to the end.
  const std::vector<DeviceTracerStatus> statuses = set->Statuses();
  REQUIRE(statuses.size() == 1);
  CHECK(statuses[0].state == DeviceTracerState::kFailed);
  CHECK(statuses[0].message == "start failed (4): fake: start failed as configured (fail_start=1)");
}

TEST_CASE("an unknown tracer name is an error naming it", "[plugin]") {
  ::unsetenv(kPluginPathEnv);
  absl::StatusOr<std::unique_ptr<DeviceTracerSet>> set = DeviceTracerSet::Create({"nosuch"});
  REQUIRE_FALSE(set.ok());
  CHECK(absl::StrContains(set.status().message(), "'nosuch'"));
}

TEST_CASE("no deadlock: stats readers while the training thread steps", "[plugin]") {
  auto set = MakeSet({FakePlugin()});
  REQUIRE(set->Start().ok());
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      (void)set->StatusSummary();
      (void)set->events_collected();
      std::this_thread::yield();
    }
  });
  auto training = std::async(std::launch::async, [&] {
    for (uint64_t step = 1; step <= 2000; ++step) {
      set->StepBegin(step);
      set->StepEnd(step);
      if (step % 100 == 0) {
        if (!set->Collect().ok()) return false;
        set->TakePending();
      }
    }
    return set->Stop().ok();
  });
  // A hang guard, not a timing assertion.
  const bool finished = training.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  done = true;
  reader.join();
  REQUIRE(finished);
  CHECK(training.get());
  CHECK(set->events_collected() == 2000 * 6);
}

TEST_CASE("device tracing turns steps into host spans and Record fields 5 and 6", "[plugin]") {
  TraceConfig config;
  config.output_dir = "/unused";
  config.device_tracers = {FakePlugin()};
  config.device_collect_interval_s = 0;  // Collect after every step for this test.
  absl::StatusOr<std::unique_ptr<DeviceTracing>> tracing = DeviceTracing::Start(config);
  REQUIRE(tracing.ok());
  DeviceTracing& t = **tracing;

  std::vector<xdl::proto::Record> records;
  for (int64_t step = 1; step <= 3; ++step) {
    const int64_t collects = t.collects();
    t.OnStepCalled(step * 10, step);
    // The collector thread collects after the step was called; the record
    // takes what it collected.
    REQUIRE(WaitUntil([&] { return t.collects() > collects; }));
    const std::string trailing =
        EncodeDeviceTrailingFields(t.TakeDeviceTraces(), {}) + t.TakeTrailingFields();
    absl::StatusOr<EncodedRecord> encoded =
        EncodeRecord(step * 10, step, 1700000000000 + step, {}, {}, trailing);
    REQUIRE(encoded.ok());
    records.emplace_back();
    REQUIRE(records.back().ParseFromString(encoded->frame.substr(4)));
    const int64_t now = WallClockNs();
    t.OnStepEncoded(now, now + 5);
    t.OnStepReturned(now + 5, now + 12);
  }
  const std::string tail = FinishedFields(t);
  TraceStats stats;
  t.FillStats(&stats);
  // Step 4 began when step 3 returned; Finish ends it, so its events (the
  // fake emits some for every step) come back for one last record.
  CHECK(stats.device_events == 4 * 6);
  CHECK(stats.device_tracer_status == "fake: ok");
  REQUIRE(stats.device_tracers.size() == 1);
  CHECK(stats.device_tracers[0].state == DeviceTracerState::kOk);

  // Record 1: the STEP span of step 1 and the device events of step 1.
  REQUIRE(records[0].host_span_size() >= 1);
  const auto& span = records[0].host_span(0);
  CHECK(span.kind() == xdl::proto::HostSpan::STEP);
  CHECK(span.gstep() == 10);
  CHECK(span.correlation_id() == 1);
  CHECK(span.end_ns() >= span.start_ns());
  REQUIRE(records[0].device_trace_size() == 1);
  for (const auto& line : records[0].device_trace(0).device(0).line()) {
    for (const auto& event : line.event()) CHECK(event.external_id() == span.correlation_id());
  }
  // Record 2 also carries step 1's capture/encode and queue-wait spans.
  int kinds_seen = 0;
  for (const auto& s : records[1].host_span()) {
    if (s.kind() == xdl::proto::HostSpan::CAPTURE_ENCODE) kinds_seen |= 1;
    if (s.kind() == xdl::proto::HostSpan::QUEUE_WAIT) kinds_seen |= 2;
  }
  CHECK(kinds_seen == 3);
  CHECK(records[2].gstep() == 30);
  xdl::proto::Record last;
  REQUIRE(last.ParseFromString(tail));
  REQUIRE(last.device_trace_size() == 1);
  CHECK(last.device_trace(0).device(0).line(0).event(0).external_id() == 4);
}

TEST_CASE("the collector thread collects while the training thread is elsewhere", "[plugin]") {
  TraceConfig config;
  config.output_dir = "/unused";
  config.device_tracers = {FakePlugin()};
  config.device_collect_interval_s = 0.01;
  absl::StatusOr<std::unique_ptr<DeviceTracing>> tracing = DeviceTracing::Start(config);
  REQUIRE(tracing.ok());
  DeviceTracing& t = **tracing;
  t.OnStepCalled(10, 1);  // Step 1 ends: the fake emits its 6 events.
  // The training thread now blocks elsewhere (data loading, evaluation, a
  // checkpoint): no Step() runs, and the events are collected regardless.
  REQUIRE(WaitUntil([&] {
    TraceStats stats;
    t.FillStats(&stats);
    return stats.device_events == 6;
  }));
  const int64_t collects = t.collects();
  CHECK(collects >= 1);
  // The next record takes them, with the collect spans made meanwhile (on the
  // collector thread's id, not the training thread's).
  xdl::proto::Record record;
  REQUIRE(record.ParseFromString(EncodeDeviceTrailingFields(t.TakeDeviceTraces(), {}) +
                                 t.TakeTrailingFields()));
  REQUIRE(record.device_trace_size() == 1);
  CHECK(Events(record.device_trace(0)) == 6);
  int collect_spans = 0;
  int64_t training_thread = 0;
  for (const auto& span : record.host_span()) {
    if (span.kind() == xdl::proto::HostSpan::STEP) training_thread = span.thread_id();
  }
  for (const auto& span : record.host_span()) {
    if (span.kind() != xdl::proto::HostSpan::DEVICE_COLLECT) continue;
    ++collect_spans;
    CHECK(span.thread_id() != training_thread);
    CHECK(span.gstep() == 10);
  }
  CHECK(collect_spans >= collects);
  FinishedFields(t);
}

// The CUPTI plugin itself over the synthetic GPU (tests/plugins/cupti/synthetic_gpu.h): its
// "device" thread completes buffers, the plugin's parse thread parses them, the collector
// thread joins and encodes, the training thread steps and takes parts, all at once (the
// threads TSan checks here).
TEST_CASE("CUPTI over the synthetic GPU: every event kept and in a step, all threads at once",
          "[plugin][cupti]") {
  const std::string plugin =
      std::string(XDL_TRACE_BINARY_DIR) + "/test_plugins/libxdl_trace_cupti_synthetic.so";
  if (!std::ifstream(plugin).good()) {
    WARN("SKIPPED: no synthetic CUPTI plugin (built where cupti.h is)");
    return;
  }
  TraceConfig config;
  config.output_dir = "/unused";
  config.device_tracers = {plugin};
  config.device_collect_interval_s = 0.02;
  // 20,000 events a second (synthetic_rate): enough to keep every thread busy at
  // once, and little enough that the collector and parse threads, which run at a lowered
  // priority, keep up on a loaded machine (at 200,000, with four busy processes on two cores,
  // they did not: no collect for 60 s, or the plugin's buffers dropped).
  config.device_plugin_config = "synthetic_rate=20000";
  absl::StatusOr<std::unique_ptr<DeviceTracing>> tracing = DeviceTracing::Start(config);
  REQUIRE(tracing.ok());
  DeviceTracing& t = **tracing;
  {
    TraceStats stats;
    t.FillStats(&stats);
    if (absl::StrContains(stats.device_tracer_status, "unavailable")) {
      WARN("SKIPPED: " + stats.device_tracer_status);
      FinishedFields(t);
      return;
    }
  }
  std::vector<std::string> parts;
  int64_t first_step_id = 0, last_step_id = 0;
  for (int64_t step = 1; step <= 150; ++step) {
    const uint64_t id = t.CurrentCorrelationId();
    if (first_step_id == 0) first_step_id = static_cast<int64_t>(id);
    last_step_id = static_cast<int64_t>(id);
    t.OnStepCalled(step, step);
    for (std::string& part : t.TakeDeviceTraces()) parts.push_back(std::move(part));
    t.TakeTrailingFields();
    const int64_t now = WallClockNs();
    t.OnStepEncoded(now, now);
    t.OnStepReturned(now, now);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Blocked elsewhere: collects go on.
  const int64_t collects = t.collects();
  REQUIRE(WaitUntil([&] { return t.collects() >= collects + 3; }));
  xdl::proto::Record last;
  REQUIRE(last.ParseFromString(FinishedFields(t)));
  for (const auto& trace : last.device_trace()) parts.push_back(trace.SerializeAsString());
  TraceStats stats;
  t.FillStats(&stats);
  INFO(stats.device_tracer_status);
  CHECK(stats.device_events_dropped == 0);
  CHECK(stats.device_buffers_dropped == 0);
  int64_t events = 0, kernels = 0, out_of_range = 0;
  for (const std::string& bytes : parts) {
    xdl::proto::DeviceTrace trace;
    REQUIRE(trace.ParseFromString(bytes));
    events += Events(trace);
    for (const auto& device : trace.device()) {
      for (const auto& line : device.line()) {
        for (const auto& e : line.event()) {
          if (e.kind() != xdl::proto::DEVICE_EVENT_KERNEL) continue;
          ++kernels;
          const auto step = static_cast<int64_t>(e.external_id());
          // The synthetic GPU tags each call with the step pushed last (0 before the first).
          if (step != 0 && (step < first_step_id || step > last_step_id + 1)) ++out_of_range;
        }
      }
    }
  }
  CHECK(events == stats.device_events);
  CHECK(events > 2000);  // ~0.2 s at 20k events/s, at the least.
  CHECK(kernels > 0);
  CHECK(out_of_range == 0);
}

TEST_CASE("close while a collect waits at the pending cap: its parts reach the last record",
          "[plugin]") {
  TraceConfig config;
  config.output_dir = "/unused";
  config.device_tracers = {FakePlugin()};
  config.device_collect_interval_s = 0.05;
  DeviceTracerSetOptions options;
  options.max_pending_bytes = 2000;
  options.max_trace_part_bytes = 400;
  absl::StatusOr<std::unique_ptr<DeviceTracing>> tracing = DeviceTracing::Start(config, options);
  REQUIRE(tracing.ok());
  DeviceTracing& t = **tracing;
  // 100 steps (600 events, far past 2000 bytes) and no record takes any part:
  // the collector fills the cap and waits for room.
  for (int64_t step = 1; step <= 100; ++step) {
    t.OnStepCalled(step, step);
    t.OnStepReturned(0, 0);
  }
  // A collect starts within 0.05 s and then waits for room (it cannot end: no
  // step takes its parts); close comes while it waits.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  xdl::proto::Record last;
  REQUIRE(last.ParseFromString(FinishedFields(t)));
  int64_t events = 0;
  for (const auto& trace : last.device_trace()) events += Events(trace);
  TraceStats stats;
  t.FillStats(&stats);
  CHECK(stats.device_events_dropped == 0);
  CHECK(events == 6 * 101);  // 100 steps and the one open at close.
  CHECK(stats.device_events == events);
}

TEST_CASE("a collect waits for room at the pending cap until taken or told to stop", "[plugin]") {
  // The size of one step's trace (the fake's 6 events).
  size_t part = 0;
  {
    auto probe = MakeSet({FakePlugin()});
    REQUIRE(probe->Start().ok());
    probe->StepBegin(1);
    probe->StepEnd(1);
    REQUIRE(probe->Collect().ok());
    const auto taken = probe->TakePending();
    REQUIRE(taken.size() == 1);
    part = taken[0].size();
  }
  DeviceTracerSetOptions options;
  options.max_pending_bytes = part + part / 2;  // One step's trace fits, two do not.
  auto set = MakeSet({FakePlugin()}, options);
  REQUIRE(set->Start().ok());
  auto step = [&](uint64_t id) {
    set->StepBegin(id);
    set->StepEnd(id);
  };
  step(1);
  REQUIRE(set->Collect(/*wait_for_room=*/true).ok());
  step(2);
  auto second = std::async(std::launch::async, [&] { return set->Collect(true).ok(); });
  // It waits (it cannot finish before room is made), then goes in.
  CHECK(second.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  CHECK(set->TakePending(1).size() == 1);  // At least one part, even over max_bytes.
  REQUIRE(second.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(second.get());
  CHECK(set->events_dropped() == 0);
  // Not taken this time: StopWaiting (close) ends the wait; the part is dropped, counted.
  step(3);
  auto third = std::async(std::launch::async, [&] { return set->Collect(true).ok(); });
  CHECK(third.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  set->StopWaiting();
  REQUIRE(third.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(set->events_dropped() == 6);
  CHECK(set->events_collected() == 12);
  CHECK(absl::StrContains(set->StatusSummary(), "dropped 6 events"));
}

}  // namespace internal
}  // namespace xdl_trace
#else
TEST_CASE("device tracer set tests need the test plugins", "[plugin]") {
  WARN("SKIPPED: built without XDL_TRACE_BUILD_PLUGINS (no test plugins)");
}
#endif
