// TensorFlow pluggable-profiler plugins: the XSpace conversion, the loader, struct_size rules,
// errors.
#include "plugin/tf_profiler_plugin.h"

#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/clock.h"
#include "device_trace.pb.h"
#include "plugin/device_tracer_set.h"
#include "plugin/plugin_loader.h"
#include "plugin/xspace_to_device_trace.h"
#include "xplane.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using xdl::proto::DeviceEvent;
using xdl::proto::DeviceTrace;

// A flat view of a converted event: name, kind, stats by name.
struct Flat {
  std::string name;
  int kind = 0;
  int64_t start_ns = 0, end_ns = 0;
  uint64_t correlation_id = 0, external_id = 0;
  int32_t device = 0;
  int64_t line = 0;
  std::string line_name;
  std::map<std::string, std::string> stats;  // Values as text.
};

std::vector<Flat> Flatten(const DeviceTrace& trace) {
  std::vector<Flat> out;
  for (const auto& device : trace.device()) {
    for (const auto& line : device.line()) {
      for (const DeviceEvent& e : line.event()) {
        Flat f;
        f.name = trace.name(e.name_index());
        f.kind = e.kind();
        f.start_ns = e.start_ns();
        f.end_ns = e.end_ns();
        f.correlation_id = e.correlation_id();
        f.external_id = e.external_id();
        f.device = device.id();
        f.line = line.id();
        f.line_name = line.name();
        for (const auto& s : e.stat()) {
          std::string v;
          switch (s.value_case()) {
            case xdl::proto::DeviceStat::kInt64Value:
              v = std::to_string(s.int64_value());
              break;
            case xdl::proto::DeviceStat::kUint64Value:
              v = std::to_string(s.uint64_value());
              break;
            case xdl::proto::DeviceStat::kDoubleValue:
              v = std::to_string(s.double_value());
              break;
            case xdl::proto::DeviceStat::kStrValue:
              v = s.str_value();
              break;
            default:
              break;
          }
          f.stats[trace.name(s.name_index())] = v;
        }
        out.push_back(std::move(f));
      }
    }
  }
  return out;
}

const Flat& Find(const std::vector<Flat>& events, const std::string& name) {
  for (const Flat& f : events) {
    if (f.name == name) return f;
  }
  FAIL("no event " << name);
  static Flat none;
  return none;
}

void AddMetadata(xdl::xplane::XPlane* plane, int64_t id, const std::string& name) {
  auto& m = (*plane->mutable_event_metadata())[id];
  m.set_id(id);
  m.set_name(name);
}
void AddStatMetadata(xdl::xplane::XPlane* plane, int64_t id, const std::string& name) {
  auto& m = (*plane->mutable_stat_metadata())[id];
  m.set_id(id);
  m.set_name(name);
}
xdl::xplane::XEvent* AddEvent(xdl::xplane::XLine* line, int64_t metadata, int64_t offset_ps,
                              int64_t duration_ps) {
  xdl::xplane::XEvent* e = line->add_events();
  e->set_metadata_id(metadata);
  e->set_offset_ps(offset_ps);
  e->set_duration_ps(duration_ps);
  return e;
}
void AddStr(xdl::xplane::XEvent* e, int64_t stat, const std::string& value) {
  auto* s = e->add_stats();
  s->set_metadata_id(stat);
  s->set_str_value(value);
}
void AddU64(xdl::xplane::XEvent* e, int64_t stat, uint64_t value) {
  auto* s = e->add_stats();
  s->set_metadata_id(stat);
  s->set_uint64_value(value);
}

// A GPU plane (kernel, memcpy, memset, alloc/free, an aggregated event) and a
// host plane whose launch call correlates with the kernel.
xdl::xplane::XSpace SampleSpace(int64_t t0) {
  xdl::xplane::XSpace space;
  xdl::xplane::XPlane* gpu = space.add_planes();
  gpu->set_id(5);
  gpu->set_name("/device:GPU:3");
  enum { kKernel = 1, kCopy, kSet, kAlloc, kFree, kAggregate, kConst };
  AddMetadata(gpu, kKernel, "gemm_kernel");
  AddMetadata(gpu, kCopy, "MemcpyD2H");
  AddMetadata(gpu, kSet, "Memset");
  AddMetadata(gpu, kAlloc, "MemoryAlloc");
  AddMetadata(gpu, kFree, "MemoryFree");
  AddMetadata(gpu, kAggregate, "aggregated");
  AddMetadata(gpu, kConst, "with_metadata_stats");
  (*gpu->mutable_event_metadata())[kConst].set_display_name("shown name");
  enum {
    kCorr = 10,
    kKernelDetails,
    kMemcpyDetails,
    kMemsetDetails,
    kMemalloc,
    kRef,
    kBlob,
    kInterned,
    kDepth
  };
  AddStatMetadata(gpu, kCorr, "correlation_id");
  AddStatMetadata(gpu, kKernelDetails, "kernel_details");
  AddStatMetadata(gpu, kMemcpyDetails, "memcpy_details");
  AddStatMetadata(gpu, kMemsetDetails, "memset_details");
  AddStatMetadata(gpu, kMemalloc, "memalloc_details");
  AddStatMetadata(gpu, kRef, "tf_op");
  AddStatMetadata(gpu, kBlob, "blob");
  AddStatMetadata(gpu, kInterned, "matmul:MatMul");
  AddStatMetadata(gpu, kDepth, "depth");
  {
    auto* constant = (*gpu->mutable_event_metadata())[kConst].add_stats();
    constant->set_metadata_id(kDepth);
    constant->set_int64_value(3);
  }
  xdl::xplane::XLine* stream = gpu->add_lines();
  stream->set_id(7);
  stream->set_name("Stream #7");
  stream->set_display_name("Stream #7(compute)");
  stream->set_timestamp_ns(t0);
  xdl::xplane::XEvent* kernel = AddEvent(stream, kKernel, 1'500'400, 2'000'900);
  AddU64(kernel, kCorr, 77);
  AddStr(kernel, kKernelDetails,
         "regs:40 static_shared:2048 dynamic_shared:512 grid:64,2,1 block:256,1,1 occ_pct:50");
  auto* ref = kernel->add_stats();
  ref->set_metadata_id(kRef);
  ref->set_ref_value(kInterned);
  auto* blob = kernel->add_stats();
  blob->set_metadata_id(kBlob);
  blob->set_bytes_value(std::string("\x01\xff", 2));
  AddStr(AddEvent(stream, kCopy, 5'000'000, 1'000'000), kMemcpyDetails,
         "kind_src:device kind_dst:pinned size:65536 dest:0 async:1");
  AddStr(AddEvent(stream, kSet, 7'000'000, 1'000), kMemsetDetails, "num_bytes:128 kind:device");
  AddStr(AddEvent(stream, kAlloc, 9'000'000, 0), kMemalloc, "num_bytes:1048576");
  AddEvent(stream, kFree, 9'500'000, 0);
  AddEvent(stream, kConst, 9'600'000, 1'000);
  xdl::xplane::XEvent* aggregated = stream->add_events();
  aggregated->set_metadata_id(kAggregate);
  aggregated->set_num_occurrences(12);
  xdl::xplane::XPlane* host = space.add_planes();
  host->set_name("/host:CUPTI");
  AddMetadata(host, 1, "cuLaunchKernel");
  AddStatMetadata(host, 1, "correlation_id");
  xdl::xplane::XLine* thread = host->add_lines();
  thread->set_id(4242);
  thread->set_name("CUPTI thread 4242");
  thread->set_timestamp_ns(t0);
  AddU64(AddEvent(thread, 1, 100'000, 200'000), 1, 77);
  // An empty plane contributes no device.
  space.add_planes()->set_name("/device:GPU:9");
  return space;
}

}  // namespace

TEST_CASE("XSpace conversion: planes, lines, kinds, times and stats", "[plugin][tf]") {
  const int64_t t0 = 1'700'000'000'000'000'000;
  DeviceTrace trace;
  trace.add_name("");
  const XSpaceConversionCounts counts = ConvertXSpace(SampleSpace(t0), nullptr, &trace);
  CHECK(counts.events == 7);
  CHECK(counts.aggregated_events_skipped == 1);
  CHECK(counts.bytes_stats_skipped == 1);
  REQUIRE(trace.device_size() == 2);  // The empty GPU 9 plane is left out.
  CHECK(trace.device(0).id() == 3);   // "/device:GPU:3", not the plane id 5.
  CHECK(trace.device(0).name() == "/device:GPU:3");
  CHECK(trace.device(1).id() == -1);  // A host plane: the API pseudo device.
  CHECK(trace.device(0).line(0).name() == "Stream #7(compute)");  // display_name wins.
  CHECK(trace.status().empty());
  const std::vector<Flat> events = Flatten(trace);

  const Flat& kernel = Find(events, "gemm_kernel");
  CHECK(kernel.kind == xdl::proto::DEVICE_EVENT_KERNEL);
  CHECK(kernel.device == 3);
  CHECK(kernel.line == 7);
  CHECK(kernel.start_ns == t0 + 1500);               // 1'500'400 ps rounded down.
  CHECK(kernel.end_ns == t0 + 3501);                 // (1'500'400 + 2'000'900) ps = 3'501'300 ps.
  CHECK(kernel.correlation_id == 77);                // The stat becomes the field...
  CHECK(kernel.stats.count("correlation_id") == 0);  // ...not a stat.
  CHECK(kernel.stats.at("grid") == "64x2x1");
  CHECK(kernel.stats.at("block") == "256x1x1");
  CHECK(kernel.stats.at("registers_per_thread") == "40");
  CHECK(kernel.stats.at("shared_memory_bytes") == "2560");
  CHECK(absl::StartsWith(kernel.stats.at("kernel_details"), "regs:40"));  // Kept as well.
  CHECK(kernel.stats.at("tf_op") == "matmul:MatMul");  // ref_value: the referenced name.
  CHECK(kernel.stats.count("blob") == 0);              // bytes_value: left out, counted.

  const Flat& copy = Find(events, "MemcpyD2H");
  CHECK(copy.kind == xdl::proto::DEVICE_EVENT_MEMCPY);
  CHECK(copy.stats.at("bytes") == "65536");
  CHECK(copy.stats.at("src_memory") == "device");
  CHECK(copy.stats.at("dst_memory") == "pinned");
  const Flat& set = Find(events, "Memset");
  CHECK(set.kind == xdl::proto::DEVICE_EVENT_MEMSET);
  CHECK(set.stats.at("bytes") == "128");
  const Flat& alloc = Find(events, "MemoryAlloc");
  CHECK(alloc.kind == xdl::proto::DEVICE_EVENT_MEMORY);
  CHECK(alloc.stats.at("operation") == "alloc");
  CHECK(alloc.stats.at("bytes") == "1048576");
  const Flat& release = Find(events, "MemoryFree");
  CHECK(release.kind == xdl::proto::DEVICE_EVENT_MEMORY);
  CHECK(release.stats.at("operation") == "free");
  const Flat& shown = Find(events, "shown name");  // display_name, metadata's stats.
  CHECK(shown.kind == xdl::proto::DEVICE_EVENT_KERNEL);
  CHECK(shown.stats.at("depth") == "3");

  const Flat& launch = Find(events, "cuLaunchKernel");
  CHECK(launch.kind == xdl::proto::DEVICE_EVENT_RUNTIME_API);
  CHECK(launch.device == -1);
  CHECK(launch.correlation_id == 77);
  for (const Flat& f : events) CHECK(f.external_id == 0);  // No steps given.
}

TEST_CASE("XSpace conversion: steps by launch correlation, else by time", "[plugin][tf]") {
  const int64_t t0 = 1'700'000'000'000'000'000;
  // Step 11 begins at t0, step 12 at t0 + 1 us: the launch (t0 + 100 ns) is in
  // step 11, so is its kernel (correlation 77) although it starts in step 12;
  // the other device events start after t0 + 1 us: step 12 by time.
  auto step_at = [t0](int64_t time_ns) -> uint64_t {
    if (time_ns < t0) return 0;
    return time_ns < t0 + 1000 ? 11 : 12;
  };
  DeviceTrace trace;
  trace.add_name("");
  ConvertXSpace(SampleSpace(t0), step_at, &trace);
  const std::vector<Flat> events = Flatten(trace);
  CHECK(Find(events, "cuLaunchKernel").external_id == 11);
  CHECK(Find(events, "gemm_kernel").start_ns > t0 + 1000);
  CHECK(Find(events, "gemm_kernel").external_id == 11);
  CHECK(Find(events, "MemcpyD2H").external_id == 12);
  CHECK(Find(events, "Memset").external_id == 12);
}

TEST_CASE("XSpace conversion: the plugin's errors become the trace status", "[plugin][tf]") {
  xdl::xplane::XSpace space;
  space.add_errors("device lost");
  space.add_errors("buffer overflow");
  space.add_warnings("not shown");
  DeviceTrace trace;
  trace.add_name("");
  CHECK(ConvertXSpace(space, nullptr, &trace).events == 0);
  CHECK(trace.status() == "plugin reported: device lost; buffer overflow");
}

TEST_CASE("TF_Code names are TensorFlow's", "[plugin][tf]") {
  CHECK(TfCodeName(TF_OK) == "OK");
  CHECK(TfCodeName(TF_FAILED_PRECONDITION) == "FAILED_PRECONDITION");
  CHECK(TfCodeName(TF_UNAUTHENTICATED) == "UNAUTHENTICATED");
  CHECK(TfCodeName(static_cast<TF_Code>(99)) == "code 99");
  CHECK(static_cast<int>(TF_UNAUTHENTICATED) == 16);
  CHECK(static_cast<int>(TF_DATA_LOSS) == 15);
}

#ifdef XDL_TRACE_TEST_PLUGIN_DIR
namespace {

std::string TfPlugin(const std::string& name) {
  return std::string(XDL_TRACE_TEST_PLUGIN_DIR) + "/" + PluginFileName(name);
}

// XdlFakeTfDestroyCount(which) of a loaded fake plugin.
int DestroyCount(const std::string& path, int which) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto count = reinterpret_cast<int (*)(int)>(::dlsym(handle, "XdlFakeTfDestroyCount"));
  REQUIRE(count != nullptr);
  const int n = count(which);
  ::dlclose(handle);
  return n;
}

std::vector<DeviceTrace> Parse(const std::vector<std::string>& serialized) {
  std::vector<DeviceTrace> traces;
  for (const std::string& bytes : serialized) {
    traces.emplace_back();
    REQUIRE(traces.back().ParseFromString(bytes));
  }
  return traces;
}

// Runs `steps` steps through a DeviceTracerSet over `path`, collecting at each.
std::vector<Flat> TraceSteps(const std::string& path, uint64_t steps, DeviceTracerSet** keep,
                             std::unique_ptr<DeviceTracerSet>* owner) {
  absl::StatusOr<std::unique_ptr<DeviceTracerSet>> set = DeviceTracerSet::Create({path});
  INFO(set.status().ToString());
  REQUIRE(set.ok());
  REQUIRE((*set)->Start().ok());
  for (uint64_t step = 1; step <= steps; ++step) {
    (*set)->StepBegin(step);
    (*set)->StepEnd(step);
    REQUIRE((*set)->Collect().ok());
  }
  REQUIRE((*set)->Stop().ok());
  REQUIRE((*set)->Collect().ok());
  std::vector<Flat> events;
  for (const DeviceTrace& trace : Parse((*set)->TakePending())) {
    CHECK(trace.tracer() == "fake_tf");
    for (Flat& f : Flatten(trace)) events.push_back(std::move(f));
  }
  *keep = set->get();
  *owner = std::move(*set);
  return events;
}

}  // namespace

TEST_CASE("a TF_InitProfiler plugin with TF_SetStatus undefined loads as a device tracer",
          "[plugin][tf]") {
  const std::string path = TfPlugin("fake_tf");
  absl::StatusOr<std::unique_ptr<PluginLibrary>> library = PluginLibrary::Load(path);
  INFO(library.status().ToString());
  REQUIRE(library.ok());
  CHECK((*library)->is_tensorflow());
  CHECK((*library)->profiler_type() == "fake_tf");
  // The status functions are in the global scope now, as the plugin bound them.
  CHECK(::dlsym(RTLD_DEFAULT, "TF_SetStatus") != nullptr);
  // The registration's create cannot know the plugin: CreateProfiler does.
  XdlTraceProfiler* profiler = nullptr;
  PluginErrorBuffer error;
  XdlTraceProfilerOptions options{};
  options.struct_size = sizeof(options);
  options.config = "";
  CHECK((*library)->registration().create(&options, &profiler, error.get()) != 0);
  REQUIRE((*library)->CreateProfiler(&options, &profiler, error.get()) == 0);
  const XdlTracePluginRegistration& r = (*library)->registration();
  r.step_begin(profiler, 5, error.get());  // Before start: every event is in step 5.
  REQUIRE(r.start(profiler, error.get()) == 0);
  size_t size = 0;
  REQUIRE(r.collect(profiler, nullptr, &size, error.get()) == 0);
  REQUIRE(size > 0);
  std::string bytes(size, '\0');
  // Too small a buffer is refused and keeps the snapshot.
  size_t small = size - 1;
  CHECK(r.collect(profiler, reinterpret_cast<uint8_t*>(bytes.data()), &small, error.get()) ==
        XDL_TRACE_PLUGIN_INVALID_ARGUMENT);
  REQUIRE(r.collect(profiler, reinterpret_cast<uint8_t*>(bytes.data()), &size, error.get()) == 0);
  DeviceTrace trace;
  REQUIRE(trace.ParseFromString(bytes));
  const std::vector<Flat> events = Flatten(trace);
  REQUIRE(events.size() == 6);  // 2 kernels + 1 memcpy on the GPU, 3 API calls.
  int kernels = 0, copies = 0, calls = 0;
  for (const Flat& f : events) {
    kernels += f.kind == xdl::proto::DEVICE_EVENT_KERNEL;
    copies += f.kind == xdl::proto::DEVICE_EVENT_MEMCPY;
    calls += f.kind == xdl::proto::DEVICE_EVENT_RUNTIME_API;
    CHECK(f.correlation_id != 0);
    CHECK(f.external_id == 5);  // All after step 5 began.
    CHECK(f.end_ns >= f.start_ns);
  }
  CHECK(kernels == 2);
  CHECK(copies == 1);
  CHECK(calls == 3);
  CHECK(Find(events, "MemcpyH2D").stats.at("bytes") == "4096");
  CHECK(Find(events, "MemcpyH2D").line_name == "Stream #8(MemcpyH2D)");
  CHECK(Find(events, "fake_tf_kernel").stats.at("grid") == "4x2x1");
  REQUIRE(r.stop(profiler, error.get()) == 0);
  r.destroy(profiler);
  CHECK(DestroyCount(path, 0) == 0);
  library->reset();  // Runs the plugin's destroy functions (its code stays mapped).
  CHECK(DestroyCount(path, 0) == 1);
  CHECK(DestroyCount(path, 1) == 1);
}

TEST_CASE("a TF plugin's events reach the pending traces, attributed to their steps",
          "[plugin][tf]") {
  DeviceTracerSet* set = nullptr;
  std::unique_ptr<DeviceTracerSet> owner;
  const std::vector<Flat> events = TraceSteps(TfPlugin("fake_tf"), 4, &set, &owner);
  CHECK(set->StatusSummary() == "fake_tf: ok");
  // Start's collect, one per step, the final one: 6 events each.
  CHECK(events.size() == 6 * 6);
  CHECK(set->events_collected() == 36);
  // Each step has events; a device event is in the step of the call that launched it.
  std::map<uint64_t, int> per_step;
  std::map<uint64_t, uint64_t> launch_step;
  for (const Flat& f : events) {
    ++per_step[f.external_id];
    CHECK(f.external_id <= 4);
    if (f.device == -1) launch_step[f.correlation_id] = f.external_id;
  }
  for (uint64_t step = 1; step <= 4; ++step) CHECK(per_step[step] > 0);
  int device_events = 0;
  for (const Flat& f : events) {
    if (f.device == -1) continue;
    ++device_events;
    REQUIRE(launch_step.count(f.correlation_id) == 1);
    CHECK(f.external_id == launch_step[f.correlation_id]);
  }
  CHECK(device_events == 3 * 6);
}

TEST_CASE("an older TF plugin (smaller struct_size) loads, its absent destroy fn is never called",
          "[plugin][tf]") {
  const std::string path = TfPlugin("fake_tf_older");
  {
    absl::StatusOr<std::unique_ptr<PluginLibrary>> library = PluginLibrary::Load(path);
    INFO(library.status().ToString());
    REQUIRE(library.ok());
    CHECK((*library)->profiler_type() == "fake_tf");
  }
  CHECK(DestroyCount(path, 0) == 1);  // destroy_profiler: within its struct_size.
  CHECK(DestroyCount(path, 1) == 0);  // destroy_profiler_fns: past it, never called.
  DeviceTracerSet* set = nullptr;
  std::unique_ptr<DeviceTracerSet> owner;
  CHECK(TraceSteps(path, 2, &set, &owner).size() == 6 * 4);
}

TEST_CASE("a newer TF plugin (larger struct_size, trailing fields written) loads and runs",
          "[plugin][tf]") {
  const std::string path = TfPlugin("fake_tf_newer");
  DeviceTracerSet* set = nullptr;
  std::unique_ptr<DeviceTracerSet> owner;
  CHECK(TraceSteps(path, 2, &set, &owner).size() == 6 * 4);
  CHECK(set->StatusSummary() == "fake_tf: ok");
}

TEST_CASE("a failing TF_InitProfiler is refused naming the plugin and TensorFlow's message",
          "[plugin][tf]") {
  const std::string path = TfPlugin("fake_tf_init_fails");
  absl::StatusOr<std::unique_ptr<DeviceTracerSet>> set = DeviceTracerSet::Create({path});
  REQUIRE_FALSE(set.ok());
  const std::string message(set.status().message());
  INFO(message);
  CHECK(absl::StrContains(message, path));
  CHECK(absl::StrContains(message, "TF_InitProfiler failed: FAILED_PRECONDITION"));
  CHECK(absl::StrContains(message, "fake_tf: no fake device present (init fails)"));
}

TEST_CASE("a malformed XSpace is an error in the status and tracing goes on", "[plugin][tf]") {
  const std::string path = TfPlugin("fake_tf_malformed");
  absl::StatusOr<std::unique_ptr<DeviceTracerSet>> set = DeviceTracerSet::Create({path});
  REQUIRE(set.ok());
  REQUIRE((*set)->Start().ok());
  for (uint64_t step = 1; step <= 3; ++step) {
    (*set)->StepBegin(step);
    (*set)->StepEnd(step);
    CHECK((*set)->Collect().ok());
  }
  REQUIRE((*set)->Stop().ok());
  const std::vector<DeviceTracerStatus> statuses = (*set)->Statuses();
  REQUIRE(statuses.size() == 1);
  CHECK(statuses[0].state == DeviceTracerState::kFailed);
  INFO(statuses[0].message);
  CHECK(absl::StrContains(statuses[0].message, path));
  CHECK(absl::StrContains(statuses[0].message, "not a serialized XSpace"));
  CHECK((*set)->buffers_dropped() == 4);  // Start's collect and three steps: one lost each.
  CHECK((*set)->events_collected() == 0);
}

TEST_CASE("a TF plugin whose start fails is left out with TensorFlow's code and message",
          "[plugin][tf]") {
  const std::string path = TfPlugin("fake_tf_start_fails");
  absl::StatusOr<std::unique_ptr<DeviceTracerSet>> set = DeviceTracerSet::Create({path});
  REQUIRE(set.ok());
  REQUIRE((*set)->Start().ok());  // Training goes on.
  (*set)->StepBegin(1);
  (*set)->StepEnd(1);
  CHECK((*set)->Collect().ok());
  const std::vector<DeviceTracerStatus> statuses = (*set)->Statuses();
  REQUIRE(statuses.size() == 1);
  CHECK(statuses[0].state == DeviceTracerState::kFailed);
  CHECK(statuses[0].message ==
        "start failed (3): fake_tf: start: PERMISSION_DENIED: fake_tf: no profiling rights "
        "(start fails)");
}

TEST_CASE("an XSpace above the size cap is refused and counted, not allocated", "[plugin][tf]") {
  absl::StatusOr<std::unique_ptr<PluginLibrary>> library = PluginLibrary::Load(TfPlugin("fake_tf"));
  REQUIRE(library.ok());
  XdlTraceProfiler* profiler = nullptr;
  PluginErrorBuffer error;
  XdlTraceProfilerOptions options{};
  options.struct_size = sizeof(options);
  options.max_buffer_bytes = 64;  // A 256-byte cap: the fake's XSpace is larger.
  options.config = "";
  REQUIRE((*library)->CreateProfiler(&options, &profiler, error.get()) == 0);
  const XdlTracePluginRegistration& r = (*library)->registration();
  REQUIRE(r.start(profiler, error.get()) == 0);
  size_t size = 0;
  REQUIRE(r.collect(profiler, nullptr, &size, error.get()) == 0);
  std::string bytes(size, '\0');
  REQUIRE(r.collect(profiler, reinterpret_cast<uint8_t*>(bytes.data()), &size, error.get()) == 0);
  DeviceTrace trace;
  REQUIRE(trace.ParseFromString(bytes));
  CHECK(Flatten(trace).empty());
  CHECK(trace.dropped_buffers() == 1);
  CHECK(absl::StrContains(trace.status(), "above the cap of 256"));
  r.destroy(profiler);
  // Options too small for the fields the adapter reads are refused.
  options.struct_size = 8;
  CHECK((*library)->CreateProfiler(&options, &profiler, error.get()) ==
        XDL_TRACE_PLUGIN_INVALID_ARGUMENT);
  CHECK(absl::StrContains(error.message(), "options struct_size 8"));
}

TEST_CASE("a library with neither entry point names both", "[plugin][tf]") {
  absl::StatusOr<std::unique_ptr<PluginLibrary>> library =
      PluginLibrary::Load(TfPlugin("no_symbol"));
  REQUIRE_FALSE(library.ok());
  const std::string message(library.status().message());
  CHECK(absl::StrContains(message, "no symbol XdlTracePluginInit"));
  CHECK(absl::StrContains(message, "TF_InitProfiler"));
}
#endif  // XDL_TRACE_TEST_PLUGIN_DIR

}  // namespace internal
}  // namespace xdl_trace
