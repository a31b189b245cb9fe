// A stand-in for the GPU and driver side of CUPTI: fills activity buffers shaped like an H100's.
#ifndef XDL_TRACE_TESTS_PLUGINS_CUPTI_SYNTHETIC_GPU_H_
#define XDL_TRACE_TESTS_PLUGINS_CUPTI_SYNTHETIC_GPU_H_

#include <memory>
#include <string>

#include "cupti_api.h"

namespace xdl_trace {
namespace cupti {

struct SyntheticGpuOptions {
  double events_per_second = 1e6;  // Device events (API calls + device work) per second.
  int streams = 4;                 // Kernels, copies and memsets go round these streams.
  // Calls per 1000 made from "another thread" (autograd's): a thread id of
  // their own and no EXTERNAL_CORRELATION record, as with other_threads=0 on
  // a GPU (0: every call is the training thread's, with its step).
  int other_thread_per_mille = 0;
  // The application's CUDA started before the tracer: no DEVICE record at enable; the driver
  // reports the H100 (InitializedDevices). Else its DEVICE record comes at enable.
  bool cuda_started = false;
};

// Reads "synthetic_rate=N;synthetic_streams=N;synthetic_other_threads=N (per
// mille);synthetic_cuda_started=0|1" (the plugin config); other keys are ignored.
SyntheticGpuOptions ParseSyntheticGpuOptions(const std::string& config);

// A CuptiApi whose "device" is a thread writing real CUPTI activity records
// (the structs of the installed cupti_activity.h) into the buffers the tracer
// hands out, at options.events_per_second, in the mix of the H100 "conv" run
// (h100_kernel_names.inc; per launch an EXTERNAL_CORRELATION record for the
// step pushed last, a RUNTIME record and the kernel, memset or copy; some API
// calls launch nothing, as cudaGetErrorString there). Buffers are completed on
// that thread when full and inside ActivityFlushAll, as CUPTI does. Records are
// walked by the real libcupti (ActivityGetNextRecord), so the tracer's parser
// and join run exactly as on a GPU. Null when libcupti does not load (`why`).
//
// Threading: the generator thread ("xdl_synth_gpu") runs from the enabling of
// CONCURRENT_KERNEL to its disabling; every method may be called from any
// thread, as CUPTI's.
std::unique_ptr<CuptiApi> MakeSyntheticGpu(const SyntheticGpuOptions& options, std::string* why);

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_TESTS_PLUGINS_CUPTI_SYNTHETIC_GPU_H_
