// A bounded free-list of record buffers: the IO thread returns written frames, the tracer reuses.
//
// A 6 MB std::string is served by mmap and returned with munmap, so a fresh
// buffer per record costs the training thread a page fault per 4 KiB it
// encodes. Recycling keeps a few buffers (capacity kept) warm instead.
#ifndef XDL_TRACE_IO_FRAME_POOL_H_
#define XDL_TRACE_IO_FRAME_POOL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"

namespace xdl_trace {
namespace internal {

// Threading: Take() from the producer (training) thread, Give() from the
// consumer (IO) thread, counters from any thread; all state is guarded by mu_,
// held only to move a string in or out (never while allocating or freeing).
// Bounds: at most max_buffers buffers and max_bytes of capacity are pooled.
class FramePool {
 public:
  FramePool(size_t max_buffers, int64_t max_bytes);
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  // An empty string whose capacity is at least `min_capacity` when the pool
  // holds one (the smallest such), else a fresh empty string. When nothing
  // fits, the largest pooled buffer is freed, so sizes that stopped occurring
  // do not keep their memory.
  std::string Take(size_t min_capacity) ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps `buffer` (cleared, capacity kept) when it fits the bounds, else frees
  // it. Never waits: when the producer holds the lock, the buffer is freed.
  void Give(std::string buffer) ABSL_LOCKS_EXCLUDED(mu_);

  size_t buffers() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);   // Pooled capacity.
  int64_t reused() const ABSL_LOCKS_EXCLUDED(mu_);  // Take() calls served from the pool.

 private:
  const size_t max_buffers_;
  const int64_t max_bytes_;
  mutable Mutex mu_;
  std::vector<std::string> free_ ABSL_GUARDED_BY(mu_);  // Capacity reserved up front.
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_FRAME_POOL_H_
