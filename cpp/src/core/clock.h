// The one wall clock (CLOCK_REALTIME) and run-id generator; std-only so the CUPTI plugin can use
// it.
#ifndef XDL_TRACE_CORE_CLOCK_H_
#define XDL_TRACE_CORE_CLOCK_H_

#include <time.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

namespace xdl_trace {
namespace internal {

// CLOCK_REALTIME in nanoseconds: host spans, device events and record
// timestamps share this axis.
inline int64_t WallClockNs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Milliseconds since the Unix epoch (Record.timestamp, Meta timestamps).
inline int64_t WallClockMs() { return WallClockNs() / 1000000; }

// A new run id: 128 random bits as 32 lower-case hex digits.
inline std::string NewRunId() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(WallClockNs()));
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64 "%016" PRIx64, rng(), rng());
  return buf;
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_CLOCK_H_
