// FramePool: bounded recycling of record buffers between the IO thread and the training thread.
#include "io/frame_pool.h"

#include <utility>

namespace xdl_trace {
namespace internal {

FramePool::FramePool(size_t max_buffers, int64_t max_bytes)
    : max_buffers_(max_buffers), max_bytes_(max_bytes) {
  free_.reserve(max_buffers_);  // Give() never allocates under the lock.
}

std::string FramePool::Take(size_t min_capacity) {
  std::string out;
  std::string stale;  // Freed after the lock is released.
  {
    MutexLock lock(&mu_);
    size_t best = free_.size();
    size_t largest = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      const size_t capacity = free_[i].capacity();
      if (capacity >= min_capacity && (best == free_.size() || capacity < free_[best].capacity())) {
        best = i;
      }
      if (largest == free_.size() || capacity > free_[largest].capacity()) largest = i;
    }
    const size_t pick = best != free_.size() ? best : largest;
    if (pick != free_.size()) {
      bytes_ -= static_cast<int64_t>(free_[pick].capacity());
      std::swap(free_[pick], free_.back());
      if (best != free_.size()) {
        out = std::move(free_.back());
        ++reused_;
      } else {
        stale = std::move(free_.back());
      }
      free_.pop_back();
    }
  }
  out.clear();
  return out;
}

void FramePool::Give(std::string buffer) {
  const int64_t capacity = static_cast<int64_t>(buffer.capacity());
  if (max_buffers_ == 0 || capacity > max_bytes_) return;  // Freed here.
  buffer.clear();
  if (!mu_.TryLock()) return;  // The producer is in Take(): free rather than wait.
  if (free_.size() < max_buffers_ && bytes_ + capacity <= max_bytes_) {
    bytes_ += capacity;
    free_.push_back(std::move(buffer));
  }
  mu_.Unlock();
  // `buffer`, when not kept, is freed here, outside the lock.
}

size_t FramePool::buffers() const {
  MutexLock lock(&mu_);
  return free_.size();
}

int64_t FramePool::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

int64_t FramePool::reused() const {
  MutexLock lock(&mu_);
  return reused_;
}

}  // namespace internal
}  // namespace xdl_trace
