// ByteBoundedQueue and Completion: the hand-off between the training thread and the IO thread.
#include "io/bounded_queue.h"

#include <algorithm>
#include <utility>

namespace xdl_trace {
namespace internal {

void Completion::Notify(absl::Status status) {
  MutexLock lock(&mu_);
  status_ = std::move(status);
  done_ = true;
  cv_.SignalAll();
}

absl::Status Completion::Wait() {
  MutexLock lock(&mu_);
  while (!done_) cv_.Wait(&mu_);
  return status_;
}

ByteBoundedQueue::ByteBoundedQueue(int64_t max_bytes)
    : max_bytes_(std::max<int64_t>(max_bytes, 1)) {
  counters_.max_bytes = max_bytes_;
}

ByteBoundedQueue::PushResult ByteBoundedQueue::Push(WriterMessage message, OverflowPolicy policy) {
  const int64_t bytes = message.bytes();
  bool wake_consumer = false;
  {
    MutexLock lock(&mu_);
    // Room means: the record fits under the bound, or nothing is pending at all
    // (a record larger than the bound goes alone instead of waiting forever).
    auto has_room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return counters_.pending_bytes == 0 || counters_.pending_bytes + bytes <= max_bytes_;
    };
    if (!aborted_ && !has_room()) {
      if (policy == OverflowPolicy::kDrop) {
        ++counters_.dropped_records;
        return PushResult::kDropped;  // `message` is destroyed outside the lock.
      }
      ++counters_.blocked_pushes;
      ++waiting_producers_;
      while (!aborted_ && !has_room()) not_full_.Wait(&mu_);
      --waiting_producers_;
    }
    if (aborted_) {
      ++counters_.dropped_records;
      return PushResult::kAborted;
    }
    counters_.pending_bytes += bytes;
    counters_.high_water_bytes = std::max(counters_.high_water_bytes, counters_.pending_bytes);
    ++counters_.queued_records;
    queue_.push_back(std::move(message));
    wake_consumer = consumer_waiting_;
  }
  if (wake_consumer) not_empty_.Signal();
  return PushResult::kQueued;
}

void ByteBoundedQueue::PushControl(WriterMessage message) {
  bool wake_consumer = false;
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(message));
    wake_consumer = consumer_waiting_;
  }
  if (wake_consumer) not_empty_.Signal();
}

size_t ByteBoundedQueue::PopAll(std::deque<WriterMessage>* out,
                                std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mu_);
  consumer_waiting_ = true;
  while (queue_.empty()) {
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      not_empty_.Wait(&mu_);
    } else if (!not_empty_.WaitUntil(&mu_, deadline) && queue_.empty()) {
      break;
    }
  }
  consumer_waiting_ = false;
  out->swap(queue_);
  return out->size();
}

void ByteBoundedQueue::Release(int64_t bytes) {
  bool wake_producers = false;
  {
    MutexLock lock(&mu_);
    counters_.pending_bytes -= bytes;
    wake_producers = waiting_producers_ > 0;
  }
  if (wake_producers) not_full_.SignalAll();
}

void ByteBoundedQueue::Abort() {
  {
    MutexLock lock(&mu_);
    aborted_ = true;
  }
  not_full_.SignalAll();
}

ByteBoundedQueue::Counters ByteBoundedQueue::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace internal
}  // namespace xdl_trace
