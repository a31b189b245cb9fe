// Device tracing end to end: Tracer + fake C plugin (and "cupti") write into the data files.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/tracer.h"

#ifdef XDL_TRACE_TEST_PLUGIN_DIR
namespace xdl_trace {
namespace {

std::string FakePlugin() {
  return std::string(XDL_TRACE_TEST_PLUGIN_DIR) + "/libxdl_trace_fake.so";
}

std::vector<xdl::proto::Record> ReadRecords(const TraceConfig& config) {
  std::string data_file;  // The one data file of this run (indices start where the writer says).
  for (const auto& entry : std::filesystem::directory_iterator(config.output_dir)) {
    if (entry.path().extension() != ".meta") data_file = entry.path().string();
  }
  REQUIRE_FALSE(data_file.empty());
  const std::vector<std::string> frames = test::SplitFrames(test::ReadFile(data_file));
  REQUIRE(frames.size() >= 1);
  std::vector<xdl::proto::Record> records;
  for (size_t i = 1; i < frames.size(); ++i) {
    records.emplace_back();
    REQUIRE(records.back().ParseFromString(frames[i]));
  }
  return records;
}

std::shared_ptr<Registry> OneTensor(const float* data) {
  auto registry = std::make_shared<Registry>();
  EntrySpec spec;
  spec.key = "w";
  spec.kind = EntryKind::kTensor;
  spec.has_view = true;
  spec.view = TensorView{DType::kFloat32, {4}, data};
  REQUIRE(registry->Register(spec).ok());
  return registry;
}

}  // namespace

TEST_CASE("the fake plugin's events and host spans reach the data file", "[plugin][e2e]") {
  static const float kWeights[4] = {1, 2, 3, 4};
  TraceConfig config;
  const test::TempDir dir("plugin_tracer");
  config.output_dir = dir.path();
  config.fsync = false;
  config.device_tracers = {FakePlugin()};
  config.device_collect_interval_s = 0;  // Collect at every step.
  auto tracer = Tracer::Start(config, OneTensor(kWeights));
  REQUIRE(tracer.ok());
  for (int64_t step = 1; step <= 5; ++step) REQUIRE((*tracer)->Step(step * 100, step).ok());
  REQUIRE((*tracer)->Close().ok());
  const TraceStats stats = (*tracer)->stats();
  CHECK(stats.device_tracer_status == "fake: ok");
  CHECK(stats.device_events == 6 * 6);  // Five steps plus the one open at Close.
  CHECK(stats.device_events_dropped == 0);

  const std::vector<xdl::proto::Record> records = ReadRecords(config);
  REQUIRE(records.size() == 6);  // Five steps and the device-only tail.
  int64_t events = 0, steps = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const xdl::proto::Record& record = records[i];
    // XDL's part is untouched; the device-only tail has no columns at all.
    REQUIRE(record.column_size() == (i + 1 < records.size() ? 1 : 0));
    for (const auto& span : record.host_span()) {
      if (span.kind() != xdl::proto::HostSpan::STEP) continue;
      ++steps;
      CHECK(span.gstep() == record.gstep());
      CHECK(span.correlation_id() == static_cast<uint64_t>(record.lstep()));
      CHECK(span.thread_id() > 0);
    }
    for (const auto& trace : record.device_trace()) {
      CHECK(trace.tracer() == "fake");
      for (const auto& device : trace.device()) {
        for (const auto& line : device.line()) {
          for (const auto& event : line.event()) {
            ++events;
            CHECK(event.start_ns() / 1000000 <= record.timestamp() + 1000);
          }
        }
      }
    }
  }
  CHECK(steps == 5);
  CHECK(events == 36);
  // The tail: no fake columns, the last step's gstep/lstep, device fields only.
  CHECK(records.back().column_size() == 0);
  CHECK(records.back().gstep() == 500);
  CHECK(records.back().lstep() == 5);
  CHECK(records.back().device_trace_size() > 0);
}

TEST_CASE("device_tracers [cupti] runs cleanly here and reports unavailable", "[plugin][e2e]") {
  static const float kWeights[4] = {1, 2, 3, 4};
  TraceConfig config;
  const test::TempDir dir("plugin_tracer");
  config.output_dir = dir.path();
  config.fsync = false;
  config.device_tracers = {"cupti"};
  auto tracer = Tracer::Start(config, OneTensor(kWeights));
  REQUIRE(tracer.ok());
  for (int64_t step = 1; step <= 3; ++step) REQUIRE((*tracer)->Step(step, step).ok());
  REQUIRE((*tracer)->Close().ok());
  const TraceStats stats = (*tracer)->stats();
  INFO(stats.device_tracer_status);
  std::printf("device_tracers [cupti]: %s\n", stats.device_tracer_status.c_str());
  CHECK(absl::StartsWith(stats.device_tracer_status, "cupti: "));
  CHECK(stats.device_events == 0);
  const std::vector<xdl::proto::Record> records = ReadRecords(config);
  CHECK(records.size() == 3);  // No device events: no tail record.
  for (const auto& record : records) {
    CHECK(record.device_trace_size() == 0);
    CHECK(record.host_span_size() >= 1);
  }
}

TEST_CASE("a bad plugin in device_tracers fails Tracer::Start naming it", "[plugin][e2e]") {
  TraceConfig config;
  const test::TempDir dir("plugin_tracer");
  config.output_dir = dir.path();
  config.device_tracers = {std::string(XDL_TRACE_TEST_PLUGIN_DIR) + "/libxdl_trace_bad_major.so"};
  auto tracer = Tracer::Start(config, std::make_shared<Registry>());
  REQUIRE_FALSE(tracer.ok());
  CHECK(absl::StrContains(tracer.status().message(), "libxdl_trace_bad_major.so"));
  CHECK(absl::StrContains(tracer.status().message(), "abi_major"));
}

}  // namespace xdl_trace
#else
TEST_CASE("device tracing end-to-end tests need the test plugins", "[plugin]") {
  WARN("SKIPPED: built without XDL_TRACE_BUILD_PLUGINS (no test plugins)");
}
#endif
