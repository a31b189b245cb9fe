// PendingBytes: a one-shot promise of host bytes, settled by the producer and waited on by the IO
// thread.
#include "xdl_trace/deferred.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/mutex.h"

namespace xdl_trace {
namespace {

// What keeps the staging memory of copies whose fence timed out: held for the
// process's life, so no late copy lands in memory handed to someone else.
void Strand(std::shared_ptr<const void> keep_alive) {
  static internal::Mutex* mu = new internal::Mutex();
  static auto* stranded = new std::vector<std::shared_ptr<const void>>();
  internal::MutexLock lock(mu);
  stranded->push_back(std::move(keep_alive));
}

}  // namespace

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
    armed_at_ = std::chrono::steady_clock::now();
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

  absl::StatusOr<const char*> Wait(std::chrono::steady_clock::duration timeout,
                                   const std::atomic<bool>* abandon) override {
    Fence fence;
    Deadline deadline;
    {
      internal::MutexLock lock(&mu_);
      const Deadline unarmed_deadline = std::chrono::steady_clock::now() + timeout;
      while (phase_ == Phase::kPending || phase_ == Phase::kFencing) {
        if (phase_ == Phase::kFencing) {  // Another waiter's fence, bounded by its deadline.
          cv_.Wait(&mu_);
          continue;
        }
        if (Abandoned(abandon)) {
          result_ = AbandonedError();
          phase_ = Phase::kDone;
          cv_.SignalAll();
          break;
        }
        // Unarmed past the bound: nobody is enqueueing these copies.
        if (!cv_.WaitUntil(&mu_, SliceEnd(unarmed_deadline, abandon)) &&
            phase_ == Phase::kPending && std::chrono::steady_clock::now() >= unarmed_deadline) {
          result_ = absl::DeadlineExceededError(
              absl::StrCat("the device copies were not enqueued within ", Seconds(timeout),
                           " s (device_fence_timeout_s)"));
          phase_ = Phase::kDone;
          cv_.SignalAll();
        }
      }
      if (phase_ == Phase::kDone) return result_;
      phase_ = Phase::kFencing;  // This caller runs the fence; others wait for it.
      fence = std::move(fence_);
      deadline = armed_at_ + timeout;
    }
    absl::Status fenced = absl::OkStatus();
    while (fence) {
      // Once abandoned, one look at the fence (copies already done still count).
      const Deadline end =
          Abandoned(abandon) ? std::chrono::steady_clock::now() : SliceEnd(deadline, abandon);
      fenced = fence(end);
      if (!absl::IsDeadlineExceeded(fenced) || std::chrono::steady_clock::now() >= deadline) break;
      if (Abandoned(abandon)) {
        fenced = AbandonedError();
        break;
      }
    }
    internal::MutexLock lock(&mu_);
    if (fenced.ok()) {
      result_ = base_;
    } else if (absl::IsCancelled(fenced)) {
      result_ = std::move(fenced);
      Strand(std::move(keep_alive_));  // The copies may land yet.
    } else if (absl::IsDeadlineExceeded(fenced)) {
      result_ = absl::DeadlineExceededError(
          absl::StrCat("the device copies did not complete within ", Seconds(timeout),
                       " s of their step (device_fence_timeout_s; a hung kernel or "
                       "collective?): ",
                       fenced.message()));
      Strand(std::move(keep_alive_));
    } else {
      result_ = std::move(fenced);
    }
    phase_ = Phase::kDone;
    cv_.SignalAll();
    return result_;
  }

 private:
  using Deadline = PendingBytes::Deadline;
  enum class Phase { kPending, kArmed, kFencing, kDone };

  static bool Abandoned(const std::atomic<bool>* abandon) {
    return abandon != nullptr && abandon->load(std::memory_order_acquire);
  }
  static absl::Status AbandonedError() {
    return absl::CancelledError(
        "the wait for the device copies was abandoned (interrupted: Ctrl-C or SIGTERM)");
  }
  // Where one slice of a wait ends: `deadline`, or sooner while an abandon
  // flag is watched.
  static Deadline SliceEnd(Deadline deadline, const std::atomic<bool>* abandon) {
    if (abandon == nullptr) return deadline;
    return std::min(deadline, std::chrono::steady_clock::now() + kAbandonPoll);
  }
  static double Seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  internal::Mutex mu_;
  internal::CondVar cv_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kPending;
  const char* base_ ABSL_GUARDED_BY(mu_) = nullptr;
  Deadline armed_at_ ABSL_GUARDED_BY(mu_);
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
