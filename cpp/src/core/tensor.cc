// Owning copies of tensors.
#include "xdl_trace/tensor.h"

#include <utility>

namespace xdl_trace {

Tensor Tensor::CopyOf(const TensorView& view) {
  Tensor t;
  t.dtype = view.dtype;
  t.shape = view.shape;
  if (view.NumBytes() > 0) {
    t.bytes.assign(static_cast<const char*>(view.data), view.NumBytes());
  }
  return t;
}

CapturedTensor CapturedTensor::Owning(Tensor tensor) {
  auto owned = std::make_shared<const Tensor>(std::move(tensor));
  CapturedTensor captured;
  captured.view = owned->view();
  captured.keep_alive = std::move(owned);
  return captured;
}

}  // namespace xdl_trace
