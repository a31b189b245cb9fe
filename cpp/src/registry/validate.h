// Checks shared by registration and capture: a tensor view the encoder and summaries can read,
// and how errors name an entry.
#ifndef XDL_TRACE_REGISTRY_VALIDATE_H_
#define XDL_TRACE_REGISTRY_VALIDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace internal {

// How errors name an entry of `kind`: "tensor", "variable", "gradient", "callback", "once"
// ("unknown" for a value outside the enum).
const char* EntryKindName(EntryKind kind);

// InvalidArgument prefixed by `what` (e.g. "tensor 'scope/w'") for an unknown
// dtype, a dimension that is negative or does not fit int32, or null data
// for a tensor with elements.
absl::Status ValidateView(const TensorView& view, absl::string_view what);
// The dtype and dimension checks alone: a deferred capture's bytes arrive later.
absl::Status ValidateShape(const TensorView& view, absl::string_view what);

// The same checks without a message: the per-step fast path (no allocation).
inline bool IsReadableView(const TensorView& view) {
  if (!IsValidDType(static_cast<int32_t>(view.dtype))) return false;
  bool empty = false;
  for (int64_t dim : view.shape) {
    if (dim < 0 || dim > INT32_MAX) return false;
    empty = empty || dim == 0;
  }
  return empty || view.data != nullptr;
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_REGISTRY_VALIDATE_H_
