// The tracer's side of device tracing: host step spans, step ids, Record fields 5 and 6.
#ifndef XDL_TRACE_PLUGIN_DEVICE_TRACING_H_
#define XDL_TRACE_PLUGIN_DEVICE_TRACING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "device_trace.pb.h"
#include "plugin/device_tracer_set.h"
#include "record/record_extras.h"
#include "xdl_trace/config.h"
#include "xdl_trace/stats.h"

namespace xdl_trace {
namespace internal {

// One xdl.proto.HostSpan, kept as a plain struct until its record is encoded.
struct HostSpanData {
  xdl::proto::HostSpan::Kind kind = xdl::proto::HostSpan::STEP;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t gstep = 0;
  int64_t lstep = 0;
  uint64_t correlation_id = 0;
  int64_t thread_id = 0;
};

// Serialized Record fields: `device_traces` (serialized DeviceTrace) as field 5
// each, `spans` as field 6 each, ready for EncodeRecord's trailing_fields.
std::string EncodeDeviceTrailingFields(absl::Span<const std::string> device_traces,
                                       absl::Span<const HostSpanData> spans);

// Environment overrides of TraceConfig::device_collect_interval_s and
// TraceConfig::device_plugin_config, read by DeviceTracing::Start.
inline constexpr char kCollectIntervalEnv[] = "XDL_TRACE_DEVICE_COLLECT_INTERVAL_S";
inline constexpr char kPluginConfigEnv[] = "XDL_TRACE_PLUGIN_CONFIG";  // "key=value;..."

// The RecordExtras (record/record_extras.h) behind config.device_tracers.
// Host spans and device events share core/clock.h's WallClockNs().
// Threading: the training thread calls everything except FillStats(), which
// any thread may call.
//
// Host spans: STEP runs from the previous Step() return (or Start) to this
// Step() call and carries the step's correlation id, which device tracers
// attach to the work launched meanwhile; CAPTURE_ENCODE and QUEUE_WAIT are
// this Step()'s own work and ride in the next record; DEVICE_COLLECT marks a
// collection. Device tracers are collected when device_collect_interval_s has
// passed (checked once per step), never per step by default, and at Finish().
class DeviceTracing final : public RecordExtras {
 public:
  // Starts every tracer in config.device_tracers (must be non-empty). An
  // unavailable tracer is logged once to stderr and shown in stats, not an
  // error. `options.plugin_config` is replaced by the config's (or the
  // environment's); the buffer caps are kept.
  static absl::StatusOr<std::unique_ptr<DeviceTracing>> Start(const TraceConfig& config,
                                                              DeviceTracerSetOptions options = {});
  ~DeviceTracing() override;

  void OnStepCalled(int64_t gstep, int64_t lstep) override;
  std::string TakeTrailingFields() override;
  void OnStepEncoded(int64_t begin_ns, int64_t end_ns) override;
  void OnStepReturned(int64_t begin_ns, int64_t end_ns) override;
  // The not-traced step ends: its device work keeps its own correlation id
  // (on its STEP_NOT_TRACED span), and the next STEP span starts at its end.
  void OnStepNotTraced(int64_t gstep, int64_t lstep, int64_t begin_ns, int64_t end_ns) override;
  uint64_t CurrentCorrelationId() const override { return step_id_; }
  // Stops the tracers and returns the fields not yet taken ("" when no device
  // events are left: host spans alone do not justify a record).
  std::string Finish() override;
  // device_events / device_events_dropped / device_tracer_status.
  void FillStats(TraceStats* stats) const override;

 private:
  DeviceTracing(std::unique_ptr<DeviceTracerSet> set, double collect_interval_s);
  void AddSpan(xdl::proto::HostSpan::Kind kind, int64_t start_ns, int64_t end_ns);

  const std::unique_ptr<DeviceTracerSet> set_;
  const int64_t collect_interval_ns_;
  const int64_t thread_id_;
  // Training thread only:
  uint64_t step_id_ = 1;  // Correlation id of the step in progress.
  int64_t step_begin_ns_ = 0;
  int64_t gstep_ = 0;  // Of the last Step() call.
  int64_t lstep_ = 0;
  int64_t last_collect_ns_ = 0;
  std::vector<HostSpanData> spans_;  // Finished, not yet in a record.
  bool finished_ = false;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGIN_DEVICE_TRACING_H_
