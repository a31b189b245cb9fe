// Occupancy of a kernel launch by NVIDIA's calculator (see occupancy.h).
#include "occupancy.h"

#include <climits>

namespace xdl_trace {
namespace cupti {

cudaOccDeviceProp DeviceLimits(const CUpti_ActivityDevice5& device) {
  cudaOccDeviceProp prop;
  prop.computeMajor = static_cast<int>(device.computeCapabilityMajor);
  prop.computeMinor = static_cast<int>(device.computeCapabilityMinor);
  prop.maxThreadsPerBlock = static_cast<int>(device.maxThreadsPerBlock);
  prop.maxThreadsPerMultiprocessor =
      static_cast<int>(device.maxWarpsPerMultiprocessor * device.numThreadsPerWarp);
  prop.regsPerBlock = static_cast<int>(device.maxRegistersPerBlock);
  prop.regsPerMultiprocessor = static_cast<int>(device.maxRegistersPerMultiprocessor);
  prop.warpSize = static_cast<int>(device.numThreadsPerWarp);
  prop.sharedMemPerBlock = device.maxSharedMemoryPerBlock;
  prop.sharedMemPerMultiprocessor = device.maxSharedMemoryPerMultiprocessor;
  prop.numSms = static_cast<int>(device.numMultiprocessors);
  prop.reservedSharedMemPerBlock = device.computeCapabilityMajor >= 8 ? 1024 : 0;
  // Not in the record either: what a block may opt into is the SM's shared memory less that
  // reserve (H100 227 KB, A100 163 KB, sm_86 99 KB, V100 96 KB).
  prop.sharedMemPerBlockOptin = prop.sharedMemPerMultiprocessor - prop.reservedSharedMemPerBlock;
  return prop;
}

cudaOccDeviceProp DeviceLimits(const DriverDeviceLimits& device) {
  cudaOccDeviceProp prop;
  prop.computeMajor = device.compute_major;
  prop.computeMinor = device.compute_minor;
  prop.maxThreadsPerBlock = device.max_threads_per_block;
  prop.maxThreadsPerMultiprocessor = device.max_threads_per_sm;
  prop.regsPerBlock = device.registers_per_block;
  prop.regsPerMultiprocessor = device.registers_per_sm;
  prop.warpSize = device.warp_size;
  prop.sharedMemPerBlock = static_cast<size_t>(device.shared_per_block);
  prop.sharedMemPerMultiprocessor = static_cast<size_t>(device.shared_per_sm);
  prop.numSms = device.sm_count;
  prop.sharedMemPerBlockOptin = static_cast<size_t>(device.shared_per_block_optin);
  prop.reservedSharedMemPerBlock = static_cast<size_t>(device.reserved_shared_per_block);
  return prop;
}

int32_t ActiveBlocksPerSm(const cudaOccDeviceProp& device, int64_t block_threads, int64_t registers,
                          size_t static_shared, size_t dynamic_shared) {
  if (block_threads <= 0 || block_threads > INT_MAX || registers < 0 || registers > INT_MAX) {
    return -1;
  }
  cudaOccFuncAttributes function;
  function.maxThreadsPerBlock = INT_MAX;
  function.numRegs = static_cast<int>(registers);
  function.sharedSizeBytes = static_shared;
  function.partitionedGCConfig = PARTITIONED_GC_OFF;
  // A kernel that ran with more shared memory than a block gets by default had opted in.
  function.shmemLimitConfig = static_shared + dynamic_shared > device.sharedMemPerBlock
                                  ? FUNC_SHMEM_LIMIT_OPTIN
                                  : FUNC_SHMEM_LIMIT_DEFAULT;
  function.maxDynamicSharedSizeBytes = dynamic_shared;
  const cudaOccDeviceState state;
  cudaOccResult result;
  if (cudaOccMaxActiveBlocksPerMultiprocessor(&result, &device, &function, &state,
                                              static_cast<int>(block_threads),
                                              dynamic_shared) != CUDA_OCC_SUCCESS) {
    return -1;
  }
  return result.activeBlocksPerMultiprocessor;
}

}  // namespace cupti
}  // namespace xdl_trace
