// PendingBytes: a one-shot promise of host bytes, settled by the producer and waited on by the IO
// thread.
#include "xdl_trace/deferred.h"

#include <utility>

#include "core/mutex.h"

namespace xdl_trace {

// Shared by the PendingBytes (producer) and every record holding bytes():
// mu_ guards the settlement; the fence runs once, by the first waiter, outside
// the lock.
class PendingBytes::State : public DeferredBytes {
 public:
  ~State() override = default;

  void Arm(const char* base, Fence fence, std::shared_ptr<const void> keep_alive) {
    internal::MutexLock lock(&mu_);
    if (phase_ != Phase::kPending) return;
    base_ = base;
    fence_ = std::move(fence);
    keep_alive_ = std::move(keep_alive);
    phase_ = Phase::kArmed;
    cv_.SignalAll();
  }

  void Fail(absl::Status error) {
    internal::MutexLock lock(&mu_);
    if (phase_ != Phase::kPending) return;
    result_ = std::move(error);
    phase_ = Phase::kDone;
    cv_.SignalAll();
  }

  absl::StatusOr<const char*> Wait() override {
    Fence fence;
    {
      internal::MutexLock lock(&mu_);
      while (phase_ == Phase::kPending || phase_ == Phase::kFencing) cv_.Wait(&mu_);
      if (phase_ == Phase::kDone) return result_;
      phase_ = Phase::kFencing;  // This caller runs the fence; others wait for it.
      fence = std::move(fence_);
    }
    absl::Status fenced = fence ? fence() : absl::OkStatus();
    internal::MutexLock lock(&mu_);
    if (fenced.ok()) {
      result_ = base_;
    } else {
      result_ = std::move(fenced);
    }
    phase_ = Phase::kDone;
    cv_.SignalAll();
    return result_;
  }

 private:
  enum class Phase { kPending, kArmed, kFencing, kDone };

  internal::Mutex mu_;
  internal::CondVar cv_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kPending;
  const char* base_ ABSL_GUARDED_BY(mu_) = nullptr;
  Fence fence_ ABSL_GUARDED_BY(mu_);
  // Released with the last record holding this state (the staging lease).
  std::shared_ptr<const void> keep_alive_ ABSL_GUARDED_BY(mu_);
  absl::StatusOr<const char*> result_ ABSL_GUARDED_BY(mu_) = nullptr;
};

PendingBytes::PendingBytes() : state_(std::make_shared<State>()) {}

PendingBytes::~PendingBytes() {
  state_->Fail(absl::AbortedError(
      "the device copies of this step were abandoned before they were enqueued"));
}

std::shared_ptr<DeferredBytes> PendingBytes::bytes() const { return state_; }

void PendingBytes::Arm(const char* base, Fence fence, std::shared_ptr<const void> keep_alive) {
  state_->Arm(base, std::move(fence), std::move(keep_alive));
}

void PendingBytes::Fail(absl::Status error) {
  if (error.ok()) error = absl::UnknownError("PendingBytes::Fail with an OK status");
  state_->Fail(std::move(error));
}

}  // namespace xdl_trace
