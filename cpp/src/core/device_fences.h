// Fences for deferred (device) captures (xdl_trace/deferred.h): CUDA events, a manual fence for
// fake devices, and the lease that tells a staging pool a buffer is free again. Every wait is
// bounded by the deadline it is given.
#ifndef XDL_TRACE_CORE_DEVICE_FENCES_H_
#define XDL_TRACE_CORE_DEVICE_FENCES_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/mutex.h"
#include "xdl_trace/deferred.h"

namespace xdl_trace {

// Completes when CUDA events (cudaEvent_t handles, torch.cuda.Event.cuda_event)
// have completed: cudaEventQuery through the CUDA runtime the process already
// loaded (torch's), or cuEventQuery through the driver, polled with a backoff
// up to 1 ms, so the wait ends at its deadline however the device is; the
// core never links CUDA. Waited on the IO thread without the GIL; the events
// must outlive the wait (the staging pool keeps them with their buffer).
// FailedPrecondition from Make when no CUDA library is loaded.
class CudaEventFence {
 public:
  static absl::StatusOr<std::shared_ptr<CudaEventFence>> Make(std::vector<uintptr_t> events);
  // OK once every event completed; DeadlineExceeded past `deadline`.
  absl::Status Wait(std::chrono::steady_clock::time_point deadline) const;

 private:
  explicit CudaEventFence(std::vector<uintptr_t> events) : events_(std::move(events)) {}
  const std::vector<uintptr_t> events_;
};

// A fence completed by a call: a fake device's copy engine (tests and the
// device benchmark only; the product waits on CudaEventFence). Thread-safe.
class ManualFenceForTesting {
 public:
  void Complete() ABSL_LOCKS_EXCLUDED(mu_);
  void Fail(std::string message) ABSL_LOCKS_EXCLUDED(mu_);
  // The status completed with; DeadlineExceeded past `deadline`.
  absl::Status Wait(std::chrono::steady_clock::time_point deadline) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable internal::Mutex mu_;
  mutable internal::CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// One staging buffer's lease: Hold() while records refer to the buffer; busy
// until the last holder let go (on the IO thread, after the write). The
// Python staging pool reuses a buffer once its lease is free. Thread-safe.
class StagingLease : public std::enable_shared_from_this<StagingLease> {
 public:
  // Marks the lease busy and returns the token whose release frees it.
  std::shared_ptr<const void> Hold() ABSL_LOCKS_EXCLUDED(mu_);
  bool busy() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (call without the GIL) until free or `timeout_s` passed; whether free.
  bool WaitFree(double timeout_s) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Release() ABSL_LOCKS_EXCLUDED(mu_);

  mutable internal::Mutex mu_;
  mutable internal::CondVar cv_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_DEVICE_FENCES_H_
