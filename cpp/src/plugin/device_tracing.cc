// The tracer's side of device tracing: host step spans, step ids, Record fields 5 and 6.
#include "plugin/device_tracing.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "device_trace.pb.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

constexpr uint32_t kDeviceTraceField = xdl::proto::Record::kDeviceTraceFieldNumber;
constexpr uint32_t kHostSpanField = xdl::proto::Record::kHostSpanFieldNumber;

}  // namespace

std::string EncodeDeviceTrailingFields(absl::Span<const std::string> device_traces,
                                       absl::Span<const HostSpanData> spans) {
  std::string out;
  for (const std::string& trace : device_traces) {
    AppendLengthDelimitedField(kDeviceTraceField, trace, &out);
  }
  xdl::proto::HostSpan message;
  for (const HostSpanData& span : spans) {
    message.set_kind(span.kind);
    message.set_start_ns(span.start_ns);
    message.set_end_ns(span.end_ns);
    message.set_gstep(span.gstep);
    message.set_lstep(span.lstep);
    message.set_correlation_id(span.correlation_id);
    message.set_thread_id(span.thread_id);
    AppendLengthDelimitedField(kHostSpanField, message.SerializeAsString(), &out);
  }
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
  if (const char* plugin_config = std::getenv(kPluginConfigEnv); plugin_config != nullptr) {
    options.plugin_config = plugin_config;
  }
  XDL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceTracerSet> set,
                       DeviceTracerSet::Create(config.device_tracers, std::move(options)));
  XDL_RETURN_IF_ERROR(set->Start());
  std::unique_ptr<DeviceTracing> tracing(new DeviceTracing(std::move(set), collect_interval_s));
  if (tracing->set_->AnyNotOk()) {  // Logged once; stats() keeps showing it.
    std::fprintf(stderr, "xdl_trace: device tracers (rank %d): %s\n", config.rank,
                 tracing->set_->StatusSummary().c_str());
  }
  tracing->set_->StepBegin(tracing->step_id_);
  return tracing;
}

DeviceTracing::DeviceTracing(std::unique_ptr<DeviceTracerSet> set, double collect_interval_s)
    : set_(std::move(set)),
      collect_interval_ns_(static_cast<int64_t>(collect_interval_s * 1e9)),
      thread_id_(static_cast<int64_t>(::syscall(SYS_gettid))) {
  step_begin_ns_ = WallClockNs();
  last_collect_ns_ = step_begin_ns_;
}

DeviceTracing::~DeviceTracing() {
  if (!finished_) Finish();
}

void DeviceTracing::OnStepCalled(int64_t gstep, int64_t lstep) {
  const int64_t now = WallClockNs();
  set_->StepEnd(step_id_);
  gstep_ = gstep;
  lstep_ = lstep;
  spans_.push_back(HostSpanData{xdl::proto::HostSpan::STEP, step_begin_ns_, now, gstep, lstep,
                                step_id_, thread_id_});
}

std::string DeviceTracing::TakeTrailingFields() {
  const int64_t now = WallClockNs();
  if (now - last_collect_ns_ >= collect_interval_ns_) {
    set_->Collect().IgnoreError();  // Shown in StatusSummary().
    last_collect_ns_ = WallClockNs();
    AddSpan(xdl::proto::HostSpan::DEVICE_COLLECT, now, last_collect_ns_);
  }
  std::vector<std::string> traces = set_->TakePending();
  std::string fields = EncodeDeviceTrailingFields(traces, spans_);
  spans_.clear();
  return fields;
}

void DeviceTracing::AddSpan(xdl::proto::HostSpan::Kind kind, int64_t start_ns, int64_t end_ns) {
  spans_.push_back(HostSpanData{kind, start_ns, end_ns, gstep_, lstep_, step_id_, thread_id_});
}

void DeviceTracing::OnStepEncoded(int64_t begin_ns, int64_t end_ns) {
  AddSpan(xdl::proto::HostSpan::CAPTURE_ENCODE, begin_ns, end_ns);
}

void DeviceTracing::OnStepReturned(int64_t begin_ns, int64_t end_ns) {
  if (end_ns > begin_ns) AddSpan(xdl::proto::HostSpan::QUEUE_WAIT, begin_ns, end_ns);
  ++step_id_;
  step_begin_ns_ = WallClockNs();
  set_->StepBegin(step_id_);
}

void DeviceTracing::OnStepNotTraced(int64_t, int64_t, int64_t, int64_t end_ns) {
  set_->StepEnd(step_id_);
  ++step_id_;
  step_begin_ns_ = end_ns;
  set_->StepBegin(step_id_);
}

std::string DeviceTracing::Finish() {
  if (finished_) return "";
  finished_ = true;
  set_->StepEnd(step_id_);
  set_->Stop().IgnoreError();
  const int64_t start = WallClockNs();
  set_->Collect().IgnoreError();
  AddSpan(xdl::proto::HostSpan::DEVICE_COLLECT, start, WallClockNs());
  std::vector<std::string> traces = set_->TakePending();
  if (traces.empty()) {
    spans_.clear();  // Spans alone do not justify a record of their own.
    return "";
  }
  std::string fields = EncodeDeviceTrailingFields(traces, spans_);
  spans_.clear();
  return fields;
}

void DeviceTracing::FillStats(TraceStats* stats) const {
  stats->device_events = set_->events_collected();
  stats->device_events_dropped = set_->events_dropped();
  stats->device_tracers = set_->Statuses();
  stats->device_tracer_status = RenderDeviceTracerStatus(stats->device_tracers);
}

}  // namespace internal
}  // namespace xdl_trace
