// The CUPTI activity tracer: lifecycle, capped buffer pool, completed-buffer queue, join.
#include "cupti_tracer.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "core/clock.h"
#include "core/thread_priority.h"
#include "occupancy.h"

namespace xdl_trace {
namespace cupti {
namespace {

constexpr size_t kRecordAlignment = 8;  // ACTIVITY_RECORD_ALIGNMENT in cupti_activity.h.

// CUPTI's buffer callbacks carry no user data: they reach the running tracer
// through this pointer, set by Start and cleared by Stop after the final flush.
std::atomic<CuptiTracer*> g_running{nullptr};

void CUPTIAPI RequestTrampoline(uint8_t** buffer, size_t* size, size_t* max_records) {
  if (CuptiTracer* tracer = g_running.load()) {
    tracer->OnBufferRequested(buffer, size, max_records);
    return;
  }
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
}

void CUPTIAPI CompleteTrampoline(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                 size_t size, size_t valid_size) {
  if (CuptiTracer* tracer = g_running.load()) {
    tracer->OnBufferCompleted(context, stream_id, buffer, size, valid_size);
  }
  // Otherwise the buffer belongs to a tracer already gone: CUPTI handed it
  // back after its final forced flush, which does not happen; leaving it is
  // the safe choice.
}

// Set on the thread that calls StepBegin (the training thread): its launches
// already carry the step pushed there.
thread_local bool t_training_thread = false;

// The subscriber's callback. The subscription claims CUPTI, so that another
// CUPTI user is detected rather than silently sharing (and overwriting) its
// activity callbacks; with other_threads it also sees the launch APIs.
void CUPTIAPI SubscriberCallback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void* data) {
  if (userdata == nullptr || data == nullptr) return;
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  static_cast<CuptiTracer*>(userdata)->OnApiCallback(domain, cbid,
                                                     *static_cast<const CUpti_CallbackData*>(data));
}

constexpr char kSubscriberBusy[] =
    "cupti subscriber busy: another CUPTI user in this process (torch.profiler, Nsight "
    "Systems/Compute, DCGM profiling, another tracer) holds CUPTI's one subscriber slot, so "
    "xdl_trace leaves CUPTI alone and records no device events until a later start finds it free";

// Activity timestamps on CLOCK_REALTIME, the clock of the host step spans.
uint64_t CUPTIAPI RealtimeTimestamp() { return static_cast<uint64_t>(internal::WallClockNs()); }

// Errors that mean "no usable driver or GPU here" rather than a bug.
bool MeansNoDevice(CUptiResult result) {
  switch (result) {
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_INVALID_DEVICE:
    case CUPTI_ERROR_NOT_COMPATIBLE:
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

bool MeansNoPrivileges(CUptiResult result) {
  return result == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ||
         result == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES;
}

constexpr char kPrivilegesHelp[] =
    "the NVIDIA driver restricts GPU profiling to administrators. Run as root, or allow all "
    "users: put 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in "
    "/etc/modprobe.d/nvidia-profiling.conf and reload the driver (reboot); in a container, "
    "add --cap-add=SYS_ADMIN. See https://developer.nvidia.com/ERR_NVGPUCTRPERM";

bool ConfigFlag(const std::string& config, const std::string& key, bool* out) {
  const std::string needle = key + "=";
  size_t at = 0;
  while ((at = config.find(needle, at)) != std::string::npos) {
    if (at == 0 || config[at - 1] == ';') {
      const char c = config.size() > at + needle.size() ? config[at + needle.size()] : '0';
      *out = c == '1' || c == 't' || c == 'y';
      return true;
    }
    at += needle.size();
  }
  return false;
}

bool ConfigValue(const std::string& config, const std::string& key, std::string* out) {
  const std::string needle = key + "=";
  size_t at = 0;
  while ((at = config.find(needle, at)) != std::string::npos) {
    if (at == 0 || config[at - 1] == ';') {
      const size_t begin = at + needle.size();
      const size_t end = config.find(';', begin);
      *out = config.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      return true;
    }
    at += needle.size();
  }
  return false;
}

}  // namespace

uint32_t CuptiThreadId() { return static_cast<uint32_t>(pthread_self()); }

uint32_t SystemThreadId() { return static_cast<uint32_t>(::syscall(SYS_gettid)); }

void ApplyConfig(const std::string& config, CuptiTracerOptions* options) {
  std::string value;
  if (ConfigValue(config, "buffer_bytes", &value))
    options->buffer_bytes = std::strtoull(value.c_str(), nullptr, 10);
  if (ConfigValue(config, "max_buffer_bytes", &value))
    options->max_buffer_bytes = std::strtoull(value.c_str(), nullptr, 10);
  if (ConfigValue(config, "max_events", &value))
    options->max_events = std::strtoull(value.c_str(), nullptr, 10);
  if (ConfigValue(config, "libcupti", &value)) options->libraries = {value};
  ConfigFlag(config, "driver", &options->driver);
  ConfigFlag(config, "synchronization", &options->synchronization);
  ConfigFlag(config, "overhead", &options->overhead);
  ConfigFlag(config, "flush_on_collect", &options->flush_on_collect);
  ConfigFlag(config, "nvtx", &options->nvtx);
  ConfigFlag(config, "other_threads", &options->other_threads);
  ConfigFlag(config, "memory", &options->memory);
  if (ConfigValue(config, "api_filter", &value)) {
    options->api_filter.clear();
    size_t begin = 0;
    while (begin <= value.size()) {
      const size_t end = std::min(value.find(',', begin), value.size());
      if (end > begin) options->api_filter.push_back(value.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  if (ConfigValue(config, "flush_period_ms", &value))
    options->flush_period_ms = static_cast<uint32_t>(std::strtoul(value.c_str(), nullptr, 10));
  if (ConfigValue(config, "max_hold_ms", &value))
    options->max_hold_ns = static_cast<int64_t>(std::strtoll(value.c_str(), nullptr, 10)) * 1000000;
  if (ConfigValue(config, "max_held_events", &value))
    options->max_held_events = std::strtoull(value.c_str(), nullptr, 10);
  if (options->buffer_bytes < 4096) options->buffer_bytes = 4096;
}

// ---- BufferPool ----

BufferPool::BufferPool(size_t buffer_bytes, size_t max_bytes)
    : buffer_bytes_((buffer_bytes + kRecordAlignment - 1) / kRecordAlignment * kRecordAlignment),
      max_bytes_(max_bytes) {}

BufferPool::~BufferPool() {
  internal::MutexLock lock(&mu_);
  for (uint8_t* buffer : free_) std::free(buffer);
  // Buffers still outstanding are held by CUPTI; they are left alone.
}

void BufferPool::Preallocate(size_t count) {
  internal::MutexLock lock(&mu_);
  while (free_.size() < count && (allocated_ + 1) * buffer_bytes_ <= max_bytes_) {
    void* buffer = std::aligned_alloc(kRecordAlignment, buffer_bytes_);
    if (buffer == nullptr) return;
    free_.push_back(static_cast<uint8_t*>(buffer));
    ++allocated_;
  }
}

uint8_t* BufferPool::Acquire() {
  internal::MutexLock lock(&mu_);
  uint8_t* buffer = nullptr;
  if (!free_.empty()) {
    buffer = free_.back();
    free_.pop_back();
  } else if ((allocated_ + 1) * buffer_bytes_ <= max_bytes_) {
    buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, buffer_bytes_));
    if (buffer != nullptr) ++allocated_;
  }
  if (buffer != nullptr) ++outstanding_;
  return buffer;
}

void BufferPool::Release(uint8_t* buffer) {
  internal::MutexLock lock(&mu_);
  --outstanding_;
  free_.push_back(buffer);
}

size_t BufferPool::allocated_bytes() const {
  internal::MutexLock lock(&mu_);
  return allocated_ * buffer_bytes_;
}

size_t BufferPool::outstanding() const {
  internal::MutexLock lock(&mu_);
  return outstanding_;
}

// ---- CuptiTracer ----

CuptiTracer::CuptiTracer(CuptiTracerOptions options, std::unique_ptr<CuptiApi> api)
    : options_(std::move(options)),
      api_(std::move(api)),
      pool_(options_.buffer_bytes, options_.max_buffer_bytes),
      parser_(&names_, [this](CUpti_CallbackDomain domain, uint32_t cbid) {
        return api_ != nullptr ? api_->CallbackName(domain, cbid) : std::string();
      }) {
  parser_.set_api_filter(options_.api_filter);
  parser_.set_keep_launches(!options_.other_threads);
}

CuptiTracer::~CuptiTracer() {
  Stop();
  StopParseThread();
  internal::MutexLock lock(&queue_mu_);
  for (const Completed& c : completed_) pool_.Release(c.buffer);
  completed_.clear();
}

ParseCounters CuptiTracer::parse_counters() const {
  internal::MutexLock lock(&parse_mu_);
  return parser_.counters();
}

void CuptiTracer::StartParseThread() {
  {
    internal::MutexLock lock(&queue_mu_);
    if (parse_thread_running_) return;
    parse_thread_running_ = true;
    parse_thread_stop_ = false;
  }
  parse_thread_ = std::thread([this] { ParseLoop(); });
  pthread_setname_np(parse_thread_.native_handle(), kParseThreadName);
}

void CuptiTracer::StopParseThread() {
  if (!parse_thread_.joinable()) return;
  {
    internal::MutexLock lock(&queue_mu_);
    parse_thread_stop_ = true;
  }
  completed_cv_.SignalAll();
  parse_thread_.join();
  {
    internal::MutexLock lock(&queue_mu_);
    parse_thread_running_ = false;
  }
  parsed_cv_.SignalAll();
}

void CuptiTracer::ParseLoop() {
  internal::LowerCurrentThreadPriority(internal::kBackgroundNiceSteps);  // Training first.
  internal::NoWakeupPreemption();
  while (true) {
    Completed next;
    {
      internal::MutexLock lock(&queue_mu_);
      while (completed_.empty() && !parse_thread_stop_) completed_cv_.Wait(&queue_mu_);
      if (completed_.empty()) return;  // Stopping, and every buffer is parsed.
      next = completed_.front();
      completed_.pop_front();
    }
    ParseBuffer(next);
    {
      internal::MutexLock lock(&queue_mu_);
      ++parsed_count_;
    }
    parsed_cv_.SignalAll();
  }
}

void CuptiTracer::ParseBuffer(const Completed& completed) {
  {
    internal::MutexLock lock(&parse_mu_);
    const size_t cap = options_.max_events;
    CUpti_Activity* record = nullptr;
    CUptiResult result;
    while ((result = api_->ActivityGetNextRecord(completed.buffer, completed.valid_size,
                                                 &record)) == CUPTI_SUCCESS) {
      parser_.Parse(*record, &events_, &new_external_);
      if (events_.size() + held_count_.load(std::memory_order_relaxed) > cap) {
        events_.pop_back();
        ++over_cap_events_;
      }
    }
    // MAX_LIMIT_REACHED is the normal end; anything else (an unknown kind)
    // ends this buffer early.
    if (result != CUPTI_ERROR_MAX_LIMIT_REACHED) ++aborted_buffers_;
  }
  pool_.Release(completed.buffer);
}

void CuptiTracer::WaitParsed() {
  std::deque<Completed> inline_parse;
  {
    internal::MutexLock lock(&queue_mu_);
    const uint64_t target = completed_count_;
    while (parse_thread_running_ && parsed_count_ < target) parsed_cv_.Wait(&queue_mu_);
    if (parse_thread_running_) return;
    inline_parse.swap(completed_);  // No parse thread: this thread parses.
    parsed_count_ += inline_parse.size();
  }
  for (const Completed& c : inline_parse) ParseBuffer(c);
}

std::vector<CUpti_ActivityKind> CuptiTracer::ActivityKinds() const {
  std::vector<CUpti_ActivityKind> kinds;
  for (const ActivityKindInfo& info : ActivityParser::Kinds()) {
    bool enabled = false;
    switch (info.option) {
      case KindOption::kAlways:
      case KindOption::kBestEffort:
        enabled = true;
        break;
      case KindOption::kNvtx:
        enabled = options_.nvtx;
        break;
      case KindOption::kMemory:
        enabled = options_.memory;
        break;
      case KindOption::kDriver:
        enabled = options_.driver;
        break;
      case KindOption::kSynchronization:
        enabled = options_.synchronization;
        break;
      case KindOption::kOverhead:
        enabled = options_.overhead;
        break;
      case KindOption::kParsedOnly:
        break;
    }
    if (enabled) kinds.push_back(info.kind);
  }
  return kinds;
}

void CuptiTracer::MarkUnavailable(std::string reason) {
  unavailable_reason_ = std::move(reason);
  state_ = State::kUnavailable;
}

void CuptiTracer::Rollback(const std::vector<CUpti_ActivityKind>& enabled) {
  for (auto it = enabled.rbegin(); it != enabled.rend(); ++it) api_->ActivityDisable(*it);
  api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Unsubscribe();
  g_running.store(nullptr);
  StopParseThread();
}

void CuptiTracer::Unsubscribe() {
  if (subscriber_ != nullptr) api_->Unsubscribe(subscriber_);
  subscriber_ = nullptr;
}

CuptiTracer::Result CuptiTracer::Start() {
  const State state = state_.load();
  if (state == State::kUnavailable || state == State::kRunning) return {};
  if (api_ == nullptr) {
    std::string why;
    api_ = LoadCuptiApi(options_.libraries, &why);
    if (api_ == nullptr) {
      MarkUnavailable("libcupti could not be loaded (" + why + ")");
      return {};
    }
  }
  CuptiTracer* expected = nullptr;
  if (!g_running.compare_exchange_strong(expected, this)) {
    return {false, false, "cupti: another CUPTI tracer is already running in this process"};
  }
  state_ = State::kStarting;
  auto fail = [&](const std::string& call, CUptiResult result) -> Result {
    const std::string text = call + " returned " + api_->ResultString(result);
    if (MeansNoPrivileges(result)) {
      state_ = State::kIdle;
      return {false, true, "cupti: " + text + ": " + kPrivilegesHelp};
    }
    if (MeansNoDevice(result)) {
      MarkUnavailable("no CUDA driver or GPU (" + text + ")");
      return {};
    }
    state_ = State::kIdle;
    return {false, false, "cupti: " + text};
  };

  // Claim CUPTI before touching its process-global activity callbacks: when
  // someone else holds it, registering ours would steal their buffers.
  CUptiResult result = api_->Subscribe(&subscriber_, SubscriberCallback, this);
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    subscriber_ = nullptr;
    g_running.store(nullptr);
    state_ = State::kIdle;
    busy_reason_ = kSubscriberBusy;
    return {};
  }
  if (result != CUPTI_SUCCESS) {
    subscriber_ = nullptr;
    g_running.store(nullptr);
    return fail("cuptiSubscribe", result);
  }
  busy_reason_.clear();
  if (options_.other_threads) {
    for (const auto& [domain, cbid] : LaunchCallbacks()) {
      // Best effort: a cbid this CUPTI does not know only loses that API.
      api_->EnableCallback(1, subscriber_, domain, cbid);
    }
  }
  // OS thread ids in API records: the ids host spans carry and /proc names, so a launch
  // lines up with the host range of its thread (best effort: older CUPTI keeps pthread_self).
  system_thread_ids_.store(
      api_->SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS,
      std::memory_order_relaxed);
  result = api_->ActivityRegisterCallbacks(RequestTrampoline, CompleteTrampoline);
  if (result != CUPTI_SUCCESS) {
    Unsubscribe();
    g_running.store(nullptr);
    return fail("cuptiActivityRegisterCallbacks", result);
  }
  if (api_->ActivityRegisterTimestampCallback(RealtimeTimestamp) == CUPTI_SUCCESS) {
    parser_.set_clock_offset_ns(0);
  } else {
    // Older CUPTI: measure its clock against CLOCK_REALTIME once.
    uint64_t cupti_now = 0;
    if (api_->GetTimestamp(&cupti_now) == CUPTI_SUCCESS && cupti_now != 0) {
      parser_.set_clock_offset_ns(static_cast<int64_t>(RealtimeTimestamp()) -
                                  static_cast<int64_t>(cupti_now));
    }
  }
  {
    // The application's CUDA started first: no DEVICE record will come for its devices.
    internal::MutexLock lock(&parse_mu_);
    for (const DriverDeviceLimits& device : api_->InitializedDevices()) {
      parser_.AddDevice(device.id, DeviceLimits(device));
    }
  }
  pool_.Preallocate(options_.preallocated_buffers);
  StartParseThread();
  std::vector<CUpti_ActivityKind> enabled;
  for (CUpti_ActivityKind kind : ActivityKinds()) {
    result = api_->ActivityEnable(kind);
    if (result != CUPTI_SUCCESS && ActivityParser::BestEffort(kind)) continue;  // Traced without.
    if (result != CUPTI_SUCCESS) {
      Rollback(enabled);
      return fail(std::string("cuptiActivityEnable(") + ActivityParser::KindName(kind) + ")",
                  result);
    }
    enabled.push_back(kind);
  }
  enabled_kinds_ = std::move(enabled);
  // Best effort: an older libcupti without periodic flush still gets the
  // flush at every collect.
  if (options_.flush_period_ms != 0) api_->ActivityFlushPeriod(options_.flush_period_ms);
  state_ = State::kRunning;
  return {};
}

CuptiTracer::Result CuptiTracer::Stop() {
  if (state_.load() != State::kRunning) return {};
  state_ = State::kStopping;
  Result out;
  const std::vector<CUpti_ActivityKind> kinds = std::move(enabled_kinds_);
  enabled_kinds_.clear();
  for (auto it = kinds.rbegin(); it != kinds.rend(); ++it) {
    const CUptiResult result = api_->ActivityDisable(*it);
    if (result != CUPTI_SUCCESS && out.ok) {
      out = {false, false,
             std::string("cupti: cuptiActivityDisable(") + ActivityParser::KindName(*it) +
                 ") returned " + api_->ResultString(result)};
    }
  }
  if (options_.flush_period_ms != 0) api_->ActivityFlushPeriod(0);
  // Forced: CUPTI hands back every buffer, complete or not, before returning.
  api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Unsubscribe();
  g_running.store(nullptr);
  StopParseThread();  // After parsing what the forced flush handed back.
  state_ = State::kIdle;
  return out;
}

const std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>>&
CuptiTracer::LaunchCallbacks() {
  static const std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> callbacks = {
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000},
      {CUPTI_CB_DOMAIN_RUNTIME_API,
       CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020},
      // Triton and other JITs launch through the driver.
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
  };
  return callbacks;
}

void CuptiTracer::OnApiCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const CUpti_CallbackData& data) {
  (void)domain;
  (void)cbid;
  if (t_training_thread || state_.load() != State::kRunning) return;
  // Push and pop must pair on this thread: the step is read once, at entry,
  // and the exit pops whatever the entry pushed (only when it pushed).
  if (data.callbackSite == CUPTI_API_ENTER) {
    const uint64_t step = current_step_.load(std::memory_order_relaxed);
    if (data.correlationData != nullptr) *data.correlationData = step;
    if (step == 0) return;
    api_->ActivityPushExternalCorrelationId(kStepCorrelationKind, step);
    other_thread_launches_.fetch_add(1, std::memory_order_relaxed);
  } else if (data.callbackSite == CUPTI_API_EXIT) {
    if (data.correlationData != nullptr && *data.correlationData == 0) return;
    uint64_t popped = 0;
    api_->ActivityPopExternalCorrelationId(kStepCorrelationKind, &popped);
  }
}

void CuptiTracer::StepBegin(uint64_t step_id) {
  t_training_thread = true;
  current_step_.store(step_id, std::memory_order_relaxed);
  if (!options_.other_threads) {
    // Before the push: every launch this step makes starts after it.
    const int64_t now = internal::WallClockNs();
    training_thread_.store(
        system_thread_ids_.load(std::memory_order_relaxed) ? SystemThreadId() : CuptiThreadId(),
        std::memory_order_relaxed);
    internal::MutexLock lock(&steps_mu_);
    new_step_starts_.push_back({now, step_id});
    if (new_step_starts_.size() > kMaxStepStarts) new_step_starts_.pop_front();
  }
  if (state_.load() == State::kRunning) {
    api_->ActivityPushExternalCorrelationId(kStepCorrelationKind, step_id);
  }
}

void CuptiTracer::StepEnd(uint64_t step_id) {
  if (state_.load() == State::kRunning) {
    uint64_t popped = 0;
    api_->ActivityPopExternalCorrelationId(kStepCorrelationKind, &popped);
  }
}

void CuptiTracer::OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;  // As many as fit.
  *buffer = pool_.Acquire();
  if (*buffer == nullptr) {
    // At the cap: CUPTI gets nothing and drops records (counted by CUPTI too).
    refused_buffers_.fetch_add(1);
    *size = 0;
    return;
  }
  *size = pool_.buffer_bytes();
}

void CuptiTracer::OnBufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                    size_t size, size_t valid_size) {
  if (buffer == nullptr) return;
  size_t dropped = 0;
  if (api_ != nullptr &&
      api_->ActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS) {
    cupti_dropped_.fetch_add(static_cast<int64_t>(dropped));
  }
  {
    internal::MutexLock lock(&queue_mu_);
    completed_.push_back({buffer, valid_size});
    ++completed_count_;
  }
  completed_cv_.Signal();
}

int64_t CuptiTracer::dropped() const {
  internal::MutexLock lock(&parse_mu_);
  return cupti_dropped_.load() + over_cap_events_ + parser_.counters().bad_timestamps;
}

int64_t CuptiTracer::dropped_buffers() const {
  internal::MutexLock lock(&parse_mu_);
  return refused_buffers_.load() + aborted_buffers_;
}

std::string CuptiTracer::Collect() {
  std::string trace(PrepareCollect(), '\0');
  WritePrepared(trace.data());
  return trace;
}

namespace {

// The limits of the devices the parser met, as the stats each Device message carries: what a
// kernel's active_blocks_per_sm is read against (docs/device-tracing.md).
std::vector<DeviceStats> DeviceLimitStats(const ActivityParser& parser) {
  const ActivityParser::DeviceStatNames& n = parser.device_stat_names();
  std::vector<DeviceStats> out;
  for (const auto& [id, limits] : parser.devices()) {
    out.push_back(
        {id,
         {{n.sm_count, limits.numSms},
          {n.max_threads_per_sm, limits.maxThreadsPerMultiprocessor},
          {n.registers_per_sm, limits.regsPerMultiprocessor},
          {n.shared_memory_per_sm, static_cast<int64_t>(limits.sharedMemPerMultiprocessor)},
          {n.compute_capability, limits.computeMajor * 10 + limits.computeMinor}}});
  }
  return out;
}

}  // namespace

size_t CuptiTracer::PrepareCollect() {
  if (prepared_) return writer_.size();
  const bool running = state_.load() == State::kRunning;
  // Non-forced: CUPTI completes every buffer holding finished records, so
  // they reach this collect (the completion callback runs before it returns).
  if (running && options_.flush_on_collect) api_->ActivityFlushAll(0);
  if (api_ != nullptr) WaitParsed();
  // Take what was parsed; the parse thread goes on into blocks from the pool.
  EventBlocks& events = collected_;
  std::vector<std::pair<uint32_t, uint64_t>>& external = collected_external_;
  int64_t total_dropped, total_buffers;
  {
    internal::MutexLock lock(&parse_mu_);
    events.swap(events_);  // events_ goes on empty, taking blocks from the pool.
    external.swap(new_external_);
    collected_names_ = NameSnapshot(names_);
    collected_devices_ = DeviceLimitStats(parser_);
    total_dropped = cupti_dropped_.load() + over_cap_events_ + parser_.counters().bad_timestamps;
    total_buffers = refused_buffers_.load() + aborted_buffers_;
  }
  for (const auto& [correlation, step] : external) join_.Put({correlation, step});
  external.clear();
  if (options_.other_threads) {
    Join(events, running, nullptr);
  } else {
    // The time rule reads the parser's API calls: the parse thread waits
    // for this join. The step starts are taken after the lock, so every API
    // call in the table finds the step_begin that preceded it.
    internal::MutexLock lock(&parse_mu_);
    {
      internal::MutexLock steps_lock(&steps_mu_);
      step_starts_.insert(step_starts_.end(), new_step_starts_.begin(), new_step_starts_.end());
      new_step_starts_.clear();
    }
    while (step_starts_.size() > kMaxStepStarts) step_starts_.pop_front();
    Join(events, running, &parser_.launches());
  }
  held_count_.store(held_.size(), std::memory_order_relaxed);
  const int64_t dropped_now = total_dropped - reported_dropped_;
  reported_dropped_ = total_dropped;
  const int64_t dropped_buffers_now = total_buffers - reported_dropped_buffers_;
  reported_dropped_buffers_ = total_buffers;
  std::string status;
  if (state_.load() == State::kUnavailable) {
    status = "unavailable: " + unavailable_reason_;
  } else if (!busy_reason_.empty()) {
    status = "unavailable: " + busy_reason_;
  }
  prepared_ = true;
  const size_t size = writer_.Plan("cupti", collected_names_, events, dropped_now, status,
                                   dropped_buffers_now, collected_devices_);
  events.clear();  // Encoded: the blocks go back for the parse thread to fill.
  return size;
}

void CuptiTracer::Join(EventBlocks& events, bool running, const LaunchTable* launches) {
  auto lookup = [&](uint32_t correlation) -> uint64_t {
    const StepOf* found = join_.Find(correlation);
    return found != nullptr ? found->step : uint64_t{0};
  };
  const uint32_t training = training_thread_.load(std::memory_order_relaxed);
  // Sets e's step; false while it is not known yet. Rule 1 and 3: its
  // external correlation. Rule 2 without the callback (`launches`): launched
  // from another thread, the step begun last before that launch's CPU start.
  auto attribute = [&](DeviceEventData& e) -> bool {
    const uint32_t correlation = static_cast<uint32_t>(e.correlation_id);
    e.external_id = lookup(correlation);
    if (e.external_id != 0) return true;
    const ApiLaunch* launch = launches != nullptr ? launches->Find(correlation) : nullptr;
    if (launch == nullptr || launch->thread == training) return false;
    e.external_id = StepAt(launch->start_ns);  // 0: launched before the first step.
    ++time_rule_events_;
    return true;
  };
  const int64_t now = internal::WallClockNs();
  // Join in place: events whose step is not known yet move to held_ (their
  // external record may come later); the rest are compacted to the front.
  const size_t held_before = held_.size();
  size_t kept = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    DeviceEventData& e = events[i];
    if (e.external_id == 0 && e.correlation_id != 0 && !attribute(e) && running) {
      held_.push_back({e, now});
      continue;
    }
    if (kept != i) events[kept] = e;
    ++kept;
  }
  events.shrink(kept);
  // Held events (those before this collect's): joined now, or released
  // without a step once a bound runs out (or at stop); the rest stay, oldest
  // first.
  std::deque<Held> still_held;
  size_t index = 0;
  for (Held& h : held_) {
    const bool earlier = index++ < held_before;
    const bool known = earlier && attribute(h.event);
    if (earlier && (known || !running || now - h.since_ns >= options_.max_hold_ns)) {
      if (!known) ++released_unjoined_;
      events.push_back(h.event);
    } else {
      still_held.push_back(std::move(h));
    }
  }
  held_.swap(still_held);
  while (held_.size() > options_.max_held_events) {
    ++released_unjoined_;
    events.push_back(held_.front().event);
    held_.pop_front();
  }
}

uint64_t CuptiTracer::StepAt(int64_t at_ns) const {
  auto after = std::upper_bound(step_starts_.begin(), step_starts_.end(), at_ns,
                                [](int64_t t, const StepStart& s) { return t < s.at_ns; });
  return after == step_starts_.begin() ? uint64_t{0} : std::prev(after)->step;
}

void CuptiTracer::WritePrepared(char* out) {
  if (!prepared_) return;
  writer_.Write(out);
  writer_.Clear();
  prepared_ = false;
}

}  // namespace cupti
}  // namespace xdl_trace
