// Binding table for deferred (device) captures: PendingBytes and its values, fences, leases.
#include "device_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_fences.h"
#include "py_tensor.h"
#include "status.h"
#include "xdl_trace/deferred.h"
#include "xdl_trace/dtype.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

// The fence a Python fence object stands for; TypeError for anything else.
PendingBytes::Fence ToFence(const py::object& fence) {
  if (py::isinstance<CudaEventFence>(fence)) {
    auto cuda = fence.cast<std::shared_ptr<CudaEventFence>>();
    return [cuda] { return cuda->Wait(); };
  }
  if (py::isinstance<ManualFence>(fence)) {
    auto manual = fence.cast<std::shared_ptr<ManualFence>>();
    return [manual] { return manual->Wait(); };
  }
  throw py::type_error("xdl_trace: fence must be a CudaEventFence or a ManualFence, got " +
                       std::string(py::str(fence.get_type().attr("__name__"))));
}

}  // namespace

void RegisterDeviceBindings(py::module_& m) {
  py::class_<DeferredValue>(m, "DeferredValue",
                            "A value a device copy delivers later (PendingBytes.value).");

  py::class_<PendingBytes, std::shared_ptr<PendingBytes>>(
      m, "PendingBytes",
      "One step's device copies: values referring to it are written once it is armed and its "
      "fence completed (xdl_trace/deferred.h).")
      .def(py::init<>())
      .def(
          "value",
          [](const PendingBytes& p, size_t offset, int32_t dtype, std::vector<int64_t> shape,
             bool is_summary) {
            if (!IsValidDType(dtype)) {
              throw py::value_error("xdl_trace: PendingBytes.value: unknown dtype " +
                                    std::to_string(dtype));
            }
            DeferredValue value;
            value.captured.view.dtype = static_cast<DType>(dtype);
            value.captured.view.shape.assign(shape.begin(), shape.end());
            value.captured.deferred = p.bytes();
            value.captured.deferred_offset = offset;
            value.captured.is_summary = is_summary;
            return value;
          },
          py::arg("offset"), py::arg("dtype"), py::arg("shape"), py::arg("is_summary") = false)
      .def(
          "arm",
          [](PendingBytes& p, uintptr_t address, const py::object& fence,
             std::shared_ptr<StagingLease> lease) {
            p.Arm(reinterpret_cast<const char*>(address), ToFence(fence),
                  lease != nullptr ? lease->Hold() : nullptr);
          },
          py::arg("address"), py::arg("fence"), py::arg("lease") = nullptr)
      .def(
          "fail",
          [](PendingBytes& p, const std::string& message, bool dropped) {
            p.Fail(dropped ? absl::ResourceExhaustedError(message) : absl::InternalError(message));
          },
          py::arg("message"), py::arg("dropped") = false)
      .def_property_readonly("settled", &PendingBytes::settled);

  py::class_<CudaEventFence, std::shared_ptr<CudaEventFence>>(m, "CudaEventFence")
      .def(py::init([](std::vector<uintptr_t> events) {
             return ValueOrThrow(CudaEventFence::Make(std::move(events)));
           }),
           py::arg("events"), "cudaEvent_t handles (torch.cuda.Event.cuda_event), all waited on.");

  py::class_<ManualFence, std::shared_ptr<ManualFence>>(m, "ManualFence")
      .def(py::init<>())
      .def("complete", &ManualFence::Complete)
      .def("fail", &ManualFence::Fail, py::arg("message"));

  py::class_<StagingLease, std::shared_ptr<StagingLease>>(m, "StagingLease")
      .def(py::init<>())
      .def_property_readonly("busy", &StagingLease::busy)
      .def("wait_free", &StagingLease::WaitFree, py::arg("timeout_s"),
           py::call_guard<py::gil_scoped_release>());
}

}  // namespace python
}  // namespace xdl_trace
