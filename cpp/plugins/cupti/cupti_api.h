// The slice of CUPTI the tracer uses, behind an interface so tests can stand in for it.
#ifndef XDL_TRACE_PLUGINS_CUPTI_CUPTI_API_H_
#define XDL_TRACE_PLUGINS_CUPTI_CUPTI_API_H_

#include <cupti.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xdl_trace {
namespace cupti {

// A device's limits as its CUDA driver reports them (cuDeviceGetAttribute): what the
// occupancy calculator needs (occupancy.h).
struct DriverDeviceLimits {
  int32_t id = 0;  // The CUDA device ordinal, as CUPTI's deviceId.
  int compute_major = 0;
  int compute_minor = 0;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int warp_size = 0;
  int registers_per_block = 0;
  int registers_per_sm = 0;
  int shared_per_block = 0;
  int shared_per_block_optin = 0;
  int shared_per_sm = 0;
  int reserved_shared_per_block = 0;
  int sm_count = 0;
};

// Threading: CUPTI's own rules; the implementations add no state of their own
// beyond the library handle.
class CuptiApi {
 public:
  virtual ~CuptiApi() = default;
  virtual CUptiResult ActivityEnable(CUpti_ActivityKind kind) = 0;
  virtual CUptiResult ActivityDisable(CUpti_ActivityKind kind) = 0;
  virtual CUptiResult ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                CUpti_BuffersCallbackCompleteFunc complete) = 0;
  virtual CUptiResult ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc func) = 0;
  virtual CUptiResult ActivityFlushAll(uint32_t flag) = 0;
  // CUPTI's own periodic flush (0 turns it off); CUPTI_ERROR_NOT_SUPPORTED
  // from a libcupti without cuptiActivityFlushPeriod.
  virtual CUptiResult ActivityFlushPeriod(uint32_t period_ms) = 0;
  virtual CUptiResult ActivityGetNextRecord(uint8_t* buffer, size_t valid_bytes,
                                            CUpti_Activity** record) = 0;
  virtual CUptiResult ActivityGetNumDroppedRecords(CUcontext context, uint32_t stream_id,
                                                   size_t* dropped) = 0;
  virtual CUptiResult ActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                        uint64_t id) = 0;
  virtual CUptiResult ActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                       uint64_t* id) = 0;
  virtual CUptiResult GetTimestamp(uint64_t* timestamp) = 0;
  // What API records' threadId holds (SYSTEM: the OS thread id, gettid on Linux; DEFAULT:
  // pthread_self()); CUPTI_ERROR_NOT_SUPPORTED where the library (or a stand-in) cannot set it.
  virtual CUptiResult SetThreadIdType(CUpti_ActivityThreadIdType type) {
    (void)type;
    return CUPTI_ERROR_NOT_SUPPORTED;
  }
  // CUPTI allows one subscriber per process: another CUPTI user (torch.profiler,
  // Nsight) makes this return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED.
  virtual CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                void* userdata) = 0;
  virtual CUptiResult Unsubscribe(CUpti_SubscriberHandle subscriber) = 0;
  virtual CUptiResult EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                     CUpti_CallbackDomain domain, CUpti_CallbackId cbid) = 0;
  // "cudaLaunchKernel_v7000" for an API record's cbid; "" when unknown.
  virtual std::string CallbackName(CUpti_CallbackDomain domain, uint32_t cbid) = 0;
  // "CUPTI_ERROR_..." (or the number when the library cannot say).
  virtual std::string ResultString(CUptiResult result) = 0;
  // The limits of every device of the process's CUDA driver, where the application already
  // initialized it: CUPTI writes a device's DEVICE record when CUDA initializes, so a tracer
  // started after the first CUDA call gets none. Empty where the driver is not loaded or not
  // yet initialized (its DEVICE records come then).
  virtual std::vector<DriverDeviceLimits> InitializedDevices() { return {}; }
};

// What the CUDA driver loaded in this process (libcuda.so.1, never loaded here) says of its
// devices: the real CuptiApi's InitializedDevices().
std::vector<DriverDeviceLimits> QueryLoadedDriver();

// libcupti file names tried in order by LoadCuptiApi().
std::vector<std::string> DefaultCuptiLibraries();

// dlopen()s the first of `libraries` that loads and resolves every function
// used above. Null with `*why` saying which library or symbol was missing.
std::unique_ptr<CuptiApi> LoadCuptiApi(const std::vector<std::string>& libraries, std::string* why);

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_CUPTI_API_H_
