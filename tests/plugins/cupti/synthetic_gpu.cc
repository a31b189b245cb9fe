// A stand-in for the GPU and driver side of CUPTI: fills activity buffers shaped like an H100's.
#include "cupti/synthetic_gpu.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "activity_parser.h"
#include "core/clock.h"
#include "cupti/activity_records.h"

namespace xdl_trace {
namespace cupti {
namespace {

struct WeightedName {
  int count;
  const char* name;
};

constexpr WeightedName kH100Kernels[] = {
#include "cupti/h100_kernel_names.inc"
};

// Per 1000 API calls of the H100 "conv" step (213 kernels, 16 memsets, 1 copy,
// 80 cudaGetErrorString a step): kernel launches, API-only calls, memsets, copies.
constexpr int kKernelPerMille = 652;
constexpr int kApiOnlyPerMille = 287;
constexpr int kMemsetPerMille = 57;

bool ConfigNumber(const std::string& config, const std::string& key, double* out) {
  const std::string needle = key + "=";
  size_t at = 0;
  while ((at = config.find(needle, at)) != std::string::npos) {
    if (at == 0 || config[at - 1] == ';') {
      *out = std::strtod(config.c_str() + at + needle.size(), nullptr);
      return true;
    }
    at += needle.size();
  }
  return false;
}

class SyntheticGpu final : public CuptiApi {
 public:
  SyntheticGpu(SyntheticGpuOptions options, std::unique_ptr<CuptiApi> real)
      : options_(options), real_(std::move(real)) {
    for (const WeightedName& w : kH100Kernels) {
      for (int i = 0; i < w.count; ++i) kernel_names_.push_back(w.name);
    }
    // Interleave so that consecutive launches use different kernels.
    std::vector<const char*> spread(kernel_names_.size());
    for (size_t i = 0; i < spread.size(); ++i) {
      spread[i] = kernel_names_[(i * 97) % kernel_names_.size()];
    }
    kernel_names_ = std::move(spread);
  }
  ~SyntheticGpu() override { StopGenerator(); }

  CUptiResult ActivityEnable(CUpti_ActivityKind kind) override {
    // As CUPTI: the device's record when CUDA starts (here: at once), none for a device
    // CUDA had started before.
    if (kind == CUPTI_ACTIVITY_KIND_DEVICE && !options_.cuda_started) {
      const auto r = testing::H100DeviceRecord(0);
      std::lock_guard<std::mutex> lock(mu_);
      Write(&r, sizeof(r));
    }
    if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) StartGenerator();
    return CUPTI_SUCCESS;
  }
  std::vector<DriverDeviceLimits> InitializedDevices() override {
    if (!options_.cuda_started) return {};
    return {testing::H100DriverLimits(0)};
  }
  CUptiResult ActivityDisable(CUpti_ActivityKind kind) override {
    if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) StopGenerator();
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                        CUpti_BuffersCallbackCompleteFunc complete) override {
    std::lock_guard<std::mutex> lock(mu_);
    request_ = request;
    complete_ = complete;
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc) override {
    return CUPTI_SUCCESS;  // Timestamps are CLOCK_REALTIME already.
  }
  CUptiResult ActivityFlushAll(uint32_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    CompleteLocked();
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityFlushPeriod(uint32_t) override { return CUPTI_SUCCESS; }
  CUptiResult ActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                    CUpti_Activity** record) override {
    return real_->ActivityGetNextRecord(buffer, valid, record);
  }
  CUptiResult ActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) override {
    *dropped = static_cast<size_t>(dropped_.exchange(0));
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind,
                                                uint64_t id) override {
    step_.store(id, std::memory_order_relaxed);
    // The pushing (training) thread makes the calls from now on, under its id as CUPTI
    // writes it: the OS id once asked for, else pthread_self's.
    training_thread_.store(system_thread_ids_.load() ? static_cast<uint32_t>(::syscall(SYS_gettid))
                                                     : static_cast<uint32_t>(pthread_self()),
                           std::memory_order_relaxed);
    return CUPTI_SUCCESS;
  }
  CUptiResult SetThreadIdType(CUpti_ActivityThreadIdType type) override {
    system_thread_ids_.store(type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    return CUPTI_SUCCESS;
  }
  CUptiResult ActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind,
                                               uint64_t* id) override {
    *id = step_.load(std::memory_order_relaxed);
    return CUPTI_SUCCESS;
  }
  CUptiResult GetTimestamp(uint64_t* timestamp) override {
    *timestamp = static_cast<uint64_t>(internal::WallClockNs());
    return CUPTI_SUCCESS;
  }
  CUptiResult Subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc, void*) override {
    *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(this);
    return CUPTI_SUCCESS;
  }
  CUptiResult Unsubscribe(CUpti_SubscriberHandle) override { return CUPTI_SUCCESS; }
  CUptiResult EnableCallback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                             CUpti_CallbackId) override {
    return CUPTI_SUCCESS;
  }
  std::string CallbackName(CUpti_CallbackDomain domain, uint32_t cbid) override {
    return real_->CallbackName(domain, cbid);
  }
  std::string ResultString(CUptiResult result) override { return real_->ResultString(result); }

 private:
  void StartGenerator() {
    std::lock_guard<std::mutex> lock(thread_mu_);
    if (generator_.joinable()) return;
    stop_ = false;
    generator_ = std::thread([this] { Run(); });
    pthread_setname_np(generator_.native_handle(), "xdl_synth_gpu");
  }

  void StopGenerator() {
    std::lock_guard<std::mutex> lock(thread_mu_);
    if (!generator_.joinable()) return;
    {
      std::lock_guard<std::mutex> stop_lock(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    generator_.join();
  }

  // Produces events at the configured rate, in batches, until stopped.
  void Run() {
    const auto begin = std::chrono::steady_clock::now();
    double produced = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(stop_mu_);
        if (stop_cv_.wait_for(lock, std::chrono::microseconds(500), [this] { return stop_; })) {
          return;
        }
      }
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      const double target = elapsed * options_.events_per_second;
      {
        std::lock_guard<std::mutex> lock(mu_);
        refused_ = false;  // CUPTI asks again for a buffer a while after a refusal.
      }
      while (produced < target) {
        std::lock_guard<std::mutex> lock(mu_);
        const int64_t now = internal::WallClockNs();
        for (int i = 0; i < 64 && produced < target; ++i) produced += Launch(now + i * 200);
      }
    }
  }

  // One API call and what it launched; returns the events it makes.
  int Launch(int64_t t) {
    const uint32_t correlation = ++correlation_;
    const uint64_t step = step_.load(std::memory_order_relaxed);
    // Spread the mix: 379 is prime to 1000, so every 1000 calls see each share once.
    const int pick = static_cast<int>((calls_++ * 379) % 1000);
    const uint32_t stream = 7 + static_cast<uint32_t>(correlation % options_.streams);
    // Another thread's call: CUPTI writes no external record for it (no callback).
    const bool other_thread =
        static_cast<int>(correlation % 1000) < options_.other_thread_per_mille;
    if (step != 0 && !other_thread) {
      const auto r = testing::ExternalRecord(correlation, step, kStepCorrelationKind);
      Write(&r, sizeof(r));
    }
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    if (pick >= kKernelPerMille) cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGetErrorString_v3020;
    if (pick >= kKernelPerMille + kApiOnlyPerMille) {
      cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020;
    }
    if (pick >= kKernelPerMille + kApiOnlyPerMille + kMemsetPerMille) {
      cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020;
    }
    {
      const auto r = testing::RuntimeRecord(
          correlation, static_cast<uint64_t>(t), static_cast<uint64_t>(t + 2500), cbid,
          /*thread=*/other_thread ? 4343 : training_thread_.load(std::memory_order_relaxed));
      Write(&r, sizeof(r));
    }
    if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
      auto r =
          testing::KernelRecord(correlation, static_cast<uint64_t>(t + 5000),
                                static_cast<uint64_t>(t + 5000 + 1000 + (correlation % 7) * 3000),
                                stream, kernel_names_[kernels_++ % kernel_names_.size()]);
      r.gridX = 128 + (correlation % 3) * 128;
      r.registersPerThread = 32 + (correlation % 4) * 8;
      r.staticSharedMemory = 1024;
      Write(&r, sizeof(r));
    } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020) {
      const auto r = testing::MemsetRecord(correlation, static_cast<uint64_t>(t + 4000),
                                           static_cast<uint64_t>(t + 6000), 4096, stream);
      Write(&r, sizeof(r));
    } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020) {
      auto r = testing::MemcpyRecord(correlation, static_cast<uint64_t>(t + 4000),
                                     static_cast<uint64_t>(t + 9000), /*bytes=*/4, stream,
                                     CUPTI_ACTIVITY_MEMCPY_KIND_DTOH);
      r.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
      r.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
      Write(&r, sizeof(r));
    } else {
      return 1;  // An API call that launched nothing.
    }
    return 2;
  }

  // Appends one record to the current buffer (requesting one, completing a
  // full one first); a refused request drops the record, as CUPTI does.
  void Write(const void* record, size_t size) {
    if (buffer_ != nullptr && used_ + size > capacity_) CompleteLocked();
    if (buffer_ == nullptr && refused_) {
      dropped_.fetch_add(1);
      return;
    }
    if (buffer_ == nullptr) {
      size_t max_records = 0;
      if (request_ != nullptr) request_(&buffer_, &capacity_, &max_records);
      refused_ = buffer_ == nullptr;
      used_ = 0;
      if (buffer_ == nullptr || capacity_ < size) {
        buffer_ = nullptr;
        dropped_.fetch_add(1);
        return;
      }
    }
    std::memcpy(buffer_ + used_, record, size);
    used_ += size;
  }

  void CompleteLocked() {
    if (buffer_ == nullptr) return;
    uint8_t* buffer = buffer_;
    buffer_ = nullptr;
    if (complete_ != nullptr) complete_(nullptr, 0, buffer, capacity_, used_);
  }

  const SyntheticGpuOptions options_;
  const std::unique_ptr<CuptiApi> real_;
  std::vector<const char*> kernel_names_;
  std::atomic<uint64_t> step_{0};
  std::atomic<uint32_t> training_thread_{4242};  // Who calls; 4242 before the first step.
  std::atomic<bool> system_thread_ids_{false};
  std::atomic<int64_t> dropped_{0};

  std::mutex thread_mu_;  // Starting and stopping the generator.
  std::thread generator_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // Guarded by stop_mu_.

  std::mutex mu_;  // The buffer being filled and the callbacks.
  CUpti_BuffersCallbackRequestFunc request_ = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete_ = nullptr;
  uint8_t* buffer_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  bool refused_ = false;      // The last request was refused: drop until the next tick.
  uint32_t correlation_ = 0;  // Generator thread.
  uint64_t calls_ = 0;
  uint64_t kernels_ = 0;
};

}  // namespace

SyntheticGpuOptions ParseSyntheticGpuOptions(const std::string& config) {
  SyntheticGpuOptions options;
  double value = 0;
  if (ConfigNumber(config, "synthetic_rate", &value) && value > 0) {
    options.events_per_second = value;
  }
  if (ConfigNumber(config, "synthetic_streams", &value) && value >= 1) {
    options.streams = static_cast<int>(value);
  }
  if (ConfigNumber(config, "synthetic_cuda_started", &value)) {
    options.cuda_started = value != 0;
  }
  if (ConfigNumber(config, "synthetic_other_threads", &value) && value >= 0) {
    options.other_thread_per_mille = static_cast<int>(std::min(value, 1000.0));
  }
  return options;
}

std::unique_ptr<CuptiApi> MakeSyntheticGpu(const SyntheticGpuOptions& options, std::string* why) {
  std::unique_ptr<CuptiApi> real = LoadCuptiApi(DefaultCuptiLibraries(), why);
  if (real == nullptr) return nullptr;
  return std::make_unique<SyntheticGpu>(options, std::move(real));
}

}  // namespace cupti
}  // namespace xdl_trace
