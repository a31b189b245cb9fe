// Binding table for deferred (device) captures: PendingBytes and its values, fences, leases.
#include "device_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device_fences.h"
#include "py_tensor.h"
#include "status.h"
#include "xdl_trace/deferred.h"
#include "xdl_trace/dtype.h"
#include "xdl_trace/registry.h"

namespace py = pybind11;

namespace xdl_trace {
namespace python {
namespace {

// The fence a Python fence object stands for; TypeError for anything else.
PendingBytes::Fence ToFence(const py::object& fence) {
  if (py::isinstance<CudaEventFence>(fence)) {
    auto cuda = fence.cast<std::shared_ptr<CudaEventFence>>();
    return [cuda](PendingBytes::Deadline deadline) { return cuda->Wait(deadline); };
  }
  if (py::isinstance<ManualFenceForTesting>(fence)) {
    auto manual = fence.cast<std::shared_ptr<ManualFenceForTesting>>();
    return [manual](PendingBytes::Deadline deadline) { return manual->Wait(deadline); };
  }
  throw py::type_error(
      "xdl_trace: fence must be a CudaEventFence or a ManualFenceForTesting, got " +
      std::string(py::str(fence.get_type().attr("__name__"))));
}

// A GroupLayout: each member's value as a deferred capture template (dtype,
// shape, offset from the group's first byte, is_summary).
struct GroupLayout {
  std::vector<CapturedTensor> members;
};

}  // namespace

void RegisterDeviceBindings(py::module_& m) {
  py::class_<GroupMember>(m, "GroupMember", "Member i of a ValueGroup, registered as a provider.");

  py::class_<GroupLayout>(m, "GroupLayout")
      .def(py::init([](const std::vector<std::tuple<size_t, int32_t, std::vector<int64_t>, bool>>&
                           members) {
             GroupLayout layout;
             for (const auto& [offset, dtype, shape, is_summary] : members) {
               if (!IsValidDType(dtype)) {
                 throw py::value_error("xdl_trace: GroupLayout: unknown dtype " +
                                       std::to_string(dtype));
               }
               CapturedTensor captured;
               captured.view.dtype = static_cast<DType>(dtype);
               captured.view.shape.assign(shape.begin(), shape.end());
               captured.deferred_offset = offset;
               captured.is_summary = is_summary;
               layout.members.push_back(std::move(captured));
             }
             return layout;
           }),
           py::arg("members"), "[(offset, dtype, shape, is_summary)] per member.");

  py::class_<ValueGroup, std::shared_ptr<ValueGroup>>(
      m, "ValueGroup", "Values of several entries set once per step (xdl_trace/registry.h).")
      .def(py::init<size_t>(), py::arg("size"))
      .def(
          "member",
          [](const std::shared_ptr<ValueGroup>& g, size_t i) {
            if (i >= g->size()) throw py::index_error("xdl_trace: ValueGroup.member: index");
            return GroupMember{g, i};
          },
          py::arg("index"))
      .def(
          "set_deferred",
          [](ValueGroup& g, const PendingBytes& pending, size_t base, const GroupLayout& layout) {
            std::vector<CapturedTensor> values = layout.members;
            for (CapturedTensor& value : values) {
              value.deferred = pending.bytes();
              value.deferred_offset += base;
            }
            ThrowIfError(g.Set(std::move(values)));
          },
          py::arg("pending"), py::arg("base"), py::arg("layout"))
      .def(
          "set_values",
          [](ValueGroup& g, const std::vector<py::object>& values,
             const std::vector<std::string>& keys) {
            std::vector<CapturedTensor> captured;
            captured.reserve(values.size());
            for (size_t i = 0; i < values.size(); ++i) {
              captured.push_back(
                  ValueOrThrow(CaptureValue(values[i], i < keys.size() ? keys[i] : "")));
            }
            ThrowIfError(g.Set(std::move(captured)));
          },
          py::arg("values"), py::arg("keys"))
      .def(
          "set_empty",
          [](ValueGroup& g) {
            Tensor empty;
            empty.shape = {0};
            std::vector<CapturedTensor> values(g.size(), CapturedTensor::Owning(std::move(empty)));
            ThrowIfError(g.Set(std::move(values)));
          },
          "Every member writes an empty float32 column this step.");

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
          py::arg("message"), py::arg("dropped") = false);

  py::class_<CudaEventFence, std::shared_ptr<CudaEventFence>>(m, "CudaEventFence")
      .def(py::init([](std::vector<uintptr_t> events) {
             return ValueOrThrow(CudaEventFence::Make(std::move(events)));
           }),
           py::arg("events"), "cudaEvent_t handles (torch.cuda.Event.cuda_event), all waited on.");

  py::class_<ManualFenceForTesting, std::shared_ptr<ManualFenceForTesting>>(m,
                                                                            "ManualFenceForTesting")
      .def(py::init<>())
      .def("complete", &ManualFenceForTesting::Complete)
      .def("fail", &ManualFenceForTesting::Fail, py::arg("message"));

  py::class_<StagingLease, std::shared_ptr<StagingLease>>(m, "StagingLease")
      .def(py::init<>())
      .def_property_readonly("busy", &StagingLease::busy)
      .def("wait_free", &StagingLease::WaitFree, py::arg("timeout_s"),
           py::call_guard<py::gil_scoped_release>());
}

}  // namespace python
}  // namespace xdl_trace
