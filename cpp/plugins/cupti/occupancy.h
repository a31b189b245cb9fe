// How many blocks of a kernel launch fit on one SM at once, by NVIDIA's occupancy calculator
// (cuda_occupancy.h) against the device's limits (CUPTI's DEVICE record, or the driver's
// attributes where CUDA started before the tracer), as Kineto computes it.
#ifndef XDL_TRACE_PLUGINS_CUPTI_OCCUPANCY_H_
#define XDL_TRACE_PLUGINS_CUPTI_OCCUPANCY_H_

#include <cuda_occupancy.h>
#include <cupti.h>

#include <cstddef>
#include <cstdint>

#include "cupti_api.h"

namespace xdl_trace {
namespace cupti {

// The device's limits from its DEVICE record. The record lacks what the driver
// reserves of shared memory per block (cudaDeviceProp::reservedSharedMemPerBlock:
// 1 KB from compute capability 8.0 on, 0 before) and what a block may opt into
// (the SM's shared memory less that reserve): both are derived.
cudaOccDeviceProp DeviceLimits(const CUpti_ActivityDevice5& device);
// The same from the driver's attributes (which hold both).
cudaOccDeviceProp DeviceLimits(const DriverDeviceLimits& device);

// Blocks of `block_threads` threads using `registers` registers a thread and
// `static_shared` + `dynamic_shared` bytes of shared memory a block that the
// calculator places on one SM at once (the default carveout): 0 where none
// fits (a block larger than the device allows), -1 where it refuses the input
// (an unknown compute capability). A launch with more shared memory than a block gets by
// default had opted in, and is asked so (Kineto asks every launch with the
// default limit, and reads 0 for those: cuDNN's sm90 kernels with 226 KB).
int32_t ActiveBlocksPerSm(const cudaOccDeviceProp& device, int64_t block_threads, int64_t registers,
                          size_t static_shared, size_t dynamic_shared);

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_OCCUPANCY_H_
