// CUPTI tracer logic with synthetic activity records, parsed by the real libcupti record parser.
#include <catch2/catch.hpp>

#ifdef XDL_TRACE_HAVE_CUPTI
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "core/clock.h"
#include "cupti/activity_records.h"
#include "cupti_tracer.h"
#include "device_trace.pb.h"
#include "plugin/device_tracer_set.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/trace_file.h"

namespace xdl_trace {
namespace cupti {
namespace {

// The real libcupti (its record parser works without a driver), or null.
CuptiApi* RealCupti() {
  static CuptiApi* api = [] {
    std::string why;
    return LoadCuptiApi(DefaultCuptiLibraries(), &why).release();
  }();
  return api;
}

#define REQUIRE_LIBCUPTI()                                               \
  if (RealCupti() == nullptr) {                                          \
    WARN("SKIPPED: libcupti does not load here (record parser needed)"); \
    return;                                                              \
  }

// Stands in for the driver side of CUPTI; record parsing goes to the real one.
class FakeCuptiApi final : public CuptiApi {
 public:
  CUptiResult ActivityEnable(CUpti_ActivityKind kind) override {
    if (kind == fail_kind) return fail_result;
    enabled.push_back(kind);
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityDisable(CUpti_ActivityKind kind) override {
    disabled.push_back(kind);
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                        CUpti_BuffersCallbackCompleteFunc complete) override {
    request_ = request;
    complete_ = complete;
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc func) override {
    timestamp = func;
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityFlushAll(uint32_t flag) override {
    ++flushes;
    flush_flags.push_back(flag);
    if (on_flush) on_flush(flag);  // CUPTI completes buffers inside the flush call.
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityFlushPeriod(uint32_t period_ms) override {
    flush_periods.push_back(period_ms);
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                    CUpti_Activity** record) override {
    return RealCupti()->ActivityGetNextRecord(buffer, valid, record);
  }
  CUptiResult ActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) override {
    *dropped = dropped_per_buffer;
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu);  // Other threads' launches push too.
    pushed.push_back(id);
    pushed_by.push_back(std::this_thread::get_id());
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                               uint64_t* id) override {
    std::lock_guard<std::mutex> lock(mu);
    ++pops;
    return CUPTI_SUCCESS;
  }
  CUptiResult GetTimestamp(uint64_t* t) override {
    *t = 1;
    return CUPTI_SUCCESS;
  }
  CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc, void*) override {
    if (subscribe_result != CUPTI_SUCCESS) return subscribe_result;
    ++subscribed;
    *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&subscribed);
    return CUPTI_SUCCESS;
  }
  CUptiResult EnableCallback(uint32_t enable, CUpti_SubscriberHandle, CUpti_CallbackDomain domain,
                             CUpti_CallbackId cbid) override {
    if (enable) enabled_callbacks.emplace_back(domain, cbid);
    return CUPTI_SUCCESS;
  }
  CUptiResult Unsubscribe(CUpti_SubscriberHandle subscriber) override {
    if (subscriber == reinterpret_cast<CUpti_SubscriberHandle>(&subscribed)) ++unsubscribed;
    return CUPTI_SUCCESS;
  }
  std::string CallbackName(CUpti_CallbackDomain domain, uint32_t cbid) override {
    return RealCupti()->CallbackName(domain, cbid);
  }
  std::string ResultString(CUptiResult result) override {
    return RealCupti()->ResultString(result);
  }
  std::vector<DriverDeviceLimits> InitializedDevices() override { return initialized_devices; }

  CUpti_ActivityKind fail_kind = CUPTI_ACTIVITY_KIND_INVALID;
  CUptiResult fail_result = CUPTI_SUCCESS;
  std::vector<CUpti_ActivityKind> enabled, disabled;
  std::mutex mu;
  std::vector<uint64_t> pushed;
  std::vector<std::thread::id> pushed_by;
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> enabled_callbacks;
  int pops = 0, flushes = 0;
  std::vector<uint32_t> flush_flags, flush_periods;
  std::function<void(uint32_t)> on_flush;
  size_t dropped_per_buffer = 0;
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  CUptiResult subscribe_result = CUPTI_SUCCESS;
  int subscribed = 0, unsubscribed = 0;
  std::vector<DriverDeviceLimits> initialized_devices;  // What the "driver" reports at Start.

 private:
  CUpti_BuffersCallbackRequestFunc request_ = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete_ = nullptr;
};

constexpr int64_t kT0 = 1700000000000000000;  // Some CLOCK_REALTIME ns.

// The test's records: cupti/activity_records.h's, with the defaults the cases share.
CUpti_ActivityKernel10 Kernel(uint32_t correlation, int64_t start, int64_t end, uint32_t stream = 7,
                              const char* name = "gemm_kernel") {
  return testing::KernelRecord(correlation, start, end, stream, name);
}

CUpti_ActivityMemcpy6 Memcpy(uint32_t correlation, int64_t start, int64_t end, uint64_t bytes) {
  return testing::MemcpyRecord(correlation, start, end, bytes, /*stream=*/8,
                               CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
}

CUpti_ActivityAPI Runtime(uint32_t correlation, int64_t start, int64_t end, uint32_t cbid) {
  return testing::RuntimeRecord(correlation, start, end, cbid, /*thread=*/4242);
}

CUpti_ActivityExternalCorrelation External(
    uint32_t correlation, uint64_t step,
    CUpti_ExternalCorrelationKind kind = kStepCorrelationKind) {
  return testing::ExternalRecord(correlation, step, kind);
}

// A buffer obtained through the tracer's request callback, filled with
// records back to back (every record size is a multiple of 8), then completed.
class ActivityBuffer {
 public:
  explicit ActivityBuffer(CuptiTracer& tracer) : tracer_(tracer) {
    size_t max_records = 0;
    tracer_.OnBufferRequested(&data_, &size_, &max_records);
  }
  bool ok() const { return data_ != nullptr; }
  template <typename T>
  ActivityBuffer& Add(const T& record) {
    static_assert(sizeof(T) % 8 == 0, "CUPTI records are 8-byte multiples");
    // No Catch2 macro here: CUPTI-thread tests call this off the main thread.
    if (used_ + sizeof(T) > size_) {
      overflow_ = true;
      return *this;
    }
    std::memcpy(data_ + used_, &record, sizeof(T));
    used_ += sizeof(T);
    return *this;
  }
  void Complete() { tracer_.OnBufferCompleted(nullptr, 0, data_, size_, used_); }
  bool overflow() const { return overflow_; }

 private:
  CuptiTracer& tracer_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
  bool overflow_ = false;
};

struct Harness {
  explicit Harness(CuptiTracerOptions options = Small()) {
    auto fake = std::make_unique<FakeCuptiApi>();
    api = fake.get();
    tracer = std::make_unique<CuptiTracer>(options, std::move(fake));
  }
  static CuptiTracerOptions Small() {
    CuptiTracerOptions options;
    options.buffer_bytes = 4096;
    options.max_buffer_bytes = 3 * 4096;
    options.preallocated_buffers = 1;
    return options;
  }
  xdl::proto::DeviceTrace Collect() {
    xdl::proto::DeviceTrace trace;
    REQUIRE(trace.ParseFromString(tracer->Collect()));
    return trace;
  }
  FakeCuptiApi* api;
  std::unique_ptr<CuptiTracer> tracer;
};

struct FlatEvent {
  std::string name, line;
  int32_t device;
  xdl::proto::DeviceEvent event;
};

std::vector<FlatEvent> Flatten(const xdl::proto::DeviceTrace& trace) {
  std::vector<FlatEvent> out;
  for (const auto& d : trace.device()) {
    for (const auto& l : d.line()) {
      for (const auto& e : l.event())
        out.push_back({trace.name(e.name_index()), l.name(), d.id(), e});
    }
  }
  return out;
}

CUpti_ActivityMarker2 Marker(uint32_t id, CUpti_ActivityFlag flags, int64_t at,
                             const char* name = nullptr, const char* domain = nullptr,
                             uint32_t thread = 4242) {
  auto r = testing::ZeroedRecord<CUpti_ActivityMarker2>(CUPTI_ACTIVITY_KIND_MARKER);
  r.flags = flags;
  r.timestamp = at;
  r.id = id;
  r.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  r.objectId.pt.processId = 1;
  r.objectId.pt.threadId = thread;
  r.name = name;
  r.domain = domain;
  return r;
}

CUpti_ActivityMemory4 Memory(uint32_t correlation, CUpti_ActivityMemoryOperationType op, int64_t at,
                             uint64_t bytes, uint64_t address) {
  auto r = testing::ZeroedRecord<CUpti_ActivityMemory4>(CUPTI_ACTIVITY_KIND_MEMORY2);
  r.memoryOperationType = op;
  r.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r.correlationId = correlation;
  r.address = address;
  r.bytes = bytes;
  r.timestamp = at;
  r.deviceId = 1;
  r.streamId = 7;
  return r;
}

// The value of stat `name` of `e` in `trace`, as text ("" when absent).
std::string StatText(const xdl::proto::DeviceTrace& trace, const FlatEvent& e,
                     const std::string& name) {
  for (const auto& stat : e.event.stat()) {
    if (trace.name(stat.name_index()) != name) continue;
    return stat.has_str_value() ? stat.str_value() : std::to_string(stat.int64_value());
  }
  return "";
}

const FlatEvent* Find(const std::vector<FlatEvent>& events, const std::string& name) {
  for (const FlatEvent& e : events) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("kernel, memcpy and runtime records become joined events", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  REQUIRE(h.tracer->state() == CuptiTracer::State::kRunning);
  CHECK(h.api->timestamp != nullptr);  // CLOCK_REALTIME timestamps requested.
  CHECK(h.api->timestamp() > static_cast<uint64_t>(kT0));
  h.tracer->StepBegin(11);
  h.tracer->StepEnd(11);
  CHECK(h.api->pushed == std::vector<uint64_t>{11});
  CHECK(h.api->pops == 1);

  ActivityBuffer buffer(*h.tracer);
  REQUIRE(buffer.ok());
  buffer.Add(External(5, 11))
      .Add(Runtime(5, kT0, kT0 + 1000, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000))
      .Add(Kernel(5, kT0 + 2000, kT0 + 9000))
      .Add(External(6, 11))
      .Add(Memcpy(6, kT0 + 9500, kT0 + 9900, 1 << 20))
      .Add(External(6, 99, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0));  // Not ours.
  buffer.Complete();

  const xdl::proto::DeviceTrace trace = h.Collect();
  CHECK(trace.tracer() == "cupti");
  CHECK(trace.status().empty());
  CHECK(trace.dropped_events() == 0);
  const std::vector<FlatEvent> events = Flatten(trace);
  REQUIRE(events.size() == 3);
  const FlatEvent* kernel = Find(events, "gemm_kernel");
  REQUIRE(kernel != nullptr);
  CHECK(kernel->line == "stream 7");
  CHECK(kernel->device == 0);
  CHECK(kernel->event.kind() == xdl::proto::DEVICE_EVENT_KERNEL);
  CHECK(kernel->event.start_ns() == kT0 + 2000);
  CHECK(kernel->event.end_ns() == kT0 + 9000);
  CHECK(kernel->event.correlation_id() == 5);
  CHECK(kernel->event.external_id() == 11);
  bool saw_grid = false;
  for (const auto& stat : kernel->event.stat()) {
    if (trace.name(stat.name_index()) == "grid") saw_grid = stat.str_value() == "128x1x1";
  }
  CHECK(saw_grid);
  const FlatEvent* copy = Find(events, "Memcpy HtoD");
  REQUIRE(copy != nullptr);
  CHECK(copy->event.external_id() == 11);
  CHECK(copy->line == "stream 8");
  // The runtime call sits on the host-API pseudo device, named by libcupti.
  const FlatEvent* launch = nullptr;
  for (const FlatEvent& e : events) {
    if (e.event.kind() == xdl::proto::DEVICE_EVENT_RUNTIME_API) launch = &e;
  }
  REQUIRE(launch != nullptr);
  CHECK(absl::StrContains(launch->name, "cudaLaunchKernel"));
  CHECK(launch->device == kHostApiDevice);
  CHECK(launch->line == "thread 4242");
  CHECK(launch->event.correlation_id() == 5);
  CHECK(h.tracer->pool().outstanding() == 0);  // The buffer went back to the pool.
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("the serializer orders a line by start, stable, also far out of order", "[cupti]") {
  NameTable names;
  const int32_t kernel = names.Intern("k");
  const int32_t grid = names.Intern("grid");
  const int32_t bytes = names.Intern("bytes");
  const int32_t text = names.Intern("128x1x1");
  std::vector<DeviceEventData> events;
  // Stream 1: 3000 events in reverse (past the insertion sort's budget), two
  // of each start, the first of a pair tagged by correlation id 1. Stream 2:
  // in order but one. Every event carries kMaxEventStats stats of all types.
  for (int i = 2999; i >= 0; --i) {
    DeviceEventData& e = events.emplace_back();
    e.name = kernel;
    e.kind = EventKind::kKernel;
    e.start_ns = 1000 + i / 2;
    e.end_ns = e.start_ns + 5;
    e.correlation_id = static_cast<uint64_t>(1 + i % 2);
    e.line = 1;
    e.AddStat(grid, EventStat::Type::kText, text);
    e.AddStat(bytes, EventStat::Type::kInt, -(int64_t{1} << 40));
    e.AddStat(grid, EventStat::Type::kNameIndex, kernel);
    for (int k = 3; k < static_cast<int>(kMaxEventStats) + 2; ++k) {
      e.AddStat(bytes, EventStat::Type::kInt, k);  // The last two are over the limit.
    }
  }
  for (int64_t start : {5, 6, 4, 7, 8}) {
    DeviceEventData& e = events.emplace_back();
    e.name = kernel;
    e.start_ns = start;
    e.end_ns = start + 1;
    e.line = 2;
  }
  xdl::proto::DeviceTrace trace;
  REQUIRE(trace.ParseFromString(SerializeDeviceTrace("cupti", names, events, 0, "")));
  REQUIRE(trace.device_size() == 1);
  REQUIRE(trace.device(0).line_size() == 2);
  const auto& reversed = trace.device(0).line(0);
  REQUIRE(reversed.event_size() == 3000);
  bool ordered = true;
  for (int i = 0; i < reversed.event_size(); ++i) {
    const auto& e = reversed.event(i);
    // Pairs of one start keep their arrival order: the odd i (id 2) came first.
    ordered =
        ordered && e.start_ns() == 1000 + i / 2 && e.correlation_id() == (i % 2 == 0 ? 2u : 1u);
  }
  CHECK(ordered);
  const auto& stats = reversed.event(0).stat();
  REQUIRE(stats.size() == static_cast<int>(kMaxEventStats));
  CHECK(trace.name(stats[0].name_index()) == "grid");
  CHECK(stats[0].str_value() == "128x1x1");
  CHECK(stats[1].int64_value() == -(int64_t{1} << 40));
  CHECK(trace.name(static_cast<int>(stats[2].int64_value())) == "k");
  CHECK(stats[5].int64_value() == 5);
  std::vector<int64_t> starts;
  for (const auto& e : trace.device(0).line(1).event()) starts.push_back(e.start_ns());
  CHECK(starts == std::vector<int64_t>{4, 5, 6, 7, 8});
}

TEST_CASE("the writer writes protobuf's own bytes, also when reused for a smaller trace",
          "[cupti]") {
  // Plan encodes each event once into the writer's own buffer, which later
  // plans reuse: every trace must still be the bytes protobuf writes for it
  // (field order, trace-local names in order of first use, oneof zeros).
  NameTable names;
  std::vector<int32_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(names.Intern("n" + std::to_string(i)));
  DeviceTraceWriter writer;
  for (size_t count : {size_t{20000}, size_t{0}, size_t{700}, size_t{1}}) {
    std::vector<DeviceEventData> events;
    uint64_t x = 12345 + count;
    auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
    for (size_t i = 0; i < count; ++i) {
      DeviceEventData& e = events.emplace_back();
      e.start_ns = static_cast<int64_t>(1'700'000'000'000'000'000 + i * 100 - next() % 400);
      e.end_ns = next() % 5 == 0 ? 0 : e.start_ns + static_cast<int64_t>(next() % 9000);
      e.correlation_id = next() % 4 == 0 ? 0 : next() % 100000;
      e.external_id = next() % 3 == 0 ? 0 : next() % 500;
      e.device = static_cast<int32_t>(next() % 3) - 1;
      e.line = static_cast<int64_t>(next() % 6) - 4;
      e.name = ids[next() % ids.size()];
      e.kind = static_cast<EventKind>(next() % 9);
      for (int k = static_cast<int>(next() % 7); k > 0; --k) {
        const auto type = static_cast<EventStat::Type>(next() % 3);
        const int64_t value = type == EventStat::Type::kInt
                                  ? static_cast<int64_t>(next() % 4 == 0 ? next() : next() % 200)
                                  : ids[next() % ids.size()];
        e.AddStat(ids[next() % ids.size()], type, value);
      }
    }
    const NameSnapshot snapshot(names);
    std::string bytes(writer.Plan("cupti", snapshot, events, 3, count == 1 ? "failed" : "", 2),
                      '\xAB');
    writer.Write(bytes.data());
    writer.Clear();
    xdl::proto::DeviceTrace trace;
    REQUIRE(trace.ParseFromString(bytes));
    int64_t parsed = 0;
    for (const auto& device : trace.device()) {
      for (const auto& line : device.line()) parsed += line.event_size();
    }
    CHECK(parsed == static_cast<int64_t>(count));
    CHECK(trace.SerializeAsString() == bytes);
    CHECK(SerializeDeviceTrace("cupti", names, events, 3, count == 1 ? "failed" : "", 2) == bytes);
  }
}

TEST_CASE("a device's limits ride on its Device; each kernel gets its blocks per SM", "[cupti]") {
  REQUIRE_LIBCUPTI();
  // CUPTI writes a DEVICE record when CUDA starts: where the application's CUDA started before
  // the tracer (the usual order: the model is on the GPU before the hook begins), none comes,
  // and the limits are the driver's (before that was read, no kernel had a figure).
  const bool cuda_started_first = GENERATE(false, true);
  CAPTURE(cuda_started_first);
  Harness h;
  if (cuda_started_first) h.api->initialized_devices = {testing::H100DriverLimits(0)};
  REQUIRE(h.tracer->Start().ok);
  h.tracer->StepBegin(3);
  h.tracer->StepEnd(3);
  ActivityBuffer buffer(*h.tracer);
  REQUIRE(buffer.ok());
  auto heavy = Kernel(6, kT0 + 3000, kT0 + 4000, 7, "heavy_kernel");
  heavy.registersPerThread = 128;  // 2 blocks of 256 threads fit 65536 registers.
  auto elsewhere = Kernel(7, kT0 + 5000, kT0 + 6000, 7, "other_gpu_kernel");
  elsewhere.deviceId = 1;  // A device neither a DEVICE record nor the driver knows: no figure.
  if (!cuda_started_first) buffer.Add(testing::H100DeviceRecord(0));
  buffer.Add(External(5, 3))
      .Add(Kernel(5, kT0 + 2000, kT0 + 2500))  // 256 threads, 32 registers: 8 blocks.
      .Add(External(6, 3))
      .Add(heavy)
      .Add(External(7, 3))
      .Add(elsewhere);
  buffer.Complete();
  const xdl::proto::DeviceTrace trace = h.Collect();
  REQUIRE(h.tracer->Stop().ok);
  auto stat = [&](const auto& stats, const std::string& name) -> int64_t {
    for (const auto& s : stats) {
      if (trace.name(s.name_index()) == name) return s.int64_value();
    }
    return -1;
  };
  const std::vector<FlatEvent> events = Flatten(trace);
  REQUIRE(events.size() == 3);  // The DEVICE record is no event.
  CHECK(stat(Find(events, "gemm_kernel")->event.stat(), "active_blocks_per_sm") == 8);
  CHECK(stat(Find(events, "heavy_kernel")->event.stat(), "active_blocks_per_sm") == 2);
  CHECK(stat(Find(events, "other_gpu_kernel")->event.stat(), "active_blocks_per_sm") == -1);
  for (const xdl::proto::Device& device : trace.device()) {
    if (device.id() == 0) {
      CHECK(stat(device.stat(), "sm_count") == 132);
      CHECK(stat(device.stat(), "max_threads_per_sm") == 2048);
      CHECK(stat(device.stat(), "registers_per_sm") == 65536);
      CHECK(stat(device.stat(), "shared_memory_per_sm") == 233472);
      CHECK(stat(device.stat(), "compute_capability") == 90);
    } else {
      CHECK(device.stat().empty());  // Device 1 and the host API pseudo device.
    }
  }
}

TEST_CASE("kernel names are demangled once per name; the mangled one stays in the stats",
          "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  h.tracer->StepBegin(3);
  h.tracer->StepEnd(3);
  // Two buffers, the same name at two addresses (as after a module reload),
  // and a name CUPTI reports unmangled (cuDNN's sm90_xmma_... kernels).
  static const char kMangled[] = "_ZN2at6native13reduce_kernelILi512ELi1EEEvv";
  static const std::string kMangledCopy = kMangled;
  static const char kPlain[] = "sm90_xmma_fprop_implicit_gemm_execute_kernel__5x_cudnn";
  ActivityBuffer first(*h.tracer);
  REQUIRE(first.ok());
  first.Add(External(1, 3)).Add(Kernel(1, kT0, kT0 + 10, 7, kMangled));
  first.Add(External(2, 3)).Add(Kernel(2, kT0 + 20, kT0 + 30, 7, kPlain));
  first.Complete();
  ActivityBuffer second(*h.tracer);
  REQUIRE(second.ok());
  second.Add(External(3, 3)).Add(Kernel(3, kT0 + 40, kT0 + 50, 7, kMangledCopy.c_str()));
  second.Complete();
  const xdl::proto::DeviceTrace trace = h.Collect();
  const std::vector<FlatEvent> events = Flatten(trace);
  REQUIRE(events.size() == 3);
  auto mangled_stat = [&](const xdl::proto::DeviceEvent& e) -> std::string {
    for (const auto& stat : e.stat()) {
      if (trace.name(stat.name_index()) == "mangled_name_index") {
        return trace.name(static_cast<int>(stat.int64_value()));
      }
    }
    return "";
  };
  CHECK(events[0].name == "void at::native::reduce_kernel<512, 1>()");
  CHECK(mangled_stat(events[0].event) == kMangled);
  CHECK(events[1].name == kPlain);
  CHECK(mangled_stat(events[1].event).empty());
  CHECK(events[2].name == events[0].name);
  CHECK(mangled_stat(events[2].event) == kMangled);
  for (const auto& e : events) CHECK(e.event.external_id() == 3);
}

// The H100 "conv" run of 2026-11-26 (tests/data/h100_conv/README.md): the file
// the CUPTI tracer wrote on a real GPU, read back by the real reader; then its
// kernels' names, mangled as that build stored them, through today's parser.
TEST_CASE("the H100 conv trace reads back: 213 kernels a step, names as Kineto shows them",
          "[cupti]") {
  REQUIRE_LIBCUPTI();
  const std::string dir = std::string(XDL_TRACE_SOURCE_DIR) + "/tests/data/h100_conv/";
  auto file = TraceFile::Open(dir + "cupti_trace/train.trace.0.1");
  REQUIRE(file.ok());
  RecordCursor cursor = (*file)->Records();
  RecordView record;
  std::map<uint64_t, xdl::proto::HostSpan> steps;  // STEP spans by correlation id.
  struct Launched {
    std::string name;
    uint64_t step;
    int64_t start_ns, end_ns;
  };
  std::vector<Launched> kernels;
  int records = 0;
  while (cursor.Next(&record)) {
    ++records;
    for (const RawField& field : record.extra_fields) {
      if (field.number == 6) {
        xdl::proto::HostSpan span;
        REQUIRE(span.ParseFromArray(field.payload.data(), static_cast<int>(field.payload.size())));
        if (span.kind() == xdl::proto::HostSpan::STEP) steps[span.correlation_id()] = span;
      } else if (field.number == 5) {
        xdl::proto::DeviceTrace trace;
        REQUIRE(trace.ParseFromArray(field.payload.data(), static_cast<int>(field.payload.size())));
        CHECK(trace.dropped_events() == 0);
        CHECK(trace.status().empty());
        for (const FlatEvent& e : Flatten(trace)) {
          if (e.event.kind() != xdl::proto::DEVICE_EVENT_KERNEL) continue;
          kernels.push_back({e.name, e.event.external_id(), e.event.start_ns(), e.event.end_ns()});
        }
      }
    }
  }
  REQUIRE(cursor.status().ok());
  CHECK_FALSE(cursor.torn_tail());
  CHECK(records == 13);  // 12 steps and the device-only record written at close.
  REQUIRE(steps.size() == 12);
  REQUIRE(kernels.size() == 2568);  // Kineto counted 2568 in the same 12 steps.

  // Every kernel is in the step that launched it. A step runs the previous
  // iteration's optimizer (3 kernels) and this one's forward and backward
  // (210): 213 kernels; the first step has no optimizer before it, and the
  // last optimizer runs in the step still open at close (id 13). 12 cuBLAS
  // kernels (one a step) are launched through a driver call that the
  // attribution rules do not tag (docs/device-tracing.md, rule 2's limits).
  std::map<uint64_t, int> per_step;
  std::map<uint64_t, std::pair<int64_t, int64_t>> first_last_start;
  for (const Launched& k : kernels) {
    ++per_step[k.step];
    if (k.step == 0) {
      CHECK(absl::StrContains(k.name, "cutlass_80_simt_sgemm"));
      continue;
    }
    auto& range = first_last_start.try_emplace(k.step, k.start_ns, k.start_ns).first->second;
    range.first = std::min(range.first, k.start_ns);
    range.second = std::max(range.second, k.start_ns);
    auto span = steps.find(k.step);
    if (span == steps.end()) continue;             // The step open at close has no STEP span.
    CHECK(k.start_ns >= span->second.start_ns());  // Runs after its step launched it.
    CHECK(k.end_ns >= k.start_ns);
  }
  for (uint64_t step = 2; step <= 12; ++step) CHECK(per_step[step] == 213);
  CHECK(per_step[1] == 210);
  CHECK(per_step[13] == 3);
  CHECK(per_step[0] == 12);
  // Steps follow one another on the device: no kernel of a step starts before
  // the last kernel of the step before it.
  for (uint64_t step = 2; step <= 13; ++step) {
    CHECK(first_last_start[step].first > first_last_start[step - 1].second);
  }
  for (uint64_t step = 1; step <= 12; ++step) {
    REQUIRE(steps.count(step) == 1);
    CHECK(steps[step].gstep() == static_cast<int64_t>(step) - 1);
  }

  // The names: that build stored them mangled; the parser shows each as
  // Kineto does (tests/data/h100_conv/kineto_kernel_names.tsv, from Kineto's
  // trace of the same workload), keeping the mangled one in the stats.
  std::map<std::string, int> kineto;
  std::ifstream tsv(dir + "kineto_kernel_names.tsv");
  std::string line;
  while (std::getline(tsv, line)) {
    const size_t tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    kineto[line.substr(tab + 1)] += std::stoi(line.substr(0, tab));
  }
  REQUIRE(kineto.size() == 46);
  CuptiTracerOptions options;
  options.buffer_bytes = 1u << 20;
  options.max_buffer_bytes = 4u << 20;
  Harness h(options);
  REQUIRE(h.tracer->Start().ok);
  std::deque<std::string> raw_names;  // CUPTI's name pointers stay valid while parsed.
  ActivityBuffer buffer(*h.tracer);
  REQUIRE(buffer.ok());
  uint32_t correlation = 0;
  for (const Launched& k : kernels) {
    raw_names.push_back(k.name);
    ++correlation;
    buffer.Add(External(correlation, 1))
        .Add(Kernel(correlation, kT0 + correlation * 10, kT0 + correlation * 10 + 5, 7,
                    raw_names.back().c_str()));
  }
  REQUIRE_FALSE(buffer.overflow());
  buffer.Complete();
  const xdl::proto::DeviceTrace trace = h.Collect();
  std::map<std::string, int> shown;
  int mangled_kept = 0;
  for (const FlatEvent& e : Flatten(trace)) {
    ++shown[e.name];
    const std::string mangled = StatText(trace, e, "mangled_name_index");
    if (!mangled.empty()) {
      CHECK(trace.name(std::stoi(mangled)).rfind("_Z", 0) == 0);
      ++mangled_kept;
    }
  }
  CHECK(shown == kineto);
  // Every "_Z..." name (cuDNN's sm90_xmma_... are plain) but one: the 1636
  // characters of a cutlass convolution no demangler here or in Kineto reads
  // (12 kernels), shown as CUPTI gave it, as Kineto does.
  CHECK(mangled_kept == 2316 - 12);
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("NVTX ranges and marks become marker events on their thread", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  CHECK(h.tracer->ActivityKinds().back() == CUPTI_ACTIVITY_KIND_MARKER);  // On by default.
  REQUIRE(h.tracer->Start().ok);
  ActivityBuffer first(*h.tracer);
  first.Add(Marker(3, CUPTI_ACTIVITY_FLAG_MARKER_START, kT0, "forward", "train"))
      .Add(Marker(4, CUPTI_ACTIVITY_FLAG_MARKER_START, kT0 + 10, "attention", nullptr, 77))
      .Add(Marker(5, CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, kT0 + 20, "checkpoint"))
      .Add(Marker(9, CUPTI_ACTIVITY_FLAG_MARKER_END, kT0 + 30));  // Its start was never seen.
  first.Complete();
  ActivityBuffer second(*h.tracer);  // The end arrives in a later buffer.
  second.Add(Marker(3, CUPTI_ACTIVITY_FLAG_MARKER_END, kT0 + 500));
  second.Complete();
  REQUIRE(h.tracer->Stop().ok);
  const auto trace = h.Collect();
  const auto events = Flatten(trace);
  REQUIRE(events.size() == 2);  // "attention" is still open.
  const FlatEvent* forward = Find(events, "forward");
  REQUIRE(forward != nullptr);
  CHECK(forward->event.kind() == xdl::proto::DEVICE_EVENT_MARKER);
  CHECK(forward->event.start_ns() == kT0);
  CHECK(forward->event.end_ns() == kT0 + 500);
  CHECK(forward->device == -1);
  CHECK(forward->line == "thread 4242");
  CHECK(StatText(trace, *forward, "domain") == "train");
  const FlatEvent* mark = Find(events, "checkpoint");
  REQUIRE(mark != nullptr);
  CHECK(mark->event.start_ns() == mark->event.end_ns());
  CHECK(h.tracer->parse_counters().unmatched_markers == 1);
}

TEST_CASE("MEMORY2 allocations and frees become memory events (opt-in)", "[cupti]") {
  REQUIRE_LIBCUPTI();
  CuptiTracerOptions options = Harness::Small();
  CHECK(options.memory == false);
  ApplyConfig("memory=1", &options);
  Harness h(options);
  CHECK(h.tracer->ActivityKinds().back() == CUPTI_ACTIVITY_KIND_MEMORY2);
  REQUIRE(h.tracer->Start().ok);
  ActivityBuffer buffer(*h.tracer);
  buffer.Add(External(1, 5))
      .Add(Memory(1, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, kT0, 1 << 20, 0x7000))
      .Add(External(2, 5))
      .Add(Memory(2, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, kT0 + 100, 1 << 20, 0x7000));
  buffer.Complete();
  REQUIRE(h.tracer->Stop().ok);
  const auto trace = h.Collect();
  const auto events = Flatten(trace);
  REQUIRE(events.size() == 2);
  const FlatEvent* alloc = Find(events, "alloc device");
  const FlatEvent* release = Find(events, "free device");
  REQUIRE(alloc != nullptr);
  REQUIRE(release != nullptr);
  for (const FlatEvent* e : {alloc, release}) {
    CHECK(e->event.kind() == xdl::proto::DEVICE_EVENT_MEMORY);
    CHECK(e->device == 1);
    CHECK(e->line == "memory");
    CHECK(e->event.external_id() == 5);
    CHECK(e->event.start_ns() == e->event.end_ns());
    CHECK(StatText(trace, *e, "bytes") == std::to_string(1 << 20));
    CHECK(StatText(trace, *e, "address") == std::to_string(0x7000));
  }
  CHECK(StatText(trace, *alloc, "operation") == "alloc");
  CHECK(StatText(trace, *release, "operation") == "free");
}

TEST_CASE("memcpy kind and host memory kind, kernel launch shape in args", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  CUpti_ActivityMemcpy6 pageable = Memcpy(1, kT0, kT0 + 10, 4096);
  pageable.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  pageable.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  CUpti_ActivityMemcpy6 pinned = Memcpy(2, kT0 + 20, kT0 + 30, 8192);
  pinned.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  pinned.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  pinned.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  CUpti_ActivityKernel10 kernel = Kernel(3, kT0 + 40, kT0 + 50);
  kernel.staticSharedMemory = 1024;
  kernel.dynamicSharedMemory = 512;
  ActivityBuffer buffer(*h.tracer);
  buffer.Add(pageable).Add(pinned).Add(kernel);
  buffer.Complete();
  REQUIRE(h.tracer->Stop().ok);
  const auto trace = h.Collect();
  const auto events = Flatten(trace);
  const FlatEvent* htod = Find(events, "Memcpy HtoD");
  const FlatEvent* dtoh = Find(events, "Memcpy DtoH");
  const FlatEvent* k = Find(events, "gemm_kernel");
  REQUIRE(htod != nullptr);
  REQUIRE(dtoh != nullptr);
  REQUIRE(k != nullptr);
  CHECK(StatText(trace, *htod, "copy_kind") == "HtoD");
  CHECK(StatText(trace, *htod, "src_memory") == "pageable");
  CHECK(StatText(trace, *htod, "dst_memory") == "device");
  CHECK(StatText(trace, *htod, "bytes") == "4096");
  CHECK(StatText(trace, *dtoh, "dst_memory") == "pinned");
  CHECK(StatText(trace, *k, "grid") == "128x1x1");
  CHECK(StatText(trace, *k, "block") == "256x1x1");
  CHECK(StatText(trace, *k, "registers_per_thread") == "32");
  CHECK(StatText(trace, *k, "shared_memory_bytes") == "1536");
}

TEST_CASE("noisy runtime calls are filtered, configurably", "[cupti]") {
  REQUIRE_LIBCUPTI();
  struct Case {
    const char* config;
    size_t kept;
    int64_t filtered;
  };
  for (const Case& c : {Case{"", 1, 2}, Case{"api_filter=", 3, 0},
                        Case{"api_filter=cudaLaunchKernel,cudaFree", 2, 1}}) {
    INFO(c.config);
    CuptiTracerOptions options = Harness::Small();
    ApplyConfig(c.config, &options);
    Harness h(options);
    REQUIRE(h.tracer->Start().ok);
    ActivityBuffer buffer(*h.tracer);
    buffer.Add(Runtime(1, kT0, kT0 + 1, CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020))
        .Add(Runtime(2, kT0 + 2, kT0 + 3, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000))
        .Add(Runtime(3, kT0 + 4, kT0 + 5, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020));
    buffer.Complete();
    REQUIRE(h.tracer->Stop().ok);
    const auto events = Flatten(h.Collect());
    CHECK(events.size() == c.kept);
    CHECK(h.tracer->parse_counters().filtered_api == c.filtered);
    CHECK((Find(events, "cudaLaunchKernel_v7000") != nullptr) ==
          (std::string(c.config).find("cudaLaunchKernel") == std::string::npos));
  }
}

TEST_CASE("correlations split across buffers join in any buffer order", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  SECTION("both buffers before one collect, device buffer first") {
    ActivityBuffer device(*h.tracer);
    ActivityBuffer host(*h.tracer);
    device.Add(Kernel(21, kT0 + 10, kT0 + 20));
    host.Add(External(21, 3)).Add(Runtime(21, kT0, kT0 + 5, 1));
    device.Complete();
    host.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 2);
    for (const auto& e : events) CHECK(e.event.external_id() == 3);
  }
  SECTION("the external record arrives one collect later") {
    ActivityBuffer device(*h.tracer);
    device.Add(Kernel(31, kT0 + 10, kT0 + 20));
    device.Complete();
    CHECK(Flatten(h.Collect()).empty());  // Held back: not joined yet.
    ActivityBuffer host(*h.tracer);
    host.Add(External(31, 4));
    host.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 1);
    CHECK(events[0].event.external_id() == 4);
  }
  SECTION("never joined: held across collects within the bounds, emitted at stop") {
    ActivityBuffer device(*h.tracer);
    device.Add(Kernel(41, kT0 + 10, kT0 + 20));
    device.Complete();
    CHECK(Flatten(h.Collect()).empty());
    CHECK(Flatten(h.Collect()).empty());  // Still held (issue 12: not dropped after one).
    CHECK(h.tracer->held() == 1);
    REQUIRE(h.tracer->Stop().ok);
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 1);
    CHECK(events[0].event.external_id() == 0);
    CHECK(h.tracer->released_unjoined() == 1);
  }
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("each collect while running flushes CUPTI, so events arrive within one interval",
          "[cupti]") {
  REQUIRE_LIBCUPTI();
  for (const bool flush : {true, false}) {
    INFO("flush_on_collect=" << flush);
    CuptiTracerOptions options = Harness::Small();
    ApplyConfig(flush ? "" : "flush_on_collect=0", &options);
    Harness h(options);
    REQUIRE(h.tracer->Start().ok);
    // A buffer CUPTI is still filling: nothing full, nothing completed yet.
    ActivityBuffer filling(*h.tracer);
    filling.Add(External(1, 1)).Add(Kernel(1, kT0, kT0 + 10));
    bool completed = false;
    h.api->on_flush = [&](uint32_t flag) {
      if (flag == 0 && !completed) filling.Complete();  // What FlushAll(0) does in CUPTI.
      completed = true;
    };
    const auto events = Flatten(h.Collect());
    if (flush) {
      CHECK(h.api->flush_flags == std::vector<uint32_t>{0});
      REQUIRE(events.size() == 1);
      CHECK(events[0].event.external_id() == 1);
    } else {
      CHECK(h.api->flush_flags.empty());
      CHECK(events.empty());  // Waits for the buffer to fill, or for stop.
    }
    h.api->flush_flags.clear();
    REQUIRE(h.tracer->Stop().ok);
    CHECK(h.api->flush_flags == std::vector<uint32_t>{CUPTI_ACTIVITY_FLAG_FLUSH_FORCED});
    if (!flush) {
      filling.Complete();  // The forced flush hands it back.
      CHECK(Flatten(h.Collect()).size() == 1);
    }
    h.api->flush_flags.clear();
    h.Collect();  // Stopped: no flush.
    CHECK(h.api->flush_flags.empty());
  }
}

TEST_CASE("flush_period_ms sets CUPTI's periodic flush for the run", "[cupti]") {
  REQUIRE_LIBCUPTI();
  CuptiTracerOptions options = Harness::Small();
  ApplyConfig("flush_period_ms=250", &options);
  Harness h(options);
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.api->flush_periods == std::vector<uint32_t>{250});
  REQUIRE(h.tracer->Stop().ok);
  CHECK(h.api->flush_periods == std::vector<uint32_t>{250, 0});
  Harness off;  // The default leaves CUPTI's period alone.
  REQUIRE(off.tracer->Start().ok);
  REQUIRE(off.tracer->Stop().ok);
  CHECK(off.api->flush_periods.empty());
}

TEST_CASE("an unjoined event is held until its step is known, bounded by time and count",
          "[cupti]") {
  REQUIRE_LIBCUPTI();
  CuptiTracerOptions options = Harness::Small();
  ApplyConfig("max_hold_ms=40;max_held_events=2", &options);
  Harness h(options);
  REQUIRE(h.tracer->Start().ok);
  SECTION("joined three collects later") {
    ActivityBuffer device(*h.tracer);
    device.Add(Kernel(5, kT0, kT0 + 1));
    device.Complete();
    CHECK(Flatten(h.Collect()).empty());
    CHECK(Flatten(h.Collect()).empty());
    ActivityBuffer host(*h.tracer);
    host.Add(External(5, 9));
    host.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 1);
    CHECK(events[0].event.external_id() == 9);
    CHECK(h.tracer->released_unjoined() == 0);
  }
  SECTION("past max_hold_ms: emitted without a step") {
    ActivityBuffer device(*h.tracer);
    device.Add(Kernel(6, kT0, kT0 + 1));
    device.Complete();
    CHECK(Flatten(h.Collect()).empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 1);
    CHECK(events[0].event.external_id() == 0);
    CHECK(h.tracer->released_unjoined() == 1);
    CHECK(h.tracer->held() == 0);
  }
  SECTION("past max_held_events: the oldest go first") {
    ActivityBuffer device(*h.tracer);
    device.Add(Kernel(7, kT0, kT0 + 1)).Add(Kernel(8, kT0 + 2, kT0 + 3));
    device.Add(Kernel(9, kT0 + 4, kT0 + 5));
    device.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 1);
    CHECK(events[0].event.correlation_id() == 7);
    CHECK(h.tracer->held() == 2);
    ActivityBuffer host(*h.tracer);
    host.Add(External(8, 1)).Add(External(9, 1));
    host.Complete();
    const auto joined = Flatten(h.Collect());
    REQUIRE(joined.size() == 2);
    for (const auto& e : joined) CHECK(e.event.external_id() == 1);
  }
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("buffer cap: CUPTI gets nothing at the cap and drops are counted", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;  // 3 buffers of 4 KiB at most.
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.tracer->pool().allocated_bytes() == 4096);  // Preallocated one.
  ActivityBuffer a(*h.tracer), b(*h.tracer), c(*h.tracer), d(*h.tracer);
  CHECK(a.ok());
  CHECK(b.ok());
  CHECK(c.ok());
  CHECK_FALSE(d.ok());  // At the cap.
  CHECK(h.tracer->pool().allocated_bytes() == 3 * 4096);
  h.api->dropped_per_buffer = 5;  // cuptiActivityGetNumDroppedRecords.
  a.Add(Kernel(1, kT0, kT0 + 1)).Complete();
  b.Complete();
  c.Complete();
  const auto trace = h.Collect();
  CHECK(trace.dropped_events() == 3 * 5);  // CUPTI's count, in records.
  CHECK(trace.dropped_buffers() == 1);     // The refused request: its events are unknown.
  CHECK(h.tracer->pool().outstanding() == 0);
  ActivityBuffer e(*h.tracer);  // Reused from the pool, no new memory.
  CHECK(e.ok());
  CHECK(h.tracer->pool().allocated_bytes() == 3 * 4096);
  e.Complete();
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("buffers are parsed as they complete: the cap never waits for a collect", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;  // 3 buffers of 4 KiB at most.
  REQUIRE(h.tracer->Start().ok);
  h.tracer->StepBegin(5);
  constexpr int kBuffers = 40;  // Far more than the cap holds.
  for (int i = 1; i <= kBuffers; ++i) {
    ActivityBuffer buffer(*h.tracer);
    REQUIRE(buffer.ok());
    buffer.Add(External(i, 5)).Add(Kernel(i, kT0 + i * 10, kT0 + i * 10 + 5));
    buffer.Complete();
    // The parse thread hands the buffer back without a collect.
    for (int spins = 0; spins < 50000 && h.tracer->pool().outstanding() != 0; ++spins) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    REQUIRE(h.tracer->pool().outstanding() == 0);
  }
  const auto trace = h.Collect();
  const auto events = Flatten(trace);
  CHECK(events.size() == kBuffers);
  for (const auto& e : events) CHECK(e.event.external_id() == 5);
  CHECK(trace.dropped_events() == 0);
  CHECK(trace.dropped_buffers() == 0);
  CHECK(h.tracer->pool().allocated_bytes() <= 3 * 4096);
  h.tracer->StepEnd(5);
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("a tracer stopped with buffers in flight parses them all at its last collect",
          "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  ActivityBuffer in_flight(*h.tracer);  // Held by "CUPTI" until the forced flush.
  REQUIRE(in_flight.ok());
  in_flight.Add(External(1, 2)).Add(Kernel(1, kT0, kT0 + 5)).Add(Kernel(2, kT0 + 9, kT0 + 12));
  h.api->on_flush = [&](uint32_t flag) {
    if (flag == CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) in_flight.Complete();
  };
  REQUIRE(h.tracer->Stop().ok);
  const auto events = Flatten(h.Collect());
  REQUIRE(events.size() == 2);
  CHECK(h.tracer->pool().outstanding() == 0);
  CHECK(h.tracer->held() == 0);  // Stopped: nothing is held back.
  for (const auto& e : events)
    CHECK(e.event.external_id() == (e.event.correlation_id() == 1 ? 2 : 0));
}

TEST_CASE("the join remembers the last 1 Mi correlation ids across collects", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  ActivityBuffer first(*h.tracer);
  first.Add(External(1, 7)).Add(External(2, 7));
  first.Complete();
  CHECK(Flatten(h.Collect()).empty());
  // A later collect: correlation 1 is still known; 2's slot went to an id 1 Mi newer.
  ActivityBuffer second(*h.tracer);
  second.Add(External((1u << 20) + 2, 8))
      .Add(Kernel(1, kT0, kT0 + 5))
      .Add(Kernel((1u << 20) + 2, kT0 + 10, kT0 + 15))
      .Add(Kernel(2, kT0 + 20, kT0 + 25));
  second.Complete();
  const auto joined = Flatten(h.Collect());
  REQUIRE(joined.size() == 2);
  CHECK(joined[0].event.external_id() == 7);
  CHECK(joined[1].event.external_id() == 8);
  CHECK(h.tracer->held() == 1);  // Correlation 2: forgotten, so held, as if not arrived yet.
  REQUIRE(h.tracer->Stop().ok);
  const auto released = Flatten(h.Collect());
  REQUIRE(released.size() == 1);
  CHECK(released[0].event.external_id() == 0);
}

TEST_CASE("zero and reversed timestamps, unknown kinds, event cap", "[cupti]") {
  REQUIRE_LIBCUPTI();
  CuptiTracerOptions options = Harness::Small();
  options.max_events = 3;
  Harness h(options);
  REQUIRE(h.tracer->Start().ok);
  ActivityBuffer buffer(*h.tracer);
  CUpti_ActivityKernel10 unknown = Kernel(9, kT0, kT0 + 1);
  unknown.kind = static_cast<CUpti_ActivityKind>(9999);
  buffer
      .Add(Kernel(1, 0, kT0))                    // Zero start: dropped.
      .Add(Kernel(2, kT0 + 50, kT0 + 10))        // Reversed: end clamped.
      .Add(Kernel(3, kT0, kT0 + 5, 7, nullptr))  // Unnamed.
      .Add(unknown)                              // libcupti stops the buffer here.
      .Add(Kernel(4, kT0, kT0 + 5));
  buffer.Complete();
  ActivityBuffer more(*h.tracer);
  more.Add(Kernel(5, kT0, kT0 + 1)).Add(Kernel(6, kT0, kT0 + 1)).Add(Kernel(7, kT0, kT0 + 1));
  more.Complete();
  REQUIRE(h.tracer->Stop().ok);  // Stopped: nothing is held back.
  const auto trace = h.Collect();
  const auto events = Flatten(trace);
  REQUIRE(events.size() == 3);  // max_events.
  const FlatEvent* reversed = nullptr;
  for (const auto& e : events) {
    if (e.event.correlation_id() == 2) reversed = &e;
  }
  REQUIRE(reversed != nullptr);
  CHECK(reversed->event.end_ns() == reversed->event.start_ns());
  CHECK(Find(events, "<unnamed kernel>") != nullptr);
  const ParseCounters& counters = h.tracer->parse_counters();
  CHECK(counters.bad_timestamps == 1);
  CHECK(counters.reversed == 1);
  // Dropped: 1 zero timestamp + 2 over the event cap; the buffer whose parse
  // stopped at the unknown kind lost an unknown number of events.
  CHECK(trace.dropped_events() == 1 + 2);
  CHECK(trace.dropped_buffers() == 1);
}

TEST_CASE("start/stop/start: kinds enabled, disabled in reverse, flushed", "[cupti]") {
  REQUIRE_LIBCUPTI();
  CuptiTracerOptions options = Harness::Small();
  options.synchronization = true;
  Harness h(options);
  const std::vector<CUpti_ActivityKind> kinds = h.tracer->ActivityKinds();
  // DEVICE (best effort), 6 always, NVTX markers (default on), synchronization.
  REQUIRE(kinds.size() == 9);
  CHECK(kinds.front() == CUPTI_ACTIVITY_KIND_DEVICE);  // Limits before the kernels.
  CHECK(h.tracer->state() == CuptiTracer::State::kIdle);
  for (int round = 0; round < 3; ++round) {
    h.api->enabled.clear();
    h.api->disabled.clear();
    REQUIRE(h.tracer->Start().ok);
    CHECK(h.tracer->state() == CuptiTracer::State::kRunning);
    CHECK(h.api->enabled == kinds);
    CHECK(h.tracer->Start().ok);  // Already running: no-op.
    CHECK(h.api->enabled.size() == kinds.size());
    const int flushes = h.api->flushes;
    REQUIRE(h.tracer->Stop().ok);
    CHECK(h.tracer->state() == CuptiTracer::State::kIdle);
    CHECK(h.api->flushes == flushes + 1);
    CHECK(h.api->disabled == std::vector<CUpti_ActivityKind>(kinds.rbegin(), kinds.rend()));
    CHECK(h.tracer->Stop().ok);  // Already stopped: no-op.
  }
  // Only one tracer may run per process.
  Harness other;
  REQUIRE(h.tracer->Start().ok);
  const CuptiTracer::Result second = other.tracer->Start();
  CHECK_FALSE(second.ok);
  CHECK(absl::StrContains(second.message, "already running"));
  REQUIRE(h.tracer->Stop().ok);
  CHECK(other.tracer->Start().ok);
  CHECK(other.tracer->Stop().ok);
}

TEST_CASE("a failed start rolls back what it enabled", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  h.api->fail_kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  h.api->fail_result = CUPTI_ERROR_INVALID_PARAMETER;
  const CuptiTracer::Result result = h.tracer->Start();
  CHECK_FALSE(result.ok);
  CHECK(absl::StrContains(result.message, "cuptiActivityEnable(MEMCPY)"));
  CHECK(absl::StrContains(result.message, "CUPTI_ERROR_INVALID_PARAMETER"));
  CHECK(h.tracer->state() == CuptiTracer::State::kIdle);
  REQUIRE_FALSE(h.api->enabled.empty());
  CHECK(h.api->disabled ==
        std::vector<CUpti_ActivityKind>(h.api->enabled.rbegin(), h.api->enabled.rend()));
  // The process-wide slot was released: a retry (now succeeding) starts.
  h.api->fail_kind = CUPTI_ACTIVITY_KIND_INVALID;
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.tracer->state() == CuptiTracer::State::kRunning);
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("a CUPTI that refuses the DEVICE kind traces on without it", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  h.api->fail_kind = CUPTI_ACTIVITY_KIND_DEVICE;
  h.api->fail_result = CUPTI_ERROR_NOT_COMPATIBLE;
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.tracer->state() == CuptiTracer::State::kRunning);
  CHECK(h.api->enabled.size() == h.tracer->ActivityKinds().size() - 1);
  REQUIRE(h.tracer->Stop().ok);
  // What was enabled is disabled; the refused kind is not asked again.
  CHECK(h.api->disabled ==
        std::vector<CUpti_ActivityKind>(h.api->enabled.rbegin(), h.api->enabled.rend()));
}

TEST_CASE("another CUPTI user (subscriber busy) is a status, never a crash", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  h.api->subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  REQUIRE(h.tracer->Start().ok);  // Training goes on.
  CHECK(h.tracer->state() == CuptiTracer::State::kIdle);
  CHECK(h.api->enabled.empty());  // CUPTI left alone: the other user keeps its callbacks.
  h.tracer->StepBegin(1);
  h.tracer->StepEnd(1);
  CHECK(h.api->pushed.empty());
  REQUIRE(h.tracer->Stop().ok);
  const auto busy = h.Collect();
  CHECK(busy.device_size() == 0);
  CHECK(absl::StartsWith(busy.status(), "unavailable: cupti subscriber busy"));
  // The other user went away: the next start takes CUPTI and the status clears.
  h.api->subscribe_result = CUPTI_SUCCESS;
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.tracer->state() == CuptiTracer::State::kRunning);
  CHECK(h.api->subscribed == 1);
  REQUIRE(h.tracer->Stop().ok);
  CHECK(h.api->unsubscribed == 1);
  CHECK(h.Collect().status().empty());
  // A failed enable also gives the subscription back.
  h.api->fail_kind = CUPTI_ACTIVITY_KIND_MEMSET;
  h.api->fail_result = CUPTI_ERROR_INVALID_PARAMETER;
  CHECK_FALSE(h.tracer->Start().ok);
  CHECK(h.api->subscribed == 2);
  CHECK(h.api->unsubscribed == 2);
}

TEST_CASE("launches from other threads get the current step", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.api->enabled_callbacks == CuptiTracer::LaunchCallbacks());
  auto call = [&](CUpti_ApiCallbackSite site, uint64_t* slot) {
    CUpti_CallbackData data;
    std::memset(&data, 0, sizeof(data));
    data.callbackSite = site;
    data.correlationData = slot;
    h.tracer->OnApiCallback(CUPTI_CB_DOMAIN_RUNTIME_API,
                            CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, data);
  };
  // Before any step: nothing to attribute, nothing pushed (and no pop).
  std::thread early([&] {
    uint64_t slot = 99;
    call(CUPTI_API_ENTER, &slot);
    call(CUPTI_API_EXIT, &slot);
  });
  early.join();
  CHECK(h.api->pushed.empty());
  CHECK(h.api->pops == 0);
  h.tracer->StepBegin(7);  // The training thread pushes its own step.
  REQUIRE(h.api->pushed == std::vector<uint64_t>{7});
  const std::thread::id training = std::this_thread::get_id();
  // The training thread's own launches are not pushed twice.
  uint64_t slot = 0;
  call(CUPTI_API_ENTER, &slot);
  call(CUPTI_API_EXIT, &slot);
  CHECK(h.api->pushed.size() == 1);
  // A backward/data-loader thread: its launch carries step 7, push and pop paired.
  std::thread other([&] {
    uint64_t s = 0;
    call(CUPTI_API_ENTER, &s);
    call(CUPTI_API_EXIT, &s);
  });
  other.join();
  REQUIRE(h.api->pushed == (std::vector<uint64_t>{7, 7}));
  CHECK(h.api->pushed_by[1] != training);
  CHECK(h.api->pops == 1);
  CHECK(h.tracer->other_thread_launches() == 1);
  h.tracer->StepEnd(7);
  // CUPTI then writes EXTERNAL_CORRELATION records for that thread's launch:
  // the usual join ties its kernel to step 7.
  ActivityBuffer buffer(*h.tracer);
  buffer.Add(External(70, 7)).Add(Kernel(70, kT0, kT0 + 10));
  buffer.Complete();
  const auto events = Flatten(h.Collect());
  REQUIRE(events.size() == 1);
  CHECK(events[0].event.external_id() == 7);
  REQUIRE(h.tracer->Stop().ok);
  // other_threads=0: no launch callbacks.
  CuptiTracerOptions off = Harness::Small();
  ApplyConfig("other_threads=0", &off);
  Harness h2(off);
  REQUIRE(h2.tracer->Start().ok);
  CHECK(h2.api->enabled_callbacks.empty());
  REQUIRE(h2.tracer->Stop().ok);
}

TEST_CASE("other_threads=0: another thread's launch gets the step begun last before it",
          "[cupti]") {
  REQUIRE_LIBCUPTI();
  CuptiTracerOptions options = Harness::Small();
  ApplyConfig("other_threads=0", &options);
  Harness h(options);
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.api->enabled_callbacks.empty());  // No callback: the join decides.
  constexpr uint32_t kOther = 4242;         // Runtime()'s thread: autograd's, say.
  const uint32_t training = CuptiThreadId();
  REQUIRE(training != kOther);
  constexpr uint32_t kLaunch = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  auto on = [](uint32_t thread, CUpti_ActivityAPI r) {
    r.threadId = thread;
    return r;
  };
  // CPU times around the steps, on the clock of the parsed API records.
  auto tick = [] {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    return internal::WallClockNs();
  };
  const int64_t before_first = tick();
  tick();
  h.tracer->StepBegin(1);
  const int64_t in_step1 = tick();
  h.tracer->StepEnd(1);
  const int64_t between = tick();  // After step 1's end: still step 1 (the last begun).
  tick();
  h.tracer->StepBegin(2);
  const int64_t in_step2 = tick();
  auto step_of = [](const std::vector<FlatEvent>& events, uint64_t correlation,
                    const std::string& line_prefix) -> int64_t {
    for (const auto& e : events) {
      if (e.event.correlation_id() == correlation && absl::StartsWith(e.line, line_prefix))
        return static_cast<int64_t>(e.event.external_id());
    }
    return -1;  // Not emitted.
  };
  SECTION("between two step_begins: the earlier step; before the first: none") {
    ActivityBuffer buffer(*h.tracer);
    buffer.Add(on(kOther, Runtime(101, before_first, before_first + 5, kLaunch)))
        .Add(Kernel(101, in_step2 + 10, in_step2 + 20));
    buffer.Add(on(kOther, Runtime(102, in_step1, in_step1 + 5, kLaunch)))
        .Add(Kernel(102, in_step2 + 30, in_step2 + 40));
    buffer.Add(on(kOther, Runtime(103, between, between + 5, kLaunch)))
        .Add(Memcpy(103, in_step2 + 50, in_step2 + 60, 64));
    buffer.Add(on(kOther, Runtime(104, in_step2, in_step2 + 5, kLaunch)))
        .Add(Kernel(104, in_step2 + 70, in_step2 + 80));
    buffer.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 8);  // Nothing held.
    CHECK(step_of(events, 101, "stream") == 0);
    CHECK(step_of(events, 102, "stream") == 1);
    CHECK(step_of(events, 103, "stream") == 1);
    CHECK(step_of(events, 104, "stream") == 2);
    CHECK(step_of(events, 102, "thread") == 1);  // The call itself too.
    CHECK(h.tracer->held() == 0);
    CHECK(h.tracer->released_unjoined() == 0);
    CHECK(h.tracer->time_rule_events() == 8);
  }
  SECTION("the API record in a later buffer than the kernel: held, then joined") {
    ActivityBuffer device(*h.tracer);
    device.Add(Kernel(201, in_step2 + 10, in_step2 + 20));
    device.Complete();
    CHECK(Flatten(h.Collect()).empty());
    CHECK(h.tracer->held() == 1);
    ActivityBuffer host(*h.tracer);
    host.Add(on(kOther, Runtime(201, in_step1, in_step1 + 5, kLaunch)));
    host.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 2);
    CHECK(step_of(events, 201, "stream") == 1);
    CHECK(h.tracer->held() == 0);
    CHECK(h.tracer->released_unjoined() == 0);
  }
  SECTION("a launch call the API filter leaves out still places its kernel") {
    ActivityBuffer buffer(*h.tracer);
    // cudaGetDevice is filtered by default; it stands in for any filtered call.
    buffer
        .Add(on(kOther,
                Runtime(301, in_step1, in_step1 + 5, CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020)))
        .Add(Kernel(301, in_step2 + 10, in_step2 + 20));
    buffer.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 1);
    CHECK(step_of(events, 301, "stream") == 1);
  }
  SECTION("a training-thread launch still needs its external correlation (rule 1)") {
    ActivityBuffer device(*h.tracer);
    device.Add(on(training, Runtime(401, in_step1, in_step1 + 5, kLaunch)))
        .Add(Kernel(401, in_step2 + 10, in_step2 + 20));
    device.Complete();
    CHECK(Flatten(h.Collect()).empty());  // Both held: no external record yet.
    CHECK(h.tracer->held() == 2);
    ActivityBuffer host(*h.tracer);
    host.Add(External(401, 1));
    host.Complete();
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 2);
    CHECK(step_of(events, 401, "stream") == 1);
    CHECK(h.tracer->time_rule_events() == 0);
  }
  SECTION("the launch never arrives: released without a step at stop, as before") {
    ActivityBuffer device(*h.tracer);
    device.Add(Kernel(501, in_step2 + 10, in_step2 + 20));
    device.Complete();
    CHECK(Flatten(h.Collect()).empty());
    REQUIRE(h.tracer->Stop().ok);
    const auto events = Flatten(h.Collect());
    REQUIRE(events.size() == 1);
    CHECK(events[0].event.external_id() == 0);
    CHECK(h.tracer->released_unjoined() == 1);
  }
  h.tracer->StepEnd(2);
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("other_threads=1 (the default): no time rule, another thread's launch waits", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  h.tracer->StepBegin(1);
  const int64_t in_step1 = internal::WallClockNs() + 1000;
  ActivityBuffer buffer(*h.tracer);
  buffer.Add(Runtime(601, in_step1, in_step1 + 5, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000))
      .Add(Kernel(601, in_step1 + 10, in_step1 + 20));
  buffer.Complete();
  CHECK(Flatten(h.Collect()).empty());  // Waits for the callback's external record.
  CHECK(h.tracer->held() == 2);
  CHECK(h.tracer->time_rule_events() == 0);
  h.tracer->StepEnd(1);
  REQUIRE(h.tracer->Stop().ok);
}

TEST_CASE("insufficient privileges become a clear message", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  h.api->fail_kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  h.api->fail_result = CUPTI_ERROR_INSUFFICIENT_PRIVILEGES;
  const CuptiTracer::Result result = h.tracer->Start();
  CHECK_FALSE(result.ok);
  CHECK(result.permission_denied);
  CHECK(absl::StrContains(result.message, "NVreg_RestrictProfilingToAdminUsers=0"));
  CHECK(h.tracer->state() == CuptiTracer::State::kIdle);
}

TEST_CASE("no driver or GPU: unavailable, start/stop no-ops, collect is empty", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  h.api->fail_kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  h.api->fail_result = CUPTI_ERROR_UNKNOWN;
  REQUIRE(h.tracer->Start().ok);
  CHECK(h.tracer->state() == CuptiTracer::State::kUnavailable);
  CHECK(absl::StrContains(h.tracer->unavailable_reason(), "no CUDA driver or GPU"));
  for (int i = 0; i < 5; ++i) {
    CHECK(h.tracer->Start().ok);
    h.tracer->StepBegin(1);
    h.tracer->StepEnd(1);
    CHECK(h.tracer->Stop().ok);
  }
  CHECK(h.api->pushed.empty());
  const auto trace = h.Collect();
  CHECK(trace.device_size() == 0);
  CHECK(absl::StartsWith(trace.status(), "unavailable: no CUDA driver or GPU"));
}

TEST_CASE("dlopen failure: a missing libcupti means unavailable", "[cupti]") {
  CuptiTracerOptions options;
  options.libraries = {"/nonexistent/libcupti.so.99"};
  CuptiTracer tracer(options);
  REQUIRE(tracer.Start().ok);
  CHECK(tracer.state() == CuptiTracer::State::kUnavailable);
  CHECK(absl::StrContains(tracer.unavailable_reason(), "/nonexistent/libcupti.so.99"));
  CHECK(tracer.Stop().ok);
  xdl::proto::DeviceTrace trace;
  REQUIRE(trace.ParseFromString(tracer.Collect()));
  CHECK(trace.device_size() == 0);
  CHECK(absl::StrContains(trace.status(), "libcupti could not be loaded"));
}

TEST_CASE("1000 start/stop cycles with buffers keep memory bounded", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(h.tracer->Start().ok);
    h.tracer->StepBegin(i + 1);
    ActivityBuffer buffer(*h.tracer);
    REQUIRE(buffer.ok());
    buffer.Add(External(i + 1, i + 1)).Add(Kernel(i + 1, kT0 + i, kT0 + i + 1));
    buffer.Complete();
    h.tracer->StepEnd(i + 1);
    REQUIRE(h.tracer->Stop().ok);
    REQUIRE(Flatten(h.Collect()).size() == 1);
  }
  CHECK(h.tracer->pool().allocated_bytes() <= 3 * 4096);
  CHECK(h.tracer->pool().outstanding() == 0);
}

TEST_CASE("CUPTI's threads complete buffers while the training thread collects", "[cupti]") {
  REQUIRE_LIBCUPTI();
  Harness h;
  REQUIRE(h.tracer->Start().ok);
  constexpr int kBuffers = 300;
  std::atomic<bool> done{false};
  std::thread cupti_thread([&] {
    for (int i = 1; i <= kBuffers; ++i) {
      // At the cap the request is refused; CUPTI would drop, here we retry.
      for (int attempt = 0; attempt < 1000000; ++attempt) {
        ActivityBuffer buffer(*h.tracer);
        if (!buffer.ok()) {
          std::this_thread::yield();
          continue;
        }
        buffer.Add(External(i, i)).Add(Kernel(i, kT0 + i, kT0 + i + 1));
        buffer.Complete();
        break;
      }
    }
    done = true;
  });
  size_t events = 0;
  for (int spins = 0; spins < 10000000 && !(done.load() && events == kBuffers); ++spins) {
    events += Flatten(h.Collect()).size();
  }
  cupti_thread.join();
  REQUIRE(h.tracer->Stop().ok);
  events += Flatten(h.Collect()).size();
  CHECK(events == kBuffers);
  CHECK(h.tracer->pool().outstanding() == 0);
}

TEST_CASE("the real libcupti here: start reports unavailable or runs", "[cupti]") {
  REQUIRE_LIBCUPTI();
  CuptiTracer tracer(CuptiTracerOptions{});
  const CuptiTracer::Result result = tracer.Start();
  INFO(result.message);
  if (tracer.state() == CuptiTracer::State::kRunning) {
    CHECK(tracer.Stop().ok);
  } else if (result.ok) {
    CHECK(tracer.state() == CuptiTracer::State::kUnavailable);
    std::printf("cupti here: unavailable: %s\n", tracer.unavailable_reason().c_str());
    CHECK_FALSE(tracer.unavailable_reason().empty());
  } else {
    CHECK(result.permission_denied);  // The only other honest outcome.
  }
}

TEST_CASE("the cupti plugin through the C ABI on this machine", "[cupti]") {
  absl::StatusOr<std::unique_ptr<internal::DeviceTracerSet>> set =
      internal::DeviceTracerSet::Create({"cupti"});
  REQUIRE(set.ok());
  REQUIRE((*set)->Start().ok());
  (*set)->StepBegin(1);
  (*set)->StepEnd(1);
  REQUIRE((*set)->Stop().ok());
  REQUIRE((*set)->Collect().ok());
  const std::string summary = (*set)->StatusSummary();
  INFO(summary);
  CHECK(absl::StartsWith(summary, "cupti: "));
  std::printf("cupti plugin status: %s\n", summary.c_str());
}

TEST_CASE("the cupti plugin refuses options with a struct_size too small", "[cupti]") {
  absl::StatusOr<std::unique_ptr<internal::PluginLibrary>> library =
      internal::PluginLibrary::Load(XDL_TRACE_CUPTI_PLUGIN);
  REQUIRE(library.ok());
  const XdlTracePluginRegistration& r = (*library)->registration();
  XdlTraceProfilerOptions options{};
  options.struct_size = offsetof(XdlTraceProfilerOptions, config);  // An older, shorter struct.
  options.config = "";
  internal::PluginErrorBuffer error;
  XdlTraceProfiler* profiler = reinterpret_cast<XdlTraceProfiler*>(&options);  // Must be reset.
  CHECK(r.create(&options, &profiler, error.get()) == XDL_TRACE_PLUGIN_INVALID_ARGUMENT);
  CHECK(profiler == nullptr);
  INFO(error.message());
  CHECK(absl::StrContains(error.message(), "options struct_size 24, need at least 32"));
  options.struct_size = sizeof(options);
  REQUIRE(r.create(&options, &profiler, error.get()) == XDL_TRACE_PLUGIN_OK);
  r.destroy(profiler);
}

TEST_CASE("GPU: kernels launched under a running tracer are collected", "[cupti][gpu]") {
  CuptiTracer tracer(CuptiTracerOptions{});
  tracer.Start();
  if (tracer.state() != CuptiTracer::State::kRunning) {
    WARN("SKIPPED: no GPU (" << tracer.unavailable_reason() << ")");
    return;
  }
  // With a GPU, examples/cuda runs real kernels under the plugin; here we
  // only check the lifecycle against the real driver.
  CHECK(tracer.Stop().ok);
  xdl::proto::DeviceTrace trace;
  REQUIRE(trace.ParseFromString(tracer.Collect()));
  CHECK(trace.status().empty());
}

}  // namespace cupti
}  // namespace xdl_trace
#else
TEST_CASE("CUPTI tracer tests need the CUDA toolkit's CUPTI headers", "[cupti]") {
  WARN("SKIPPED: CUPTI headers not found at build time; the cupti plugin was not built");
}
#endif
