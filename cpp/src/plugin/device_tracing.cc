// The tracer's side of device tracing: the host-span recorder extended with plugins, collects
// and Record field 5.
#include "plugin/device_tracing.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/status_macros.h"
#include "core/thread_priority.h"
#include "core/wire.h"
#include "device_trace.pb.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/deferred.h"

namespace xdl_trace {
namespace internal {
std::string EncodeDeviceTrailingFields(absl::Span<const std::string> device_traces,
                                       absl::Span<const HostSpanInfo> spans) {
  std::string out;
  for (const std::string& trace : device_traces) {
    AppendLengthDelimitedField(xdl::proto::Record::kDeviceTraceFieldNumber, trace, &out);
  }
  AppendHostSpanFields(spans, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<DeviceTracing>> DeviceTracing::Start(
    const TraceConfig& config, DeviceTracerSetOptions options) {
  if (config.device_tracers.empty()) {
    return absl::InvalidArgumentError("device tracing started with no device_tracers");
  }
  // The environment overrides the config (docs/device-tracing.md).
  double collect_interval_s = config.device_collect_interval_s;
  if (const char* interval = std::getenv(kCollectIntervalEnv); interval != nullptr) {
    if (!absl::SimpleAtod(interval, &collect_interval_s) || !(collect_interval_s >= 0) ||
        std::isinf(collect_interval_s)) {
      return absl::InvalidArgumentError(absl::StrCat("environment ", kCollectIntervalEnv, "='",
                                                     interval,
                                                     "' is not a number of seconds >= 0"));
    }
  }
  options.plugin_config = config.device_plugin_config;
  options.serial_wait_s = config.device_fence_timeout_s;
  if (const char* plugin_config = std::getenv(kPluginConfigEnv); plugin_config != nullptr) {
    options.plugin_config = plugin_config;
  }
  XDL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceTracerSet> set,
                       DeviceTracerSet::Create(config.device_tracers, std::move(options)));
  XDL_RETURN_IF_ERROR(set->Start());
  std::unique_ptr<DeviceTracing> tracing(
      new DeviceTracing(std::move(set), collect_interval_s, config.device_fence_timeout_s));
  if (tracing->set_->AnyNotOk()) {  // Logged once; stats() keeps showing it.
    std::fprintf(stderr, "xdl_trace: device tracers (rank %d): %s\n", config.rank,
                 tracing->set_->StatusSummary().c_str());
  }
  tracing->set_->StepBegin(tracing->CurrentCorrelationId());
  tracing->collector_ = std::thread([t = tracing.get()] {
    t->CollectorLoop();
    t->collector_done_.store(true);
  });
  pthread_setname_np(tracing->collector_.native_handle(), kCollectorThreadName);
  return tracing;
}

DeviceTracing::DeviceTracing(std::unique_ptr<DeviceTracerSet> set, double collect_interval_s,
                             double stop_bound_s)
    : HostSpanRecorder(/*correlated=*/true),
      set_(std::move(set)),
      collect_interval_ns_(static_cast<int64_t>(collect_interval_s * 1e9)),
      stop_bound_s_(stop_bound_s) {}

DeviceTracing::~DeviceTracing() {
  std::vector<std::string> unwritten;  // No record takes them any more.
  if (!finished_) Finish(&unwritten);
}

void DeviceTracing::CollectorLoop() {
  const int64_t thread_id = CurrentThreadId();
  LowerCurrentThreadPriority(kBackgroundNiceSteps);  // Training comes first.
  NoWakeupPreemption();
  auto next = std::chrono::steady_clock::now();
  uint64_t steps_seen = 0;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (collect_interval_ns_ > 0) {
        next += std::chrono::nanoseconds(collect_interval_ns_);
        while (!stopping_ && wake_.WaitUntil(&mu_, next)) {
        }
      } else {
        while (!stopping_ && steps_called_ == steps_seen) wake_.Wait(&mu_);
        steps_seen = steps_called_;
      }
      if (stopping_) return;
    }
    const int64_t start = WallClockNs();
    set_->Collect(/*wait_for_room=*/true).IgnoreError();  // Shown in StatusSummary().
    const int64_t end = WallClockNs();
    MutexLock lock(&mu_);
    collect_spans_.push_back(HostSpanInfo{HostSpanKind::kDeviceCollect, start, end,
                                          collect_gstep_.load(), collect_lstep_.load(),
                                          collect_step_id_.load(), thread_id});
    collects_.fetch_add(1, std::memory_order_relaxed);
    // A collect longer than the interval starts the next one at once, not a burst.
    next = std::max(
        next, std::chrono::steady_clock::now() - std::chrono::nanoseconds(collect_interval_ns_));
  }
}

void DeviceTracing::StopCollector(std::vector<std::string>* taken) {
  if (!collector_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  // A collect in progress may be waiting for room under the pending cap:
  // taking its parts as they come lets it finish without dropping any.
  while (!collector_done_.load()) {
    for (std::string& trace : set_->TakePending()) taken->push_back(std::move(trace));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  collector_.join();
  set_->StopWaiting();
}

void DeviceTracing::OnStepCalled(int64_t gstep, int64_t lstep) {
  const int64_t now = WallClockNs();
  set_->StepEnd(CurrentCorrelationId());
  collect_gstep_.store(gstep, std::memory_order_relaxed);
  collect_lstep_.store(lstep, std::memory_order_relaxed);
  StepCalledAt(gstep, lstep, now);
  if (collect_interval_ns_ == 0) {
    {
      MutexLock lock(&mu_);
      ++steps_called_;
    }
    wake_.SignalAll();
  }
}

std::vector<std::string> DeviceTracing::TakeDeviceTraces() {
  return set_->TakePending(kMaxRecordDeviceBytes);
}

void DeviceTracing::TakeCollectSpans() {
  MutexLock lock(&mu_);
  MoveSpans(&collect_spans_);
}

std::string DeviceTracing::TakeTrailingFields() {
  TakeCollectSpans();
  return HostSpanRecorder::TakeTrailingFields();
}

void DeviceTracing::StepBegan() {
  collect_step_id_.store(CurrentCorrelationId(), std::memory_order_relaxed);
  set_->StepBegin(CurrentCorrelationId());
}

void DeviceTracing::OnStepReturned(int64_t begin_ns, int64_t end_ns) {
  HostSpanRecorder::OnStepReturned(begin_ns, end_ns);
  StepBegan();
}

void DeviceTracing::OnStepNotTraced(int64_t gstep, int64_t lstep) {
  const int64_t now = WallClockNs();
  set_->StepEnd(CurrentCorrelationId());
  StepNotTracedAt(gstep, lstep, now);
  StepBegan();
}

std::string DeviceTracing::Finish(std::vector<std::string>* device_traces) {
  if (finished_) return "";
  finished_ = true;
  // What the plugins' side hands back; shared with its thread, which may
  // outlive this call (abandoned).
  struct Handover {
    Mutex mu;
    CondVar done_cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    std::vector<std::string> traces ABSL_GUARDED_BY(mu);
    int64_t collect_start ABSL_GUARDED_BY(mu) = 0;
    int64_t collect_end ABSL_GUARDED_BY(mu) = 0;
  };
  auto handover = std::make_shared<Handover>();
  const uint64_t step_id = CurrentCorrelationId();
  std::thread([this, handover, step_id] {
    // Parts are taken while the collector stops, so a collect waiting for
    // room ends without dropping any for want of a step to take them.
    std::vector<std::string> traces = set_->TakePending();
    StopCollector(&traces);
    set_->StepEnd(step_id);
    set_->Stop().IgnoreError();
    for (std::string& trace : set_->TakePending()) traces.push_back(std::move(trace));
    // The last collect goes straight into the device-only record, past the
    // pending cap: nothing would take pending parts any more.
    const int64_t start = WallClockNs();
    set_->CollectAll(&traces).IgnoreError();
    const int64_t end = WallClockNs();
    MutexLock lock(&handover->mu);
    handover->traces = std::move(traces);
    handover->collect_start = start;
    handover->collect_end = end;
    handover->done = true;
    handover->done_cv.SignalAll();
  }).detach();
  int64_t start = 0;
  int64_t end = 0;
  {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(std::min(stop_bound_s_, 1e9)));
    MutexLock lock(&handover->mu);
    while (!handover->done && !abandon_waits_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < deadline) {
      handover->done_cv.WaitUntil(
          &handover->mu,
          std::min(deadline, std::chrono::steady_clock::now() + DeferredBytes::kAbandonPoll));
    }
    abandoned_ = !handover->done;
    if (!abandoned_) {
      for (std::string& trace : handover->traces) device_traces->push_back(std::move(trace));
      start = handover->collect_start;
      end = handover->collect_end;
    }
  }
  if (abandoned_) {
    const bool interrupted = abandon_waits_.load(std::memory_order_acquire);
    const std::string why =
        interrupted ? std::string("the wait was interrupted (Ctrl-C or SIGTERM)")
                    : absl::StrCat("stop or collect did not return within ", stop_bound_s_, " s");
    const std::string when =
        interrupted ? std::string("before the wait was interrupted (Ctrl-C or SIGTERM)")
                    : absl::StrCat("within ", stop_bound_s_,
                                   " s (device_fence_timeout_s; a plugin's stop or collect never "
                                   "returned)");
    std::fprintf(stderr,
                 "xdl_trace: device tracers did not stop and hand over their last events %s: "
                 "abandoned, those events are lost; the trace files are complete\n",
                 when.c_str());
    set_->Abandon(absl::StrCat("abandoned: ", why, " at close"));
    DropSpans();
    return "";
  }
  std::vector<std::string>& traces = *device_traces;
  TakeCollectSpans();
  AddSpan(HostSpanKind::kDeviceCollect, start, end);
  if (traces.empty()) {
    DropSpans();  // Spans alone do not justify a record of their own.
    return "";
  }
  std::string spans;
  TakeSpansInto(&spans);
  return spans;
}

void DeviceTracing::FillStats(TraceStats* stats) const {
  stats->device_events = set_->events_collected();
  stats->device_events_dropped = set_->events_dropped();
  stats->device_buffers_dropped = set_->buffers_dropped();
  stats->device_tracers = set_->Statuses();
  stats->device_tracer_status = RenderDeviceTracerStatus(stats->device_tracers);
}

}  // namespace internal
}  // namespace xdl_trace
