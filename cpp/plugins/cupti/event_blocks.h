// Parsed events in fixed blocks from a shared pool: appending never moves an event, and a
// collect's blocks go back for the parse thread to fill again.
#ifndef XDL_TRACE_PLUGINS_CUPTI_EVENT_BLOCKS_H_
#define XDL_TRACE_PLUGINS_CUPTI_EVENT_BLOCKS_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "device_trace_serializer.h"

namespace xdl_trace {
namespace cupti {

// Events a block holds (2 MiB of 128-byte events).
inline constexpr size_t kEventsPerBlock = size_t{1} << 14;

using EventBlock = std::unique_ptr<DeviceEventData[]>;

// Blocks no EventBlocks holds, kept for the next ones to need a block: the
// tracer's events take at most as many blocks as they ever held at once
// (parsed events are capped by max_events), and no block is zero-filled by
// the system twice.
// Threading: any thread (the parse thread takes, the collecting one gives).
class EventBlockPool {
 public:
  EventBlock Take() ABSL_LOCKS_EXCLUDED(mu_);
  void Give(std::vector<EventBlock>* blocks) ABSL_LOCKS_EXCLUDED(mu_);  // Empties `blocks`.
  size_t allocated() const ABSL_LOCKS_EXCLUDED(mu_);                    // Blocks, in use or free.

 private:
  mutable internal::Mutex mu_;
  std::vector<EventBlock> free_ ABSL_GUARDED_BY(mu_);
  size_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

// A sequence of events in blocks of kEventsPerBlock: the parser appends (a
// block is taken when the last one is full, and events never move, unlike a
// vector's, which copies itself at each doubling and keeps its largest
// capacity resident), the join compacts it in place, the writer reads it by
// index. clear() hands every block back to the pool (freed without one).
// Threading: one thread at a time; the pool may be shared.
class EventBlocks {
 public:
  explicit EventBlocks(EventBlockPool* pool = nullptr) : pool_(pool) {}
  ~EventBlocks() { clear(); }
  EventBlocks(const EventBlocks&) = delete;
  EventBlocks& operator=(const EventBlocks&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  DeviceEventData& operator[](size_t i) {
    return blocks_[i / kEventsPerBlock][i % kEventsPerBlock];
  }
  const DeviceEventData& operator[](size_t i) const {
    return blocks_[i / kEventsPerBlock][i % kEventsPerBlock];
  }
  // A default DeviceEventData at the end.
  DeviceEventData& emplace_back();
  void push_back(const DeviceEventData& e) { emplace_back() = e; }
  void pop_back() { --size_; }
  // Keeps the first `n` events (n <= size()); the blocks stay for later appends.
  void shrink(size_t n) { size_ = n; }
  // Forgets every event and hands the blocks back.
  void clear();
  // Swaps contents and pools.
  void swap(EventBlocks& other);

 private:
  EventBlockPool* pool_;
  std::vector<EventBlock> blocks_;
  size_t size_ = 0;
};

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_EVENT_BLOCKS_H_
