// The tracer's side of device tracing: host step spans, step ids, Record fields 5 and 6.
#include "plugin/device_tracing.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "device_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

constexpr uint32_t kDeviceTraceField = 5;  // Record.device_trace
constexpr uint32_t kHostSpanField = 6;     // Record.host_span

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendLengthDelimited(uint32_t field, const std::string& bytes, std::string* out) {
  AppendVarint((field << 3) | 2, out);
  AppendVarint(bytes.size(), out);
  out->append(bytes);
}

}  // namespace

int64_t RealtimeNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string EncodeDeviceTrailingFields(absl::Span<const std::string> device_traces,
                                       absl::Span<const HostSpanData> spans) {
  std::string out;
  for (const std::string& trace : device_traces) {
    AppendLengthDelimited(kDeviceTraceField, trace, &out);
  }
  xdl::proto::HostSpan message;
  for (const HostSpanData& span : spans) {
    message.set_kind(static_cast<xdl::proto::HostSpan::Kind>(span.kind));
    message.set_start_ns(span.start_ns);
    message.set_end_ns(span.end_ns);
    message.set_gstep(span.gstep);
    message.set_lstep(span.lstep);
    message.set_correlation_id(span.correlation_id);
    message.set_thread_id(span.thread_id);
    AppendLengthDelimited(kHostSpanField, message.SerializeAsString(), &out);
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
  absl::StatusOr<std::unique_ptr<DeviceTracerSet>> set =
      DeviceTracerSet::Create(config.device_tracers, std::move(options));
  if (!set.ok()) return set.status();
  if (absl::Status started = (*set)->Start(); !started.ok()) return started;
  std::unique_ptr<DeviceTracing> tracing(new DeviceTracing(std::move(*set), collect_interval_s));
  const std::string summary = tracing->set_->StatusSummary();
  if (summary.find("unavailable") != std::string::npos ||
      summary.find("error") != std::string::npos) {
    std::fprintf(stderr, "xdl_trace: device tracers (rank %d): %s\n", config.rank, summary.c_str());
  }
  tracing->set_->StepBegin(tracing->step_id_);
  return tracing;
}

DeviceTracing::DeviceTracing(std::unique_ptr<DeviceTracerSet> set, double collect_interval_s)
    : set_(std::move(set)),
      collect_interval_ns_(static_cast<int64_t>(collect_interval_s * 1e9)),
      thread_id_(static_cast<int64_t>(::syscall(SYS_gettid))) {
  step_begin_ns_ = RealtimeNs();
  last_collect_ns_ = step_begin_ns_;
}

DeviceTracing::~DeviceTracing() {
  if (!finished_) Finish();
}

void DeviceTracing::OnStepCalled(int64_t gstep, int64_t lstep) {
  const int64_t now = RealtimeNs();
  set_->StepEnd(step_id_);
  gstep_ = gstep;
  lstep_ = lstep;
  spans_.push_back(
      HostSpanData{HostSpanKind::kStep, step_begin_ns_, now, gstep, lstep, step_id_, thread_id_});
}

std::string DeviceTracing::TakeTrailingFields() {
  const int64_t now = RealtimeNs();
  if (now - last_collect_ns_ >= collect_interval_ns_) {
    set_->Collect().IgnoreError();  // Shown in StatusSummary().
    last_collect_ns_ = RealtimeNs();
    AddSpan(HostSpanKind::kDeviceCollect, now, last_collect_ns_);
  }
  std::vector<std::string> traces = set_->TakePending();
  std::string fields = EncodeDeviceTrailingFields(traces, spans_);
  spans_.clear();
  return fields;
}

void DeviceTracing::AddSpan(HostSpanKind kind, int64_t start_ns, int64_t end_ns) {
  spans_.push_back(HostSpanData{kind, start_ns, end_ns, gstep_, lstep_, step_id_, thread_id_});
}

void DeviceTracing::OnStepEncoded(int64_t begin_ns, int64_t end_ns) {
  AddSpan(HostSpanKind::kCaptureEncode, begin_ns, end_ns);
}

void DeviceTracing::OnStepReturned(int64_t begin_ns, int64_t end_ns) {
  if (end_ns > begin_ns) AddSpan(HostSpanKind::kQueueWait, begin_ns, end_ns);
  ++step_id_;
  step_begin_ns_ = RealtimeNs();
  set_->StepBegin(step_id_);
}

std::string DeviceTracing::Finish() {
  if (finished_) return "";
  finished_ = true;
  set_->StepEnd(step_id_);
  set_->Stop().IgnoreError();
  const int64_t start = RealtimeNs();
  set_->Collect().IgnoreError();
  AddSpan(HostSpanKind::kDeviceCollect, start, RealtimeNs());
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
  stats->device_tracer_status = set_->StatusSummary();
}

}  // namespace internal
}  // namespace xdl_trace
