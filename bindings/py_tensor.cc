// Numpy <-> tensor conversions and Python callables wrapped for the core (GIL taken inside).
#include "py_tensor.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "status.h"
#include "xdl_trace/dtype.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

bool InterpreterIsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// numpy (kind, itemsize) -> wire dtype; false when unsupported. The pairs come
// from the dtype table: every row numpy spells as the wire does (not byte,
// which numpy reads as uint8, nor bfloat16, which numpy lacks).
bool DTypeFromNumpy(const py::dtype& dtype, DType* out) {
  struct NumpyType {
    char kind;
    py::ssize_t itemsize;
    DType wire;
  };
  // Built once with the GIL held and never destroyed (no teardown order issues).
  static const std::vector<NumpyType>* types = [] {
    auto* t = new std::vector<NumpyType>();
    for (int32_t value = 0; value < kNumDTypes; ++value) {
      const DTypeInfo& info = GetDTypeInfo(static_cast<DType>(value));
      if (absl::string_view(info.name) != info.numpy_name) continue;
      const py::dtype numpy(std::string(info.numpy_name));
      t->push_back({numpy.kind(), numpy.itemsize(), info.dtype});
    }
    return t;
  }();
  for (const NumpyType& type : *types) {
    if (type.kind == dtype.kind() && type.itemsize == dtype.itemsize()) {
      *out = type.wire;
      return true;
    }
  }
  return false;
}

// "int8, int16, ...; bfloat16 from torch": the dtypes DTypeFromNumpy accepts, for messages.
const std::string& SupportedNumpyDTypes() {
  static const std::string* names = [] {
    std::vector<absl::string_view> numpy;
    for (int32_t value = 0; value < kNumDTypes; ++value) {
      const DTypeInfo& info = GetDTypeInfo(static_cast<DType>(value));
      if (absl::string_view(info.name) == info.numpy_name) numpy.push_back(info.name);
    }
    return new std::string(absl::StrCat(absl::StrJoin(numpy, ", "), "; bfloat16 from torch"));
  }();
  return *names;
}

// A numpy copy of `view` for a Python summary.
py::array CopyToNumpy(const TensorView& view) {
  std::vector<py::ssize_t> shape(view.shape.begin(), view.shape.end());
  if (view.dtype == DType::kBFloat16) {
    py::array_t<float> out(shape);
    const auto* in = static_cast<const uint16_t*>(view.data);
    float* dst = out.mutable_data();
    for (int64_t i = 0; i < view.NumElements(); ++i) {
      const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
      std::memcpy(&dst[i], &bits, sizeof(bits));
    }
    return std::move(out);
  }
  const char* name = view.dtype == DType::kByte ? "uint8" : DTypeName(view.dtype).data();
  py::array out(py::dtype(name), shape);
  if (view.NumBytes() > 0) std::memcpy(out.mutable_data(), view.data, view.NumBytes());
  return out;
}

// Runs `body` (which may raise) and turns a Python exception into a parked
// error status.
template <typename T, typename Body>
absl::StatusOr<T> CallPython(Body body) {
  try {
    return body();
  } catch (py::error_already_set& error) {
    return PendingPythonError::Park(error);
  } catch (py::builtin_exception& error) {
    error.set_error();
    py::error_already_set fetched;
    return PendingPythonError::Park(fetched);
  }
}

}  // namespace

std::shared_ptr<const void> KeepAlive(py::object object) {
  PyObject* raw = object.release().ptr();
  return std::shared_ptr<const void>(raw, [](const void* ptr) {
    if (!Py_IsInitialized() || InterpreterIsFinalizing()) return;  // Leak at exit.
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(const_cast<void*>(ptr)));
  });
}

absl::StatusOr<CapturedTensor> CaptureArray(py::handle object, int dtype_override,
                                            const std::string& key) {
  if (!py::isinstance<py::array>(object)) {
    return TypeErrorStatus(absl::StrCat("key '", key, "': expected a numpy array, got ",
                                        std::string(py::str(object.get_type().attr("__name__")))));
  }
  py::array array = py::reinterpret_borrow<py::array>(object);
  const py::dtype dtype = array.dtype();
  DType wire;
  if (!DTypeFromNumpy(dtype, &wire)) {
    return TypeErrorStatus(absl::StrCat("key '", key, "': unsupported dtype ",
                                        std::string(py::str(py::handle(dtype))),
                                        " (supported: ", SupportedNumpyDTypes(), ")"));
  }
  if (dtype_override != kDTypeFromArray) {
    if (!IsValidDType(dtype_override) ||
        DTypeSize(static_cast<DType>(dtype_override)) != DTypeSize(wire)) {
      return absl::InvalidArgumentError(absl::StrCat("key '", key, "': dtype override ",
                                                     dtype_override, " does not fit ",
                                                     std::string(py::str(py::handle(dtype)))));
    }
    wire = static_cast<DType>(dtype_override);
  }
  const int flags = array.flags();
  if (!(flags & py::array::c_style) || !(flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", key, "': array is not C-contiguous and aligned"));
  }
  if (dtype.byteorder() == '>') {
    return absl::InvalidArgumentError(absl::StrCat("key '", key, "': array is big-endian"));
  }
  CapturedTensor captured;
  captured.view.dtype = wire;
  captured.view.shape.assign(array.shape(), array.shape() + array.ndim());
  captured.view.data = array.data();
  captured.keep_alive = KeepAlive(std::move(array));
  return captured;
}

absl::StatusOr<CapturedTensor> CaptureValue(py::handle object, const std::string& key) {
  if (py::isinstance<DeferredValue>(object)) return object.cast<const DeferredValue&>().captured;
  if (py::isinstance<py::tuple>(object)) {
    py::tuple pair = py::reinterpret_borrow<py::tuple>(object);
    if (pair.size() == 2) return CaptureArray(pair[0], pair[1].cast<int>(), key);
  }
  return CaptureArray(object, kDTypeFromArray, key);
}

TensorProvider MakeProvider(py::object fn, std::string key) {
  std::shared_ptr<const void> holder = KeepAlive(fn);
  PyObject* callable = fn.ptr();  // Alive as long as `holder`.
  return [holder, callable, key = std::move(key)]() -> absl::StatusOr<CapturedTensor> {
    py::gil_scoped_acquire gil;
    return CallPython<CapturedTensor>([&]() -> absl::StatusOr<CapturedTensor> {
      return CaptureValue(py::reinterpret_borrow<py::object>(callable)(), key);
    });
  };
}

SummaryFn MakeSummaryFn(py::object fn, std::string key) {
  std::shared_ptr<const void> holder = KeepAlive(fn);
  PyObject* callable = fn.ptr();
  return
      [holder, callable, key = std::move(key)](const TensorView& view) -> absl::StatusOr<Tensor> {
        py::gil_scoped_acquire gil;
        return CallPython<Tensor>([&]() -> absl::StatusOr<Tensor> {
          py::object result = py::reinterpret_borrow<py::object>(callable)(CopyToNumpy(view));
          absl::StatusOr<CapturedTensor> captured = CaptureArray(result, kDTypeFromArray, key);
          if (!captured.ok()) return captured.status();
          return Tensor::CopyOf(captured->view);
        });
      };
}

}  // namespace python
}  // namespace xdl_trace
