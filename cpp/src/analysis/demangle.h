// Kernel names as users read them in Kineto and Nsight: Itanium C++ ABI names (`_ZN5cudnn...`)
// demangled with abi::__cxa_demangle, memoized; any other name passes through unchanged.
#ifndef XDL_TRACE_ANALYSIS_DEMANGLE_H_
#define XDL_TRACE_ANALYSIS_DEMANGLE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace xdl_trace {
namespace internal {

// The demangled form of `name` when it is a mangled C++ name (starts with "_Z" and
// abi::__cxa_demangle accepts it); else `name` itself, so an already demangled name, a
// C function ("cudaLaunchKernel") or a malformed symbol comes back as it was. Thread-safe:
// results are kept in a process-wide cache of at most kDemangleCacheSize names (cleared
// whole when full; a trace has a few hundred distinct kernels).
std::string Demangle(absl::string_view name);

inline constexpr size_t kDemangleCacheSize = 1 << 16;

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_DEMANGLE_H_
