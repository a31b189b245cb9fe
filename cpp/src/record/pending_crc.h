// The CRC-32C of a write-through frame, computed by its submitter while the IO thread writes it.
#ifndef XDL_TRACE_RECORD_PENDING_CRC_H_
#define XDL_TRACE_RECORD_PENDING_CRC_H_

#include <cstdint>

#include "core/mutex.h"

namespace xdl_trace {
namespace internal {

// Set once by the thread that submitted the frame (which keeps its pieces
// alive and unchanged until written, so it can read them concurrently with
// the IO thread's write); waited for by the IO thread once the frame is
// written, to extend the file's CRC. Every submitter sets it after queueing
// the frame, so Wait never waits on a frame nobody computes.
class PendingCrc {
 public:
  void Set(uint32_t crc) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    value_ = crc;
    ready_ = true;
    cv_.SignalAll();
  }
  uint32_t Wait() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    while (!ready_) cv_.Wait(&mu_);
    return value_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t value_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_PENDING_CRC_H_
