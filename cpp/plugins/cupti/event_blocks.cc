// Parsed events in fixed blocks from a shared pool: appending never moves an event, and a
// collect's blocks go back for the parse thread to fill again.
#include "event_blocks.h"

#include <utility>

namespace xdl_trace {
namespace cupti {

EventBlock EventBlockPool::Take() {
  {
    internal::MutexLock lock(&mu_);
    if (!free_.empty()) {
      EventBlock block = std::move(free_.back());
      free_.pop_back();
      return block;
    }
    ++allocated_;
  }
  return EventBlock(new DeviceEventData[kEventsPerBlock]);  // Allocated outside the lock.
}

void EventBlockPool::Give(std::vector<EventBlock>* blocks) {
  internal::MutexLock lock(&mu_);
  for (EventBlock& block : *blocks) free_.push_back(std::move(block));
  blocks->clear();
}

size_t EventBlockPool::allocated() const {
  internal::MutexLock lock(&mu_);
  return allocated_;
}

DeviceEventData& EventBlocks::emplace_back() {
  if (size_ == blocks_.size() * kEventsPerBlock) {
    blocks_.push_back(pool_ != nullptr ? pool_->Take()
                                       : EventBlock(new DeviceEventData[kEventsPerBlock]));
  }
  DeviceEventData& e = (*this)[size_++];
  e = DeviceEventData{};  // A pooled block holds earlier events.
  return e;
}

void EventBlocks::clear() {
  size_ = 0;
  if (pool_ != nullptr) {
    pool_->Give(&blocks_);
  } else {
    blocks_.clear();
  }
}

void EventBlocks::swap(EventBlocks& other) {
  std::swap(pool_, other.pool_);
  blocks_.swap(other.blocks_);
  std::swap(size_, other.size_);
}

}  // namespace cupti
}  // namespace xdl_trace
