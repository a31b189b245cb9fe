// Loads libcupti lazily with dlopen and forwards the CuptiApi calls to it.
#include "cupti_api.h"

#include <dlfcn.h>

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
