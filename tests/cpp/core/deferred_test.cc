// Deferred captures (xdl_trace/deferred.h): columns whose bytes land after Step, with a fake
// device.
#include "xdl_trace/deferred.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/file_set.h"
#include "summary/summary.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/tracer.h"

namespace xdl_trace {
namespace {

using test::TempDir;

// A device with one stream: work runs later, in order, on a thread of its own.
class FakeStream {
 public:
  explicit FakeStream(std::chrono::milliseconds delay)
      : delay_(delay), thread_([this] { Run(); }) {}
  ~FakeStream() {
    Enqueue(nullptr);
    thread_.join();
  }
  void Enqueue(std::function<void()> work) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::move(work));
    cv_.notify_all();
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !ops_.empty(); });
        work = std::move(ops_.front());
        ops_.pop_front();
      }
      if (!work) return;
      std::this_thread::sleep_for(delay_);
      work();
    }
  }

  const std::chrono::milliseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  std::thread thread_;
};

// A fence completed (or failed) by the fake stream.
struct FakeFence {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;

  void Complete(absl::Status s = absl::OkStatus()) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  }
  absl::Status Wait(PendingBytes::Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_until(lock, deadline, [this] { return done; })) {
      return absl::DeadlineExceededError("fake fence still pending");
    }
    return status;
  }
};

TraceConfig Config(const std::string& dir) {
  TraceConfig config;
  config.output_dir = dir;
  config.fsync = false;
  config.meta_interval_s = 0;
  return config;
}

std::vector<xdl::proto::Record> ReadRecords(const TraceConfig& config) {
  const std::vector<std::string> frames =
      test::SplitFrames(test::ReadFile(internal::DataFilePath(config, 1)));
  std::vector<xdl::proto::Record> records;
  for (size_t i = 1; i < frames.size(); ++i) {
    records.emplace_back();
    REQUIRE(records.back().ParseFromString(frames[i]));
  }
  return records;
}

std::vector<float> Floats(const xdl::proto::Column& column) {
  std::vector<float> values(column.data().size() / sizeof(float));
  std::memcpy(values.data(), column.data().data(), column.data().size());
  return values;
}

// One traced value read from a fake device: the provider captures it as
// deferred; after Step, Launch enqueues the copy into fresh staging memory
// (kept alive by the record, as the binding's staging lease) and arms the
// step's bytes.
struct DeviceValue {
  std::vector<float> device = std::vector<float>(4, 0.0f);  // "Device memory".
  std::unique_ptr<PendingBytes> pending;
  std::atomic<int> copies{0};  // Copies the stream has completed.

  TensorProvider Provider() {
    return [this]() -> absl::StatusOr<CapturedTensor> {
      pending = std::make_unique<PendingBytes>();
      CapturedTensor captured;
      captured.view = TensorView{DType::kFloat32, {4}, nullptr};
      captured.deferred = pending->bytes();
      return captured;
    };
  }
  // `hang`: the copy never completes (a hung kernel); returns the staging memory.
  std::weak_ptr<std::vector<float>> Launch(FakeStream* stream,
                                           absl::Status fence_status = absl::OkStatus(),
                                           bool hang = false) {
    auto fence = std::make_shared<FakeFence>();
    auto staging = std::make_shared<std::vector<float>>(4, -2.0f);
    if (!hang) {
      stream->Enqueue([this, staging, fence, fence_status] {
        std::memcpy(staging->data(), device.data(), sizeof(float) * 4);
        ++copies;
        fence->Complete(fence_status);
      });
    }
    pending->Arm(
        reinterpret_cast<const char*>(staging->data()),
        [fence](PendingBytes::Deadline deadline) { return fence->Wait(deadline); }, staging);
    pending.reset();
    return staging;
  }
};

EntrySpec Entry(const std::string& key, TensorProvider provider, Summary summary = {}) {
  EntrySpec spec;
  spec.key = key;
  spec.kind = EntryKind::kTensor;
  spec.provider = std::move(provider);
  spec.summary = std::move(summary);
  return spec;
}

// A tracer of one entry, "w", read from a fake device (DeviceValue).
struct OneDeviceValue {
  TempDir dir;
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  DeviceValue w;
  TraceConfig config = Config(dir.path());
  std::unique_ptr<Tracer> tracer;

  explicit OneDeviceValue(double fence_timeout_s = 60) {
    config.device_fence_timeout_s = fence_timeout_s;
    REQUIRE(registry->Register(Entry("w", w.Provider())).ok());
    absl::StatusOr<std::unique_ptr<Tracer>> started = Tracer::Start(config, registry);
    REQUIRE(started.ok());
    tracer = std::move(*started);
  }
};

TEST_CASE("a deferred column holds the values of its step, not updates enqueued after it",
          "[deferred]") {
  OneDeviceValue t;
  DeviceValue& w = t.w;
  FakeStream stream(std::chrono::milliseconds(20));
  std::atomic<int> copies_before_step_returned{0};
  for (int step = 0; step < 3; ++step) {
    stream.Enqueue([&w, step] { std::fill(w.device.begin(), w.device.end(), float(step)); });
    REQUIRE(t.tracer->Step(step, step).ok());
    w.Launch(&stream);
    copies_before_step_returned += w.copies == step + 1 ? 1 : 0;
    stream.Enqueue([&w] { std::fill(w.device.begin(), w.device.end(), -1.0f); });  // An update.
  }
  REQUIRE(t.tracer->Close().ok());
  CHECK(copies_before_step_returned == 0);  // Step waited for no copy.
  const std::vector<xdl::proto::Record> records = ReadRecords(t.config);
  REQUIRE(records.size() == 3);
  for (int step = 0; step < 3; ++step) {
    CHECK(Floats(records[step].column(0)) == std::vector<float>(4, float(step)));
  }
}

TEST_CASE("a failed fence drops its record, counts it, and later records are written",
          "[deferred]") {
  OneDeviceValue t;
  DeviceValue& w = t.w;
  FakeStream stream(std::chrono::milliseconds(1));
  for (int step = 0; step < 3; ++step) {
    REQUIRE(t.tracer->Step(step, step).ok());
    w.Launch(&stream, step == 1 ? absl::InternalError("illegal address") : absl::OkStatus());
  }
  REQUIRE(t.tracer->Close().ok());
  const TraceStats stats = t.tracer->stats();
  CHECK(stats.deferred_failed == 1);
  CHECK(stats.records_dropped == 1);
  CHECK(stats.records_written == 2);
  CHECK(stats.last_deferred_error.message().find("gstep=1") != std::string::npos);
  CHECK(stats.last_deferred_error.message().find("illegal address") != std::string::npos);
  const std::vector<xdl::proto::Record> records = ReadRecords(t.config);
  REQUIRE(records.size() == 2);
  CHECK(records[0].gstep() == 0);
  CHECK(records[1].gstep() == 2);
}

TEST_CASE("a fence that never completes fails its record after device_fence_timeout_s",
          "[deferred]") {
  OneDeviceValue t(/*fence_timeout_s=*/0.2);
  DeviceValue& w = t.w;
  FakeStream stream(std::chrono::milliseconds(1));
  std::weak_ptr<std::vector<float>> hung_staging;
  for (int step = 0; step < 3; ++step) {
    REQUIRE(t.tracer->Step(step, step).ok());
    auto staging = w.Launch(&stream, absl::OkStatus(), /*hang=*/step == 0);
    if (step == 0) hung_staging = staging;
  }
  REQUIRE(t.tracer->Close().ok());  // Returns: the wait ended at the bound.
  const TraceStats stats = t.tracer->stats();
  CHECK(stats.deferred_failed == 1);
  CHECK(stats.records_written == 2);
  CHECK(stats.last_deferred_error.message().find("gstep=0") != std::string::npos);
  CHECK(stats.last_deferred_error.message().find("device_fence_timeout_s") != std::string::npos);
  // The copy may land yet: its staging memory is never handed back.
  CHECK(!hung_staging.expired());
  const std::vector<xdl::proto::Record> records = ReadRecords(t.config);
  REQUIRE(records.size() == 2);
  CHECK(records[0].gstep() == 1);
  CHECK(records[1].gstep() == 2);
}

// Close on a thread of its own, abandoned from this one (Ctrl-C in the binding) once it waits.
absl::Status CloseAbandonedAfter(Tracer* tracer, std::chrono::milliseconds wait) {
  absl::Status closed;
  std::thread closer([&] { closed = tracer->Close(); });
  std::this_thread::sleep_for(wait);
  tracer->AbandonWaits();
  closer.join();  // Within DeferredBytes::kAbandonPoll; a hang is the ctest timeout.
  return closed;
}

TEST_CASE("AbandonWaits ends Close's wait for a fence that never completes", "[deferred]") {
  OneDeviceValue t(/*fence_timeout_s=*/600);
  DeviceValue& w = t.w;
  FakeStream stream(std::chrono::milliseconds(1));
  std::weak_ptr<std::vector<float>> hung_staging;
  for (int step = 0; step < 3; ++step) {
    REQUIRE(t.tracer->Step(step, step).ok());
    auto staging = w.Launch(&stream, absl::OkStatus(), /*hang=*/step == 1);
    if (step == 1) hung_staging = staging;
  }
  REQUIRE(CloseAbandonedAfter(t.tracer.get(), std::chrono::milliseconds(200)).ok());
  const TraceStats stats = t.tracer->stats();
  CHECK(stats.deferred_failed == 1);
  CHECK(stats.records_written == 2);
  CHECK(stats.last_deferred_error.message().find("gstep=1") != std::string::npos);
  CHECK(stats.last_deferred_error.message().find("abandoned") != std::string::npos);
  CHECK(!hung_staging.expired());  // The copy may land yet.
  const std::vector<xdl::proto::Record> records = ReadRecords(t.config);
  REQUIRE(records.size() == 2);
  CHECK(records[0].gstep() == 0);
  CHECK(records[1].gstep() == 2);
}

TEST_CASE("AbandonWaits ends Close's wait for bytes not armed yet", "[deferred]") {
  OneDeviceValue t(/*fence_timeout_s=*/600);
  REQUIRE(t.tracer->Step(0, 0).ok());  // t.w.pending is never armed nor dropped meanwhile.
  REQUIRE(CloseAbandonedAfter(t.tracer.get(), std::chrono::milliseconds(200)).ok());
  CHECK(t.tracer->stats().deferred_failed == 1);
  CHECK(t.tracer->stats().last_deferred_error.message().find("abandoned") != std::string::npos);
}

TEST_CASE("bytes armed too late fail the record after device_fence_timeout_s", "[deferred]") {
  OneDeviceValue t(/*fence_timeout_s=*/0.2);
  REQUIRE(t.tracer->Step(0, 0).ok());  // t.w.pending is never armed nor dropped meanwhile.
  REQUIRE(t.tracer->Close().ok());
  CHECK(t.tracer->stats().deferred_failed == 1);
  CHECK(t.tracer->stats().last_deferred_error.message().find("not enqueued") != std::string::npos);
}

TEST_CASE("bytes never armed fail the record at Close instead of hanging", "[deferred]") {
  OneDeviceValue t;
  DeviceValue& w = t.w;
  REQUIRE(t.tracer->Step(0, 0).ok());
  w.pending.reset();  // The producer gave up before enqueueing the copies.
  REQUIRE(t.tracer->Close().ok());
  CHECK(t.tracer->stats().deferred_failed == 1);
  CHECK(t.tracer->stats().last_deferred_error.message().find("abandoned") != std::string::npos);
}

TEST_CASE("no staging memory (ResourceExhausted) is a dropped record, not a failure",
          "[deferred]") {
  OneDeviceValue t;
  DeviceValue& w = t.w;
  REQUIRE(t.tracer->Step(0, 0).ok());
  w.pending->Fail(absl::ResourceExhaustedError("staging full"));
  REQUIRE(t.tracer->Close().ok());
  CHECK(t.tracer->stats().records_dropped == 1);
  CHECK(t.tracer->stats().deferred_failed == 0);
}

TEST_CASE("a summary computed by the producer is checked against the entry's summary",
          "[deferred]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::vector<double> row(internal::kStatsSize, 1.0);
  PendingBytes pending;
  int64_t rows = internal::kStatsSize;
  auto provider = [&]() -> absl::StatusOr<CapturedTensor> {
    CapturedTensor captured;
    captured.view = TensorView{DType::kFloat64, {rows}, nullptr};
    captured.deferred = pending.bytes();
    captured.is_summary = true;
    return captured;
  };
  REQUIRE(registry->Register(Entry("s", provider, Summary{BuiltinSummary::kStats})).ok());
  REQUIRE(registry
              ->Register(Entry(
                  "raw_for_stats",
                  [&]() -> absl::StatusOr<CapturedTensor> {
                    CapturedTensor captured;
                    captured.view = TensorView{DType::kFloat32, {4}, nullptr};
                    captured.deferred = pending.bytes();
                    return captured;
                  },
                  Summary{BuiltinSummary::kStats}))
              .ok());
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  const absl::Status refused = (*tracer)->Step(0, 0);
  CHECK(absl::IsInvalidArgument(refused));
  CHECK(refused.message().find("raw_for_stats") != std::string::npos);
  CHECK(refused.message().find("needs its summary computed") != std::string::npos);
  REQUIRE((*tracer)->Close().ok());

  TempDir dir2;
  auto registry2 = std::make_shared<Registry>();
  rows = 3;  // Not a stats row.
  REQUIRE(registry2->Register(Entry("s", provider, Summary{BuiltinSummary::kStats})).ok());
  auto tracer2 = Tracer::Start(Config(dir2.path()), registry2);
  REQUIRE(tracer2.ok());
  const absl::Status wrong = (*tracer2)->Step(0, 0);
  CHECK(absl::IsInvalidArgument(wrong));
  CHECK(wrong.message().find("float64 [8]") != std::string::npos);

  rows = internal::kStatsSize;
  REQUIRE((*tracer2)->Step(1, 1).ok());
  pending.Arm(reinterpret_cast<const char*>(row.data()), nullptr, nullptr);
  REQUIRE((*tracer2)->Close().ok());
  CHECK((*tracer2)->stats().records_written == 1);
}

TEST_CASE("deferred columns are written under write mode inline too", "[deferred]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  PendingBytes pending;
  std::vector<float> staging(4, 7.0f);
  REQUIRE(registry
              ->Register(Entry("w",
                               [&]() -> absl::StatusOr<CapturedTensor> {
                                 CapturedTensor captured;
                                 captured.view = TensorView{DType::kFloat32, {4}, nullptr};
                                 captured.deferred = pending.bytes();
                                 return captured;
                               }))
              .ok());
  TraceConfig config = Config(dir.path());
  config.write_mode = WriteMode::kInline;
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  // Inline, Step returns once the record is written: here its copy already landed.
  pending.Arm(reinterpret_cast<const char*>(staging.data()), nullptr, nullptr);
  REQUIRE((*tracer)->Step(0, 0).ok());
  REQUIRE((*tracer)->Close().ok());
  const std::vector<xdl::proto::Record> records = ReadRecords(config);
  REQUIRE(records.size() == 1);
  CHECK(Floats(records[0].column(0)) == std::vector<float>(4, 7.0f));
}

}  // namespace
}  // namespace xdl_trace
