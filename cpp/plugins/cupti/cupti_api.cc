// Loads libcupti lazily with dlopen and forwards the CuptiApi calls to it; asks a loaded CUDA
// driver for its devices' limits.
#include "cupti_api.h"

#include <dlfcn.h>

#include <utility>

namespace xdl_trace {
namespace cupti {
namespace {

// Function pointers resolved from one libcupti.
struct CuptiFunctions {
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) register_timestamp = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityFlushPeriod) flush_period = nullptr;    // Optional (CUDA 11.1+).
  decltype(&cuptiSetThreadIdType) set_thread_id_type = nullptr;  // Optional.
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) num_dropped = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_external = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_external = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;
};

class DlopenCuptiApi final : public CuptiApi {
 public:
  DlopenCuptiApi(void* handle, const CuptiFunctions& f) : handle_(handle), f_(f) {}
  // The library stays loaded: CUPTI keeps threads and callbacks alive until
  // process exit, and unloading it under them is unsafe.
  ~DlopenCuptiApi() override = default;

  CUptiResult ActivityEnable(CUpti_ActivityKind kind) override { return f_.enable(kind); }
  CUptiResult ActivityDisable(CUpti_ActivityKind kind) override { return f_.disable(kind); }
  CUptiResult ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                        CUpti_BuffersCallbackCompleteFunc complete) override {
    return f_.register_callbacks(request, complete);
  }
  CUptiResult ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc func) override {
    return f_.register_timestamp(func);
  }
  CUptiResult ActivityFlushAll(uint32_t flag) override { return f_.flush_all(flag); }
  CUptiResult ActivityFlushPeriod(uint32_t period_ms) override {
    return f_.flush_period != nullptr ? f_.flush_period(period_ms) : CUPTI_ERROR_NOT_SUPPORTED;
  }
  CUptiResult ActivityGetNextRecord(uint8_t* buffer, size_t valid_bytes,
                                    CUpti_Activity** record) override {
    return f_.next_record(buffer, valid_bytes, record);
  }
  CUptiResult ActivityGetNumDroppedRecords(CUcontext context, uint32_t stream_id,
                                           size_t* dropped) override {
    return f_.num_dropped(context, stream_id, dropped);
  }
  CUptiResult ActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                uint64_t id) override {
    return f_.push_external(kind, id);
  }
  CUptiResult ActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                               uint64_t* id) override {
    return f_.pop_external(kind, id);
  }
  CUptiResult GetTimestamp(uint64_t* timestamp) override { return f_.timestamp(timestamp); }
  CUptiResult SetThreadIdType(CUpti_ActivityThreadIdType type) override {
    return f_.set_thread_id_type != nullptr ? f_.set_thread_id_type(type)
                                            : CUPTI_ERROR_NOT_SUPPORTED;
  }
  CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                        void* userdata) override {
    return f_.subscribe(subscriber, callback, userdata);
  }
  CUptiResult Unsubscribe(CUpti_SubscriberHandle subscriber) override {
    return f_.unsubscribe(subscriber);
  }
  CUptiResult EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                             CUpti_CallbackDomain domain, CUpti_CallbackId cbid) override {
    return f_.enable_callback(enable, subscriber, domain, cbid);
  }
  std::string CallbackName(CUpti_CallbackDomain domain, uint32_t cbid) override {
    const char* name = nullptr;
    if (f_.callback_name(domain, cbid, &name) == CUPTI_SUCCESS && name != nullptr) return name;
    return "";
  }
  std::string ResultString(CUptiResult result) override {
    const char* text = nullptr;
    if (f_.result_string(result, &text) == CUPTI_SUCCESS && text != nullptr) return text;
    return "CUptiResult " + std::to_string(static_cast<int>(result));
  }
  std::vector<DriverDeviceLimits> InitializedDevices() override { return QueryLoadedDriver(); }

 private:
  void* const handle_;
  const CuptiFunctions f_;
};

template <typename F>
bool Resolve(void* handle, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(::dlsym(handle, name));
  if (*out == nullptr && missing->empty()) *missing = name;
  return *out != nullptr;
}

}  // namespace

std::vector<DriverDeviceLimits> QueryLoadedDriver() {
  // RTLD_NOLOAD: only a driver the application loaded (never started here).
  void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle == nullptr) return {};
  std::vector<DriverDeviceLimits> out;
  auto count_of =
      reinterpret_cast<decltype(&cuDeviceGetCount)>(::dlsym(handle, "cuDeviceGetCount"));
  auto device_of = reinterpret_cast<decltype(&cuDeviceGet)>(::dlsym(handle, "cuDeviceGet"));
  auto attribute_of =
      reinterpret_cast<decltype(&cuDeviceGetAttribute)>(::dlsym(handle, "cuDeviceGetAttribute"));
  int count = 0;
  // CUDA_ERROR_NOT_INITIALIZED before the application's cuInit.
  if (count_of != nullptr && device_of != nullptr && attribute_of != nullptr &&
      count_of(&count) == CUDA_SUCCESS) {
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      CUdevice device;
      if (device_of(&device, ordinal) != CUDA_SUCCESS) continue;
      DriverDeviceLimits d;
      d.id = ordinal;
      const std::pair<int*, CUdevice_attribute> attributes[] = {
          {&d.compute_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
          {&d.compute_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
          {&d.max_threads_per_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
          {&d.max_threads_per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR},
          {&d.warp_size, CU_DEVICE_ATTRIBUTE_WARP_SIZE},
          {&d.registers_per_block, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK},
          {&d.registers_per_sm, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR},
          {&d.shared_per_block, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
          {&d.shared_per_block_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
          {&d.shared_per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR},
          {&d.reserved_shared_per_block, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK},
          {&d.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      };
      bool known = true;
      for (const auto& [value, attribute] : attributes) {
        known = known && attribute_of(value, attribute, device) == CUDA_SUCCESS;
      }
      if (known) out.push_back(d);
    }
  }
  ::dlclose(handle);  // Drops only the reference RTLD_NOLOAD took.
  return out;
}

std::vector<std::string> DefaultCuptiLibraries() {
  return {"libcupti.so", "libcupti.so.13", "libcupti.so.12", "/usr/local/cuda/lib64/libcupti.so",
          "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
}

std::unique_ptr<CuptiApi> LoadCuptiApi(const std::vector<std::string>& libraries,
                                       std::string* why) {
  std::string reasons;
  for (const std::string& library : libraries) {
    void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = ::dlerror();
      reasons += (reasons.empty() ? "" : "; ") + library + ": " + (error ? error : "dlopen failed");
      continue;
    }
    CuptiFunctions f;
    std::string missing;
    Resolve(handle, "cuptiActivityEnable", &f.enable, &missing);
    Resolve(handle, "cuptiActivityDisable", &f.disable, &missing);
    Resolve(handle, "cuptiActivityRegisterCallbacks", &f.register_callbacks, &missing);
    Resolve(handle, "cuptiActivityRegisterTimestampCallback", &f.register_timestamp, &missing);
    Resolve(handle, "cuptiActivityFlushAll", &f.flush_all, &missing);
    Resolve(handle, "cuptiActivityGetNextRecord", &f.next_record, &missing);
    Resolve(handle, "cuptiActivityGetNumDroppedRecords", &f.num_dropped, &missing);
    Resolve(handle, "cuptiActivityPushExternalCorrelationId", &f.push_external, &missing);
    Resolve(handle, "cuptiActivityPopExternalCorrelationId", &f.pop_external, &missing);
    Resolve(handle, "cuptiGetTimestamp", &f.timestamp, &missing);
    Resolve(handle, "cuptiSubscribe", &f.subscribe, &missing);
    Resolve(handle, "cuptiUnsubscribe", &f.unsubscribe, &missing);
    Resolve(handle, "cuptiEnableCallback", &f.enable_callback, &missing);
    Resolve(handle, "cuptiGetResultString", &f.result_string, &missing);
    Resolve(handle, "cuptiGetCallbackName", &f.callback_name, &missing);
    f.flush_period =
        reinterpret_cast<decltype(f.flush_period)>(::dlsym(handle, "cuptiActivityFlushPeriod"));
    f.set_thread_id_type =
        reinterpret_cast<decltype(f.set_thread_id_type)>(::dlsym(handle, "cuptiSetThreadIdType"));
    if (!missing.empty()) {
      reasons += (reasons.empty() ? "" : "; ") + library + ": no symbol " + missing;
      ::dlclose(handle);
      continue;
    }
    return std::make_unique<DlopenCuptiApi>(handle, f);
  }
  *why = reasons.empty() ? "no libcupti candidates" : reasons;
  return nullptr;
}

}  // namespace cupti
}  // namespace xdl_trace
