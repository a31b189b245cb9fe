// Config values (megabytes, seconds) as the integers the IO path counts in, saturating, never
// overflowing.
//
// TraceConfig::Validate rejects non-finite values; a huge finite one means
// "no practical limit" and must not wrap around (a byte limit that wraps
// negative rolls over at every record, a deadline that wraps into the past
// makes the IO thread spin).
#ifndef XDL_TRACE_IO_LIMITS_H_
#define XDL_TRACE_IO_LIMITS_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

namespace xdl_trace {
namespace internal {

// `megabytes` × 10^6 rounded to bytes, clamped to [0, INT64_MAX]; NaN is 0.
inline int64_t MegabytesToBytes(double megabytes) {
  const double bytes = std::round(megabytes * 1e6);
  if (!(bytes > 0)) return 0;
  // 2^63 is the first double past INT64_MAX.
  if (bytes >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(bytes);
}

// `now` + `seconds`, or time_point::max() (never) when `seconds` is not > 0,
// or when the sum would pass what the clock can represent.
template <typename Clock>
typename Clock::time_point DeadlineAfter(typename Clock::time_point now, double seconds) {
  using TimePoint = typename Clock::time_point;
  if (!(seconds > 0)) return TimePoint::max();
  const std::chrono::duration<double> room = TimePoint::max() - now;
  // A second of margin covers the rounding of room and of the conversion.
  if (seconds >= room.count() - 1.0) return TimePoint::max();
  return now + std::chrono::duration_cast<typename Clock::duration>(
                   std::chrono::duration<double>(seconds));
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_LIMITS_H_
