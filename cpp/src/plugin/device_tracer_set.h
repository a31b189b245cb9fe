// Runs the configured device-tracer plugins: start/stop, step markers, bounded collection.
#ifndef XDL_TRACE_PLUGIN_DEVICE_TRACER_SET_H_
#define XDL_TRACE_PLUGIN_DEVICE_TRACER_SET_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "device_trace.pb.h"
#include "plugin/collect_pages.h"
#include "plugin/plugin_loader.h"
#include "xdl_trace/stats.h"

namespace xdl_trace {
namespace internal {

// The size bounds a collected trace is split by (SplitDeviceTraceBytes; the
// tests' message-level model of the split uses the same): the bytes a
// length-delimited field of `n` payload bytes takes beyond the payload (a one-
// or two-byte tag, at most five bytes of length), and an int64 varint field.
inline constexpr size_t kPartFieldOverhead = 7;
inline constexpr size_t kPartIntFieldBytes = 11;

// One part of a collected trace, as SplitDeviceTraceBytes makes it.
struct DeviceTracePart {
  std::string bytes;  // A serialized DeviceTrace.
  int64_t events = 0;
};

// Splits a serialized DeviceTrace into parts whose serialized size is at most
// `max_bytes` (a single event larger than that gets a part of its own), on the
// wire bytes, without building messages. Events keep their order; each part
// carries the tracer, the whole name table and the ids and names of its
// devices and lines; dropped counts and status ride in the first. The parts
// are byte for byte the tests' message-level model of the split
// (device_tracer_set_test.cc) when `bytes` is protobuf's own serialization;
// events are copied as they are. False when
// `bytes` is not DeviceTrace wire data down to the events (their insides are
// not read).
bool SplitDeviceTraceBytes(std::string_view bytes, size_t max_bytes,
                           std::vector<DeviceTracePart>* parts);

// What the core needs of a collected trace, read off its wire bytes without
// building the message (the hot path of every collect: a full parse cost
// about as much again as the plugin's own work).
struct DeviceTraceSummary {
  std::string tracer;
  std::string status;
  int64_t dropped_events = 0;
  int64_t dropped_buffers = 0;
  int64_t events = 0;
};
// False when `bytes` is not well-formed DeviceTrace wire data (tags, lengths
// and nesting checked down to the events' stats).
bool SummarizeDeviceTrace(std::string_view bytes, DeviceTraceSummary* out);

// SplitDeviceTraceBytes for a collect held in `pages` (its first `size`
// bytes), read once with SummarizeDeviceTrace's checks: `on_summary` gets the
// summary first and says whether to keep the trace; then `emit` gets each
// part as soon as it is written, and the pages whose events went into parts
// go back to the system meanwhile, so the collect and all its parts are never
// held at once. A trace naming no tracer is named `tracer`, as if that field
// were appended. False (nothing called) when the bytes are not DeviceTrace
// wire data down to the events' stats.
bool SplitCollectPages(CollectPages* pages, size_t size, size_t max_bytes, std::string_view tracer,
                       absl::FunctionRef<bool(const DeviceTraceSummary&)> on_summary,
                       absl::FunctionRef<void(DeviceTracePart)> emit);

struct DeviceTracerSetOptions {
  // Passed to every plugin as XdlTraceProfilerOptions::max_buffer_bytes.
  uint64_t max_buffer_bytes_per_tracer = 64ull << 20;
  // The most one collect of a plugin may announce (4 x its buffer cap, as for
  // TensorFlow plugins' XSpaces); larger collects are refused, never allocated.
  uint64_t MaxCollectBytes() const { return 4 * max_buffer_bytes_per_tracer; }
  // Collected traces waiting for a record; past it the rest of a collect is
  // dropped and its events counted in events_dropped() and the tracer's status.
  uint64_t max_pending_bytes = 32ull << 20;
  // A collected trace larger than this is split into DeviceTrace parts of at
  // most about this size (each its own Record field 5), so the cap above
  // keeps what fits instead of refusing the whole collect.
  uint64_t max_trace_part_bytes = 4ull << 20;
  // XdlTraceProfilerOptions::config for every plugin.
  std::string plugin_config;
  // The longest a step hook of an ABI 1.0 plugin waits for its collect
  // (their calls are serialized); past it the collect counts as hung and the
  // plugin's step markers are skipped, without waiting, until it returns.
  double serial_wait_s = 60;
};

// Threading: Create, Start, Stop, StepBegin and StepEnd are called by the
// thread that owns the tracer (the training thread); Collect by one thread at a
// time, either that one (at start and close) or DeviceTracing's collector
// thread, concurrently with StepBegin/StepEnd (plugins of ABI 1.0, which did
// not promise that, get the two serialized by a lock of their own);
// TakePending, StopWaiting, the counters, Statuses() and StatusSummary() from
// any thread.
class DeviceTracerSet {
 public:
  // Resolves and loads every entry (built-in name or path) and creates its
  // profiler. A built-in name whose plugin was not built is kept as an
  // unavailable tracer; any other failure (not found, bad plugin, create
  // failed) is returned naming the entry.
  static absl::StatusOr<std::unique_ptr<DeviceTracerSet>> Create(
      const std::vector<std::string>& entries, DeviceTracerSetOptions options = {});

  ~DeviceTracerSet();  // Stops (if running) and destroys every profiler.
  DeviceTracerSet(const DeviceTracerSet&) = delete;
  DeviceTracerSet& operator=(const DeviceTracerSet&) = delete;

  // Starts every profiler. One that fails to start (say, no profiling rights)
  // is destroyed and left out for the rest of the run, kFailed with the
  // message "start failed (rc): ..."; the others run, as Kineto
  // carries on without the GPU when CUPTI will not start. Then collects once
  // so Statuses() reports unavailable tracers right away (a collect that
  // fails marks its tracer kFailed, as any collect does, and fails nothing
  // else). No-op when running.
  absl::Status Start();
  // Stops every profiler (each flushes its device buffers). No-op when stopped.
  absl::Status Stop();

  // Host step markers, forwarded to every running profiler. A failing plugin
  // is reported once in its status (kFailed); the step goes on.
  void StepBegin(uint64_t external_id);
  void StepEnd(uint64_t external_id);

  // Collects every profiler (two-call protocol) into the pending list.
  // Traces with no events and no drops are not kept. With `wait_for_room`
  // (the collector thread) a part that does not fit under max_pending_bytes
  // waits until TakePending makes room, or until StopWaiting; without it (or
  // after StopWaiting) such a part is dropped and its events counted.
  absl::Status Collect(bool wait_for_room = false);
  // At close, after Stop: collects every profiler into `out` (appended),
  // without the max_pending_bytes cap: the caller writes them at once (the
  // device-only record), so what the plugins hold is what this takes, and
  // the last interval's events are not dropped for want of a step to take
  // them.
  absl::Status CollectAll(std::vector<std::string>* out);
  // Serialized xdl.proto.DeviceTrace messages collected so far, oldest first,
  // as many as fit in `max_bytes` (at least one); removes them.
  std::vector<std::string> TakePending(uint64_t max_bytes = UINT64_MAX);
  // Ends any wait for room and every later one (at close).
  void StopWaiting();
  // Marks every tracer not failed yet kFailed with `message` (DeviceTracing
  // gave up waiting for a plugin at close). Any thread.
  void Abandon(const std::string& message);
  uint64_t pending_bytes() const;

  int64_t events_collected() const { return events_collected_.load(std::memory_order_relaxed); }
  int64_t events_dropped() const { return events_dropped_.load(std::memory_order_relaxed); }
  // Activity buffers the plugins lost whole (DeviceTrace.dropped_buffers).
  int64_t buffers_dropped() const { return buffers_dropped_.load(std::memory_order_relaxed); }
  // One per tracer, in configuration order.
  std::vector<DeviceTracerStatus> Statuses() const;
  // RenderDeviceTracerStatus(Statuses()): "cupti: unavailable: ...; fake: ok".
  std::string StatusSummary() const;
  // True when some tracer is not kOk.
  bool AnyNotOk() const;

 private:
  struct Tracer {
    std::string entry;                       // As configured.
    std::string type;                        // profiler_type, or the entry.
    std::unique_ptr<PluginLibrary> library;  // Null: unavailable built-in.
    XdlTraceProfiler* profiler = nullptr;
    bool step_error_reported = false;  // Training thread.
    // Plugins of ABI 1.0: collect and the step hooks never run at once. A
    // timed mutex, so a step waits for a hung collect at most serial_wait_s.
    std::unique_ptr<std::timed_mutex> serial;
    bool collect_hung = false;  // Training thread: a step gave up waiting.
  };

  explicit DeviceTracerSet(DeviceTracerSetOptions options) : options_(std::move(options)) {}
  // step_begin or step_end of the plugin ABI.
  using StepHook = decltype(XdlTracePluginRegistration::step_begin) XdlTracePluginRegistration::*;

  absl::Status CollectOne(Tracer& tracer, bool wait_for_room);
  // Keeps one serialized trace of tracer `index` in the pending list, or drops
  // and counts its events past max_pending_bytes (after waiting for room when
  // `wait_for_room`).
  void Admit(size_t index, std::string bytes, int64_t events, bool wait_for_room);
  // Calls `hook` on every plugin; a tracer's first step hook failure goes into its status.
  void CallStepHook(StepHook hook, const char* hook_name, uint64_t external_id);
  // Takes tracer `index`'s serial lock for a step hook: waits serial_wait_s
  // the first time a collect holds it, not at all while that collect is hung.
  // False (status kFailed, said once) when the hook is to be skipped.
  bool LockForStep(size_t index, const char* hook_name);
  void SetStatus(size_t index, DeviceTracerState state, std::string message);
  // Adds to the totals and to tracer `index`'s status counters.
  void CountDrops(size_t index, int64_t events, int64_t buffers);

  const DeviceTracerSetOptions options_;
  // Set up by Create and Start (training thread), then only read, except
  // Tracer::step_error_reported (training thread).
  std::vector<Tracer> tracers_;
  bool running_ = false;  // Training thread.
  mutable Mutex pending_mu_;
  CondVar room_;  // Signalled when TakePending frees room, and by StopWaiting.
  std::deque<std::string> pending_ ABSL_GUARDED_BY(pending_mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(pending_mu_) = 0;
  bool stop_waiting_ ABSL_GUARDED_BY(pending_mu_) = false;
  // Set during CollectAll: parts go there, uncapped.
  std::vector<std::string>* collect_into_ ABSL_GUARDED_BY(pending_mu_) = nullptr;
  std::atomic<int64_t> events_collected_{0};
  std::atomic<int64_t> events_dropped_{0};
  std::atomic<int64_t> buffers_dropped_{0};
  mutable Mutex status_mu_;
  std::vector<DeviceTracerStatus> status_ ABSL_GUARDED_BY(status_mu_);  // One per tracer.
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGIN_DEVICE_TRACER_SET_H_
