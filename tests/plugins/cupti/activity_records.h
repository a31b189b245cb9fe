// Test support: CUPTI activity records as CUPTI writes them, for the tests and the synthetic GPU.
#ifndef XDL_TRACE_TESTS_PLUGINS_CUPTI_ACTIVITY_RECORDS_H_
#define XDL_TRACE_TESTS_PLUGINS_CUPTI_ACTIVITY_RECORDS_H_

#include <cupti.h>

#include <cstdint>
#include <cstring>

#include "cupti_api.h"

namespace xdl_trace {
namespace cupti {
namespace testing {

// A record of type T, zeroed as CUPTI leaves unused fields, of kind `kind`.
template <typename T>
T ZeroedRecord(CUpti_ActivityKind kind) {
  T r;
  std::memset(&r, 0, sizeof(r));
  r.kind = kind;
  return r;
}

// Work on a stream of device 0: [start, end) for `correlation`.
template <typename T>
T StreamWork(CUpti_ActivityKind kind, uint32_t correlation, uint64_t start, uint64_t end,
             uint32_t stream) {
  T r = ZeroedRecord<T>(kind);
  r.start = start;
  r.end = end;
  r.streamId = stream;
  r.correlationId = correlation;
  return r;
}

// A kernel of a 128x1x1 grid of 256x1x1 blocks, 32 registers a thread.
inline CUpti_ActivityKernel10 KernelRecord(uint32_t correlation, uint64_t start, uint64_t end,
                                           uint32_t stream, const char* name) {
  auto r = StreamWork<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, correlation,
                                              start, end, stream);
  r.name = name;
  r.gridX = 128, r.gridY = 1, r.gridZ = 1;
  r.blockX = 256, r.blockY = 1, r.blockZ = 1;
  r.registersPerThread = 32;
  return r;
}

inline CUpti_ActivityMemcpy6 MemcpyRecord(uint32_t correlation, uint64_t start, uint64_t end,
                                          uint64_t bytes, uint32_t stream,
                                          CUpti_ActivityMemcpyKind copy_kind) {
  auto r = StreamWork<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY, correlation, start, end,
                                             stream);
  r.copyKind = copy_kind;
  r.bytes = bytes;
  return r;
}

inline CUpti_ActivityMemset4 MemsetRecord(uint32_t correlation, uint64_t start, uint64_t end,
                                          uint64_t bytes, uint32_t stream) {
  auto r = StreamWork<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET, correlation, start, end,
                                             stream);
  r.bytes = bytes;
  return r;
}

// A CUDA runtime API call `cbid` on thread `thread` of process 1.
inline CUpti_ActivityAPI RuntimeRecord(uint32_t correlation, uint64_t start, uint64_t end,
                                       uint32_t cbid, uint32_t thread) {
  auto r = ZeroedRecord<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  r.cbid = cbid;
  r.start = start;
  r.end = end;
  r.processId = 1;
  r.threadId = thread;
  r.correlationId = correlation;
  return r;
}

// The external id (a step, for the tracer's own kind) pushed around call `correlation`.
inline CUpti_ActivityExternalCorrelation ExternalRecord(uint32_t correlation, uint64_t external_id,
                                                        CUpti_ExternalCorrelationKind kind) {
  auto r =
      ZeroedRecord<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  r.externalKind = kind;
  r.externalId = external_id;
  r.correlationId = correlation;
  return r;
}

// Device `id`, an H100 80GB HBM3 as CUDA reports it (torch.profiler's deviceProperties of the
// H100 run in tests/data/h100_conv): 132 SMs, 64 warps of 32 threads, 65536 registers and 228 KB
// of shared memory an SM, 48 KB a block by default, compute capability 9.0.
inline CUpti_ActivityDevice5 H100DeviceRecord(uint32_t id = 0) {
  auto r = ZeroedRecord<CUpti_ActivityDevice5>(CUPTI_ACTIVITY_KIND_DEVICE);
  r.id = id;
  r.name = "NVIDIA H100 80GB HBM3";
  r.numMultiprocessors = 132;
  r.numThreadsPerWarp = 32;
  r.maxWarpsPerMultiprocessor = 64;
  r.maxBlocksPerMultiprocessor = 32;
  r.maxRegistersPerMultiprocessor = 65536;
  r.maxRegistersPerBlock = 65536;
  r.maxSharedMemoryPerMultiprocessor = 233472;
  r.maxSharedMemoryPerBlock = 49152;
  r.maxThreadsPerBlock = 1024;
  r.computeCapabilityMajor = 9;
  r.computeCapabilityMinor = 0;
  return r;
}

// The same H100 as its driver reports it (cuDeviceGetAttribute), with what the DEVICE record
// lacks: 227 KB a block may opt into (sharedMemPerBlockOptin in the same deviceProperties), 1 KB
// reserved a block.
inline DriverDeviceLimits H100DriverLimits(int32_t id = 0) {
  DriverDeviceLimits d;
  d.id = id;
  d.compute_major = 9;
  d.compute_minor = 0;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.warp_size = 32;
  d.registers_per_block = 65536;
  d.registers_per_sm = 65536;
  d.shared_per_block = 49152;
  d.shared_per_block_optin = 232448;
  d.shared_per_sm = 233472;
  d.reserved_shared_per_block = 1024;
  d.sm_count = 132;
  return d;
}

}  // namespace testing
}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_TESTS_PLUGINS_CUPTI_ACTIVITY_RECORDS_H_
