// Tensor views the tracer reads from and small owned tensors it produces.
#ifndef XDL_TRACE_TENSOR_H_
#define XDL_TRACE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "xdl_trace/dtype.h"

namespace xdl_trace {

using Shape = absl::InlinedVector<int64_t, 4>;

// A borrowed, C-contiguous, little-endian tensor. The tracer never owns `data`;
// whoever hands out a view keeps the memory alive and unchanged while the
// tracer reads it (for a registered tensor: for the whole trace).
struct TensorView {
  DType dtype = DType::kFloat32;
  Shape shape;                 // Empty for a scalar.
  const void* data = nullptr;  // May be null only when NumElements() == 0.

  // Inline: the report's scan asks it several times per small tensor.
  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
};

// A tensor that owns its bytes: summaries, once-values, test data.
struct Tensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string bytes;  // NumElements() * DTypeSize(dtype) bytes.

  TensorView view() const { return TensorView{dtype, shape, bytes.data()}; }
  // Copies `view` (the one copy a once-value or a summary input makes).
  static Tensor CopyOf(const TensorView& view);
};

class DeferredBytes;  // xdl_trace/deferred.h

// A view plus whatever keeps its memory alive until the record that reads it
// has been encoded, or written under WriteMode::kInline (a Python array, a
// torch tensor, an owned Tensor). The keep-alive is released on the thread
// that encodes the record.
//
// Deferred (`deferred` set): the bytes are not in host memory yet, e.g. a
// device-to-host copy in flight. `view` gives dtype and shape (view.data is
// ignored); the bytes will be at deferred->Wait() + deferred_offset, which the
// IO thread waits for before writing the record (docs/device-path.md,
// "Staging and fences"). Step returns without waiting.
struct CapturedTensor {
  TensorView view;
  std::shared_ptr<const void> keep_alive;
  std::shared_ptr<DeferredBytes> deferred;
  size_t deferred_offset = 0;
  // The value already is the entry's built-in summary (computed by whoever
  // captured it, e.g. on the device, with the definitions of registry.h): the
  // tracer checks its shape and does not summarize it again.
  bool is_summary = false;

  static CapturedTensor Owning(Tensor tensor);
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_TENSOR_H_
