// The CUPTI activity tracer: lifecycle, capped buffer pool, completed-buffer queue, join.
#ifndef XDL_TRACE_PLUGINS_CUPTI_CUPTI_TRACER_H_
#define XDL_TRACE_PLUGINS_CUPTI_CUPTI_TRACER_H_

#include <cupti.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "activity_parser.h"
#include "core/mutex.h"
#include "cupti_api.h"
#include "device_trace_serializer.h"

namespace xdl_trace {
namespace cupti {

// Name of the thread that parses completed activity buffers (top, perf,
// bench/device.py's collector CPU figure).
inline constexpr char kParseThreadName[] = "xdl_cupti_parse";

struct CuptiTracerOptions {
  size_t buffer_bytes = 4u << 20;       // One activity buffer handed to CUPTI.
  size_t max_buffer_bytes = 64u << 20;  // Hard cap on all buffers together.
  size_t preallocated_buffers = 2;      // Allocated at start (within the cap).
  // Parsed events held between collects (two seconds at a GPU's 1M events/s,
  // so a 1 s collect interval keeps everything; 128 bytes each).
  size_t max_events = 2u << 20;
  // Each collect while running first calls cuptiActivityFlushAll(0), so what
  // the device finished reaches that collect rather than waiting for a
  // buffer to fill. Optionally CUPTI flushes on its own every
  // flush_period_ms too (cuptiActivityFlushPeriod; 0: off).
  bool flush_on_collect = true;
  uint32_t flush_period_ms = 0;
  // An event whose step (external correlation) is not known yet is held
  // across collects until it is, at most this long and this many events;
  // past either bound (or at stop) it is emitted without a step.
  int64_t max_hold_ns = 5'000'000'000;
  size_t max_held_events = 1u << 16;
  // Launches from other threads (autograd backward threads, data loaders,
  // NCCL's), rule 2 of docs/device-tracing.md. true (the default): a CUPTI
  // callback on the launch and copy APIs pushes the current step's
  // correlation on the launching thread for the call. false (config
  // other_threads=0): no callback; the join gives an event with no external
  // correlation whose launching API record comes from a thread other than
  // the training thread the step begun last before that record's CPU start
  // (held, within the bounds above, until that record arrives).
  bool other_threads = true;
  // NVTX ranges and marks (CUPTI_ACTIVITY_KIND_MARKER); on by default.
  bool nvtx = true;
  // Opt-in activity kinds (the defaults are always on).
  bool memory = false;  // Device memory allocations and frees (MEMORY2).
  bool driver = false;
  bool synchronization = false;
  bool overhead = false;
  // Runtime/driver calls left out of the trace (by name, no "_vNNNN").
  std::vector<std::string> api_filter = DefaultApiFilter();
  // libcupti names tried by the default loader.
  std::vector<std::string> libraries = DefaultCuptiLibraries();
};

// Parses "key=value;..." (buffer_bytes, max_buffer_bytes, max_events, driver,
// synchronization, overhead, nvtx, memory, libcupti, flush_on_collect,
// flush_period_ms, max_hold_ms, max_held_events, other_threads: 1 callback,
// 0 time rule; api_filter: comma-separated names, "" for none) over
// `options`; unknown keys are ignored.
void ApplyConfig(const std::string& config, CuptiTracerOptions* options);

// The calling thread's id as CUPTI's API records report it with its default
// thread-id type (threadId; on Linux pthread_self(), truncated to 32 bits).
uint32_t CuptiThreadId();
// ... and with the SYSTEM type the tracer asks for at Start (the OS thread id,
// gettid: what host spans and /proc name), where the library can set it.
uint32_t SystemThreadId();

// Fixed-size, 8-byte-aligned activity buffers under a hard byte cap.
// Threading: any thread (Acquire from CUPTI's threads, Release from the parse
// thread or the collecting one); guarded by mu_.
class BufferPool {
 public:
  BufferPool(size_t buffer_bytes, size_t max_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Allocates up to `count` free buffers ahead of time (within the cap).
  void Preallocate(size_t count);
  // A free buffer, allocating one while under the cap; nullptr at the cap.
  uint8_t* Acquire();
  void Release(uint8_t* buffer);
  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t allocated_bytes() const;
  size_t outstanding() const;  // Acquired, not released.

 private:
  const size_t buffer_bytes_;
  const size_t max_bytes_;
  mutable internal::Mutex mu_;
  std::vector<uint8_t*> free_ ABSL_GUARDED_BY(mu_);
  size_t allocated_ ABSL_GUARDED_BY(mu_) = 0;  // Buffers.
  size_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

// Lifecycle:
//   kIdle --Start--> kStarting --(all kinds enabled)--> kRunning --Stop--> kIdle
//   kStarting --(enable failed)--> rollback --> kIdle (error) or kUnavailable
//   kUnavailable: libcupti missing, or no driver/GPU; Start/Stop are no-ops.
//
// Threading: Start/Stop (and the constructor/destructor) are called by the
// thread that starts and stops tracing; StepBegin/StepEnd by the training
// thread; Collect by one thread at a time (the core's collector thread while
// running), possibly at the same time as StepBegin/StepEnd, which touch only
// atomics and CUPTI's thread-local correlation stack (plugin ABI 1.1) and,
// with other_threads=0, append the step's start under steps_mu_.
// OnBufferRequested and OnBufferCompleted are called by CUPTI on its threads
// (or by tests): they touch only the pool and the completed queue. The parse
// thread (kParseThreadName, from Start to Stop) parses each completed buffer
// as it completes and hands the buffer back to the pool, so the records CUPTI
// holds stay under max_buffer_bytes whatever the collect interval, and parsed
// events under max_events; Collect waits for the buffers completed before it
// to be parsed, then joins and encodes what was parsed. With no parse thread
// (before Start, after Stop) Collect parses the queue itself. Only one tracer
// per process can be running (CUPTI's callbacks are process-global).
class CuptiTracer {
 public:
  enum class State { kIdle, kStarting, kRunning, kStopping, kUnavailable };

  // `api` null: loaded lazily with LoadCuptiApi(options.libraries) at the
  // first Start.
  explicit CuptiTracer(CuptiTracerOptions options, std::unique_ptr<CuptiApi> api = nullptr);
  ~CuptiTracer();  // Stops if running.
  CuptiTracer(const CuptiTracer&) = delete;
  CuptiTracer& operator=(const CuptiTracer&) = delete;

  struct Result {
    bool ok = true;
    bool permission_denied = false;
    std::string message;
  };

  Result Start();
  // Disables every kind, force-flushes (CUPTI hands back every buffer) and
  // releases the callbacks.
  Result Stop();
  void StepBegin(uint64_t step_id);
  void StepEnd(uint64_t step_id);

  // Serialized xdl.proto.DeviceTrace of everything completed since the last
  // Collect (flushing CUPTI first while running). While running, events
  // whose correlation is not yet joined are held back (their external record
  // may be in a later buffer) within max_hold_ns / max_held_events.
  std::string Collect();
  // Collect in two steps, for the C ABI's two calls: the serialized size of
  // the collected trace (again the same while not written), then the bytes,
  // written straight into `out` (room for that size).
  size_t PrepareCollect();
  void WritePrepared(char* out);
  // Events emitted without a step because a hold bound ran out (not drops).
  int64_t released_unjoined() const { return released_unjoined_; }
  size_t held() const { return held_count_.load(); }

  // The subscriber callback: on a launch/copy API entered by a thread other
  // than the training thread, pushes the current step for that call and pops
  // it on exit (public so tests can drive it; any thread).
  void OnApiCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                     const CUpti_CallbackData& data);
  // Launch/copy APIs (runtime and driver) whose callbacks are enabled.
  static const std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>>& LaunchCallbacks();
  int64_t other_thread_launches() const { return other_thread_launches_.load(); }
  // other_threads=0: events given a step by the time rule so far (Collect's
  // thread).
  int64_t time_rule_events() const { return time_rule_events_; }

  // CUPTI's buffer callbacks (public so tests can drive them).
  void OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  void OnBufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                         size_t valid_size);

  State state() const { return state_.load(); }
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  // Why the last Start left CUPTI alone because another CUPTI user holds it
  // ("cupti subscriber busy: ..."); "" when the last Start took it.
  const std::string& busy_reason() const { return busy_reason_; }
  // The activity kinds enabled by a successful Start, in order.
  std::vector<CUpti_ActivityKind> ActivityKinds() const;
  // Events known lost so far (not reset by Collect): CUPTI's own count,
  // records past max_events, records with zero timestamps.
  int64_t dropped() const;
  // Activity buffers lost whole so far, their events unknown: requests
  // refused at max_buffer_bytes, and buffers whose parse stopped at a record
  // kind this libcupti does not know.
  int64_t dropped_buffers() const;
  const BufferPool& pool() const { return pool_; }
  ParseCounters parse_counters() const;

 private:
  struct Completed {
    uint8_t* buffer = nullptr;
    size_t valid_size = 0;
  };
  void MarkUnavailable(std::string reason);
  void Rollback(const std::vector<CUpti_ActivityKind>& enabled);
  void Unsubscribe();
  void StartParseThread();
  // Lets the parse thread finish the queue, then joins it (idempotent).
  void StopParseThread();
  void ParseLoop();
  // Walks one completed buffer's records into events_ and releases it.
  void ParseBuffer(const Completed& completed);
  // Returns once every buffer completed before the call is parsed (by the
  // parse thread, or here when none runs).
  void WaitParsed();
  // Gives `events` their steps (docs/device-tracing.md, attribution rules);
  // those not known yet move to held_ while `running`, and the held ones
  // known now (or past a bound) join `events`. `launches`: the parser's API
  // calls for the time rule (other_threads=0, parse_mu_ held), else null.
  void Join(EventBlocks& events, bool running, const LaunchTable* launches);
  // The step begun last at or before `at_ns` (step_starts_), 0 when none.
  uint64_t StepAt(int64_t at_ns) const;

  const CuptiTracerOptions options_;
  std::unique_ptr<CuptiApi> api_;  // Set by Start before any callback or the parse thread.
  std::atomic<State> state_{State::kIdle};
  std::vector<CUpti_ActivityKind> enabled_kinds_;
  std::vector<DeviceStats> collected_devices_;   // The collecting thread's, taken under parse_mu_.
                                                 // // Start/Stop thread: what Stop disables.
  std::string unavailable_reason_;               // Start/Stop thread.
  std::string busy_reason_;                      // Start/Stop thread.
  CUpti_SubscriberHandle subscriber_ = nullptr;  // Start/Stop thread; set while running.
  BufferPool pool_;
  std::atomic<int64_t> cupti_dropped_{0};    // From cuptiActivityGetNumDroppedRecords.
  std::atomic<int64_t> refused_buffers_{0};  // Requests refused at the cap.
  // The step in progress (or the last one begun): what other threads' launches
  // are tagged with; 0 before the first step.
  std::atomic<uint64_t> current_step_{0};
  std::atomic<int64_t> other_thread_launches_{0};
  // other_threads=0: the training thread (CuptiThreadId() at StepBegin; 0
  // before the first step), and each step's start (WallClockNs(), the clock
  // of the parsed API records) in StepBegin order, the last kMaxStepStarts.
  struct StepStart {
    int64_t at_ns;
    uint64_t step;
  };
  static constexpr size_t kMaxStepStarts = 4096;
  std::atomic<uint32_t> training_thread_{0};
  // API records' threadId is the OS thread id (SetThreadIdType(SYSTEM) succeeded at Start).
  std::atomic<bool> system_thread_ids_{false};
  internal::Mutex steps_mu_;
  std::deque<StepStart> new_step_starts_ ABSL_GUARDED_BY(steps_mu_);  // Not yet collected.

  // Completed buffers, from CUPTI's threads to the parse thread.
  internal::Mutex queue_mu_;
  internal::CondVar completed_cv_;  // A buffer completed, or the parse thread is to stop.
  internal::CondVar parsed_cv_;     // A buffer was parsed.
  std::deque<Completed> completed_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t completed_count_ ABSL_GUARDED_BY(queue_mu_) = 0;  // Buffers completed so far.
  uint64_t parsed_count_ ABSL_GUARDED_BY(queue_mu_) = 0;     // Of those, parsed (in order).
  bool parse_thread_running_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool parse_thread_stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread parse_thread_;  // Start/Stop thread.

  // Blocks for events_ and collected_ (declared first: destroyed after them).
  EventBlockPool event_pool_;
  // What parsing produced: written by the parse thread (or Collect's thread
  // when none runs), taken by Collect.
  mutable internal::Mutex parse_mu_;
  NameTable names_ ABSL_GUARDED_BY(parse_mu_);  // Its strings never move (NameSnapshot).
  ActivityParser parser_ ABSL_GUARDED_BY(parse_mu_);
  EventBlocks events_ ABSL_GUARDED_BY(parse_mu_){&event_pool_};  // Parsed, not collected.
  std::vector<std::pair<uint32_t, uint64_t>> new_external_ ABSL_GUARDED_BY(parse_mu_);
  int64_t over_cap_events_ ABSL_GUARDED_BY(parse_mu_) = 0;  // Parsed beyond max_events.
  int64_t aborted_buffers_ ABSL_GUARDED_BY(parse_mu_) = 0;  // Parse stopped at an unknown kind.
  std::atomic<size_t> held_count_{0};  // held_.size(), for the parse thread's cap.

  // Collect's thread only (one at a time):
  // Taken from events_ by a collect; its blocks go back to the pool once
  // the writer has encoded them (PrepareCollect), before the bytes are written.
  EventBlocks collected_{&event_pool_};
  std::vector<std::pair<uint32_t, uint64_t>> collected_external_;  // Storage, reused.
  NameSnapshot collected_names_;
  DeviceTraceWriter writer_;
  bool prepared_ = false;
  struct Held {
    DeviceEventData event;
    int64_t since_ns;  // WallClockNs() when first held.
  };
  std::deque<Held> held_;  // Unjoined, oldest first.
  int64_t released_unjoined_ = 0;
  // The join: correlation id -> step (from the first external correlation on).
  struct StepOf {
    uint32_t correlation = 0;
    uint64_t step = 0;
  };
  CorrelationTable<StepOf> join_;
  // other_threads=0: the step starts taken from new_step_starts_, the last
  // kMaxStepStarts, oldest first.
  std::deque<StepStart> step_starts_;
  int64_t time_rule_events_ = 0;
  int64_t reported_dropped_ = 0;          // dropped() at the last Collect.
  int64_t reported_dropped_buffers_ = 0;  // dropped_buffers() at the last Collect.
};

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_CUPTI_TRACER_H_
