// What the stats, curve and diff loops share: the non-finite doubles they write, and whether the
// CPU has AVX2 (the guard of their vector paths), asked once per process.
#ifndef XDL_TRACE_CORE_NUMERIC_H_
#define XDL_TRACE_CORE_NUMERIC_H_

#include <limits>

namespace xdl_trace {
namespace internal {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Whether the CPU running the process supports AVX2: the loops compiled with
// __attribute__((target("avx2"))) are taken only then.
inline bool HaveAvx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_NUMERIC_H_
