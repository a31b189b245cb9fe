// CUDA event and manual fences, and staging leases (device_fences.h).
#include "core/device_fences.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace xdl_trace {
namespace {

// cudaErrorNotReady and CUDA_ERROR_NOT_READY: the event has not completed yet.
constexpr int kNotReady = 600;

// The entry points a fence needs, from whichever CUDA library is loaded.
struct CudaApi {
  int (*query)(void* event) = nullptr;  // cudaEventQuery or cuEventQuery.
  std::string library;                  // For error messages.
  bool driver = false;
  const char* (*runtime_error_string)(int) = nullptr;
  int (*driver_error_string)(int, const char**) = nullptr;

  std::string Describe(int code) const {
    const char* text = nullptr;
    if (runtime_error_string != nullptr) text = runtime_error_string(code);
    if (driver_error_string != nullptr) driver_error_string(code, &text);
    return absl::StrCat(driver ? "cuEventQuery" : "cudaEventQuery",
                        " failed: ", text != nullptr ? text : "error", " (", code, ")");
  }
};

// Path of the loaded shared object whose file name contains `needle`, or "".
std::string LoadedLibrary(const char* needle) {
  struct Search {
    const char* needle;
    std::string path;
  } search{needle, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, s->needle) != nullptr) {
          s->path = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &search);
  return search.path;
}

// Looked up once per process: torch loads the runtime before any CUDA event exists.
const CudaApi* FindCudaApi() {
  static const CudaApi* api = []() -> const CudaApi* {
    const std::string runtime = LoadedLibrary("libcudart.so");
    if (void* handle =
            runtime.empty() ? nullptr : dlopen(runtime.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
      auto* found = new CudaApi();
      found->query = reinterpret_cast<int (*)(void*)>(dlsym(handle, "cudaEventQuery"));
      found->runtime_error_string =
          reinterpret_cast<const char* (*)(int)>(dlsym(handle, "cudaGetErrorString"));
      found->library = runtime;
      if (found->query != nullptr) return found;
      delete found;
    }
    if (void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
      auto* found = new CudaApi();
      found->query = reinterpret_cast<int (*)(void*)>(dlsym(handle, "cuEventQuery"));
      found->driver_error_string =
          reinterpret_cast<int (*)(int, const char**)>(dlsym(handle, "cuGetErrorString"));
      found->library = "libcuda.so.1";
      found->driver = true;
      if (found->query != nullptr) return found;
      delete found;
    }
    return nullptr;
  }();
  return api;
}

}  // namespace

absl::StatusOr<std::shared_ptr<CudaEventFence>> CudaEventFence::Make(
    std::vector<uintptr_t> events) {
  if (FindCudaApi() == nullptr) {
    return absl::FailedPreconditionError(
        "no CUDA runtime or driver is loaded in this process (import torch and use CUDA first)");
  }
  return std::shared_ptr<CudaEventFence>(new CudaEventFence(std::move(events)));
}

absl::Status CudaEventFence::Wait(std::chrono::steady_clock::time_point deadline) const {
  const CudaApi* api = FindCudaApi();
  std::chrono::microseconds pause(20);  // Doubles up to 1 ms while the device is busy.
  for (uintptr_t event : events_) {
    while (true) {
      const int code = api->query(reinterpret_cast<void*>(event));
      if (code == 0) break;
      if (code != kNotReady) return absl::InternalError(api->Describe(code));
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError("a CUDA event of the copies is still pending");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  return absl::OkStatus();
}

void ManualFenceForTesting::Complete() {
  internal::MutexLock lock(&mu_);
  done_ = true;
  cv_.SignalAll();
}

void ManualFenceForTesting::Fail(std::string message) {
  internal::MutexLock lock(&mu_);
  if (done_) return;
  status_ = absl::InternalError(std::move(message));
  done_ = true;
  cv_.SignalAll();
}

absl::Status ManualFenceForTesting::Wait(std::chrono::steady_clock::time_point deadline) const {
  internal::MutexLock lock(&mu_);
  while (!done_) {
    if (!cv_.WaitUntil(&mu_, deadline) && !done_) {
      return absl::DeadlineExceededError("the manual fence was not completed");
    }
  }
  return status_;
}

std::shared_ptr<const void> StagingLease::Hold() {
  {
    internal::MutexLock lock(&mu_);
    busy_ = true;
  }
  std::shared_ptr<StagingLease> self = shared_from_this();
  return std::shared_ptr<const void>(self.get(), [self](const void*) { self->Release(); });
}

void StagingLease::Release() {
  internal::MutexLock lock(&mu_);
  busy_ = false;
  cv_.SignalAll();
}

bool StagingLease::busy() const {
  internal::MutexLock lock(&mu_);
  return busy_;
}

bool StagingLease::WaitFree(double timeout_s) const {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s < 0 ? 0 : timeout_s));
  internal::MutexLock lock(&mu_);
  while (busy_) {
    if (!cv_.WaitUntil(&mu_, deadline)) return !busy_;
  }
  return true;
}

}  // namespace xdl_trace
