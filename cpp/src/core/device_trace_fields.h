// Field numbers and enum values of device_trace.proto for encoders that cannot include generated
// code.
//
// The CUPTI plugin is a separate shared library: it must not link or register
// the generated device_trace.proto a second time (docs/device-path.md), so it
// writes DeviceTrace by hand through core/wire.h with these names.
// tests/cpp/core/wire_test.cc checks every constant against the generated
// kXxxFieldNumber and enum values, so the .proto stays the one source.
#ifndef XDL_TRACE_CORE_DEVICE_TRACE_FIELDS_H_
#define XDL_TRACE_CORE_DEVICE_TRACE_FIELDS_H_

#include <cstdint>

namespace xdl_trace {
namespace internal {
namespace device_trace_fields {

// xdl.proto.DeviceTrace
inline constexpr uint32_t kTraceTracer = 1;
inline constexpr uint32_t kTraceName = 2;
inline constexpr uint32_t kTraceDevice = 3;
inline constexpr uint32_t kTraceDroppedEvents = 4;
inline constexpr uint32_t kTraceStatus = 5;
inline constexpr uint32_t kTraceDroppedBuffers = 6;
// xdl.proto.Device
inline constexpr uint32_t kDeviceId = 1;
inline constexpr uint32_t kDeviceName = 2;
inline constexpr uint32_t kDeviceLine = 3;
inline constexpr uint32_t kDeviceStat = 4;
// xdl.proto.DeviceLine
inline constexpr uint32_t kLineId = 1;
inline constexpr uint32_t kLineName = 2;
inline constexpr uint32_t kLineEvent = 3;
// xdl.proto.DeviceEvent
inline constexpr uint32_t kEventNameIndex = 1;
inline constexpr uint32_t kEventKind = 2;
inline constexpr uint32_t kEventStartNs = 3;
inline constexpr uint32_t kEventEndNs = 4;
inline constexpr uint32_t kEventCorrelationId = 5;
inline constexpr uint32_t kEventExternalId = 6;
inline constexpr uint32_t kEventStat = 7;
// xdl.proto.DeviceStat
inline constexpr uint32_t kStatNameIndex = 1;
inline constexpr uint32_t kStatInt64Value = 2;
inline constexpr uint32_t kStatUint64Value = 3;
inline constexpr uint32_t kStatDoubleValue = 4;
inline constexpr uint32_t kStatStrValue = 5;
// xdl.proto.HostSpan
inline constexpr uint32_t kSpanKind = 1;
inline constexpr uint32_t kSpanStartNs = 2;
inline constexpr uint32_t kSpanEndNs = 3;
inline constexpr uint32_t kSpanGstep = 4;
inline constexpr uint32_t kSpanLstep = 5;
inline constexpr uint32_t kSpanCorrelationId = 6;
inline constexpr uint32_t kSpanThreadId = 7;
inline constexpr uint32_t kSpanSpansDropped = 8;
inline constexpr uint32_t kSpanRecords = 9;
// xdl.proto.Record
inline constexpr uint32_t kRecordDeviceTrace = 5;
inline constexpr uint32_t kRecordHostSpan = 6;

}  // namespace device_trace_fields

// Values of xdl.proto.DeviceEventKind, one row each: X(enumerator, the proto value's name after
// DEVICE_EVENT_, number). tests/cpp/core/wire_test.cc checks every row, and that none is missing.
#define XDL_DEVICE_EVENT_KINDS(X)         \
  X(kKernel, KERNEL, 1)                   \
  X(kMemcpy, MEMCPY, 2)                   \
  X(kMemset, MEMSET, 3)                   \
  X(kRuntimeApi, RUNTIME_API, 4)          \
  X(kDriverApi, DRIVER_API, 5)            \
  X(kSynchronization, SYNCHRONIZATION, 6) \
  X(kOverhead, OVERHEAD, 7)               \
  X(kOther, OTHER, 8)                     \
  X(kMarker, MARKER, 9)                   \
  X(kMemory, MEMORY, 10)

#define XDL_DEVICE_EVENT_KIND_ENUMERATOR(name, proto_name, value) name = value,
enum class DeviceEventKind : int { XDL_DEVICE_EVENT_KINDS(XDL_DEVICE_EVENT_KIND_ENUMERATOR) };
#undef XDL_DEVICE_EVENT_KIND_ENUMERATOR

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_DEVICE_TRACE_FIELDS_H_
