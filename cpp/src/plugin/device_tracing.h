// The tracer's side of device tracing: the host-span recorder extended with plugins, collects
// and Record field 5.
#ifndef XDL_TRACE_PLUGIN_DEVICE_TRACING_H_
#define XDL_TRACE_PLUGIN_DEVICE_TRACING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/mutex.h"
#include "plugin/device_tracer_set.h"
#include "record/host_spans.h"
#include "xdl_trace/config.h"
#include "xdl_trace/stats.h"

namespace xdl_trace {
namespace internal {

// Serialized Record fields: `device_traces` (serialized DeviceTrace) as field 5
// each, `spans` as field 6 each (record/host_spans.h's encoder), ready for
// EncodeRecord's trailing_fields.
std::string EncodeDeviceTrailingFields(absl::Span<const std::string> device_traces,
                                       absl::Span<const HostSpanInfo> spans);

// Environment overrides of TraceConfig::device_collect_interval_s and
// TraceConfig::device_plugin_config, read by DeviceTracing::Start.
inline constexpr char kCollectIntervalEnv[] = "XDL_TRACE_DEVICE_COLLECT_INTERVAL_S";
inline constexpr char kPluginConfigEnv[] = "XDL_TRACE_PLUGIN_CONFIG";  // "key=value;..."

// Name of the collector thread (top, perf, bench/device.py's CPU figure).
inline constexpr char kCollectorThreadName[] = "xdl_dev_collect";

// The RecordExtras (record/record_extras.h) behind config.device_tracers: the
// host-span recorder (record/host_spans.h, with correlated step ids) extended
// with the plugins. Host spans and device events share core/clock.h's
// WallClockNs().
//
// Threads. The training thread calls every RecordExtras method; inside Step()
// it only ends and begins the step on the plugins (step_end/step_begin, the
// correlation id push/pop), notes host spans and takes collected DeviceTrace
// parts (at most max_record_device_bytes a record). The collector thread
// (kCollectorThreadName, started by Start, joined by Finish) runs every
// collect while tracing: the plugins' collect (CUPTI's flush, parse, join and
// encode), the core's checks, split and caps. It collects every
// device_collect_interval_s (with 0: after every step), and waits while the
// pending parts are at max_pending_bytes until the training thread takes some.
// Finish (Close) stops it, stops the plugins and collects once more on the
// calling thread. FillStats may be called from any thread.
//
// Host spans: HostSpanRecorder's STEP, CAPTURE_ENCODE and QUEUE_WAIT, each
// with the step's correlation id, which device tracers attach to the work
// launched meanwhile; DEVICE_COLLECT marks a collection (on the collector
// thread's id).
class DeviceTracing final : public HostSpanRecorder {
 public:
  // Device bytes one record carries at most (at least one part): the rest
  // waits for the next steps, so no record copies or queues a whole collect.
  static constexpr uint64_t kMaxRecordDeviceBytes = 8ull << 20;

  // Starts every tracer in config.device_tracers (must be non-empty) and the
  // collector thread. An unavailable tracer is logged once to stderr and
  // shown in stats, not an error. `options.plugin_config` is replaced by the
  // config's (or the environment's); the buffer caps are kept.
  static absl::StatusOr<std::unique_ptr<DeviceTracing>> Start(const TraceConfig& config,
                                                              DeviceTracerSetOptions options = {});
  ~DeviceTracing() override;

  void OnStepCalled(int64_t gstep, int64_t lstep) override;
  // At most kMaxRecordDeviceBytes of collected parts (at least one).
  std::vector<std::string> TakeDeviceTraces() override;
  // The host spans (Record field 6), the collector's after the step's.
  std::string TakeTrailingFields() override;
  void OnStepReturned(int64_t begin_ns, int64_t end_ns) override;
  // The not-traced step ends: its device work keeps its own correlation id
  // (on its STEP_NOT_TRACED span), and the next STEP span starts at its end.
  void OnStepNotTraced(int64_t gstep, int64_t lstep) override;
  // Stops the collector thread and the tracers, collects once more, moves the
  // DeviceTrace parts not yet taken into `device_traces` and returns the host
  // spans that go after them ("" and none when no device events are left: host
  // spans alone do not justify a record). The plugins' part runs on a thread
  // of its own, waited for at most config.device_fence_timeout_s: a plugin
  // whose stop or collect never returns is abandoned, said on stderr and in
  // the tracers' status, its last events lost (Abandoned()).
  std::string Finish(std::vector<std::string>* device_traces) override;
  bool Abandoned() const override { return abandoned_; }
  // Finish stops waiting for the plugins within DeferredBytes::kAbandonPoll.
  void AbandonWaits() override { abandon_waits_.store(true, std::memory_order_release); }
  // device_events / device_events_dropped / device_tracer_status.
  void FillStats(TraceStats* stats) const override;

  // Collections so far (any thread; tests).
  int64_t collects() const { return collects_.load(std::memory_order_relaxed); }

 private:
  DeviceTracing(std::unique_ptr<DeviceTracerSet> set, double collect_interval_s,
                double stop_bound_s);
  void CollectorLoop();
  // Tells the plugins and the collector that the step CurrentCorrelationId() began.
  void StepBegan();
  // Notes the collector's spans after the step's own.
  void TakeCollectSpans() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the collector thread (idempotent), moving the parts it collects
  // meanwhile into `taken`.
  void StopCollector(std::vector<std::string>* taken);

  const std::unique_ptr<DeviceTracerSet> set_;
  const int64_t collect_interval_ns_;
  const double stop_bound_s_;  // The longest Finish waits for the plugins.
  // Training thread only:
  bool finished_ = false;
  bool abandoned_ = false;
  std::thread collector_;
  // Written by the training thread, read by the collector for its spans.
  std::atomic<int64_t> collect_gstep_{0};  // Of the last Step() call.
  std::atomic<int64_t> collect_lstep_{0};
  std::atomic<uint64_t> collect_step_id_{1};
  std::atomic<int64_t> collects_{0};
  std::atomic<bool> abandon_waits_{false};   // Set by AbandonWaits (any thread), read by Finish.
  std::atomic<bool> collector_done_{false};  // CollectorLoop returned.

  Mutex mu_;
  CondVar wake_;  // Stop, or (interval 0) a step was called.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t steps_called_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<HostSpanInfo> collect_spans_ ABSL_GUARDED_BY(mu_);  // From the collector.
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGIN_DEVICE_TRACING_H_
