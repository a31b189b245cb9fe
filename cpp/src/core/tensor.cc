// Element counts and owning copies of tensors.
#include "xdl_trace/tensor.h"

#include <utility>

namespace xdl_trace {

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

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
