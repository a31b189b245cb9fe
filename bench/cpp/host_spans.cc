// Host-span figures: what host spans add to a traced step (HostSpanRecorder: STEP,
// CAPTURE_ENCODE, QUEUE_WAIT) and what noting a not-traced step costs (its STEP_NOT_TRACED span).
// Prints figures and never judges them (docs/writer.md, "Host spans"):
//   build/bench/xdl_trace_bench_host_spans
#include "record/host_spans.h"

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "core/clock.h"

int main() {
  using xdl_trace::internal::HostSpanRecorder;
  using Clock = std::chrono::steady_clock;
  constexpr int kSteps = 1000000;
  HostSpanRecorder extras;
  size_t bytes = 0;
  auto begin = Clock::now();
  for (int i = 0; i < kSteps; ++i) {
    extras.OnStepCalled(i, i);
    bytes += extras.TakeTrailingFields().size();
    const int64_t t = xdl_trace::internal::WallClockNs();
    extras.OnStepEncoded(t, xdl_trace::internal::WallClockNs());
    const int64_t u = xdl_trace::internal::WallClockNs();
    extras.OnStepReturned(u, xdl_trace::internal::WallClockNs());
  }
  const double traced_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - begin).count() / kSteps;
  HostSpanRecorder not_traced;
  size_t not_traced_bytes = 0;
  begin = Clock::now();
  for (int i = 0; i < kSteps; ++i) {
    not_traced.OnStepNotTraced(i, i);
    if (i % 1000 == 999) not_traced_bytes += not_traced.TakeTrailingFields().size();
  }
  const double untraced_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - begin).count() / kSteps;
  std::printf(
      "host spans: %.0f ns and %.0f bytes per traced step (STEP, CAPTURE_ENCODE, QUEUE_WAIT: "
      "5 clock reads, encode); %.0f ns per not-traced step noted (encode included)\n",
      traced_ns, static_cast<double>(bytes) / kSteps, untraced_ns);
  return bytes > 0 && not_traced_bytes > 0 ? 0 : 1;
}
