// Tensor bytes that reach host memory after Step returns: device-to-host copies in flight.
//
// A producer that copies device tensors asynchronously (the Python binding
// for CUDA tensors; a C++ program with its own CUDA streams) captures a step's
// values as CapturedTensor{view, deferred = pending.bytes(), offset}, lets the
// tracer's Step queue the record, then enqueues the copies into host staging
// memory and arms the PendingBytes with that memory and a fence (a CUDA event
// to wait on). The IO thread waits for the fence before it writes the record,
// never the training thread. The core itself knows nothing of CUDA.
#ifndef XDL_TRACE_DEFERRED_H_
#define XDL_TRACE_DEFERRED_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace xdl_trace {

// The consumer's side: what a record holds for its deferred columns.
// Thread-safe.
class DeferredBytes {
 public:
  virtual ~DeferredBytes() = default;
  // Blocks until the bytes have landed and returns their base address (valid
  // while this object lives), or the error that means they never will:
  // DeadlineExceeded when they have not landed `timeout` after they were
  // armed (after this call began, while they are not armed); Cancelled soon
  // (within kAbandonPoll) after `*abandon` turns true, when given: the owner
  // gave up waiting (Ctrl-C during close). Called on the IO thread, without
  // the GIL; every call gets the same answer.
  virtual absl::StatusOr<const char*> Wait(std::chrono::steady_clock::duration timeout,
                                           const std::atomic<bool>* abandon = nullptr) = 0;

  // How often a wait looks at its abandon flag.
  static constexpr std::chrono::milliseconds kAbandonPoll{50};
};

// The producer's side: one PendingBytes per batch of copies (a traced step's
// device tensors), armed or failed exactly once. Thread-safe.
//
// Waits end: an armed batch once its fence returns; a failed one at once; a
// PendingBytes destroyed unarmed fails its bytes() ("abandoned"), so a record
// never waits on copies nobody will enqueue.
class PendingBytes {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  // Blocks until the copies are complete (e.g. a CUDA event) and returns OK
  // when the bytes are valid, or DeadlineExceeded once `deadline` passed with
  // the copies still in flight. Called on the IO thread, without the GIL;
  // called again with a later deadline after a DeadlineExceeded when the
  // waiter watches an abandon flag (it waits in slices of kAbandonPoll).
  using Fence = std::function<absl::Status(Deadline deadline)>;

  PendingBytes();
  ~PendingBytes();  // Fails bytes() when neither Arm nor Fail was called.
  PendingBytes(const PendingBytes&) = delete;
  PendingBytes& operator=(const PendingBytes&) = delete;

  // What the captured tensors refer to.
  std::shared_ptr<DeferredBytes> bytes() const;

  // The bytes will be at `base` once `fence` returned OK. `keep_alive` (the
  // staging memory, or a lease on it) is released when the last record
  // referring to bytes() has been written or dropped; never when the fence
  // timed out (the copies may land yet: the memory is not reused).
  void Arm(const char* base, Fence fence, std::shared_ptr<const void> keep_alive);
  // The copies will not happen: records referring to bytes() are dropped and
  // counted (TraceStats::deferred_failed; a ResourceExhausted error, the
  // staging memory full under OverflowPolicy::kDrop, counts as a dropped
  // record only).
  void Fail(absl::Status error);

 private:
  class State;
  std::shared_ptr<State> state_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_DEFERRED_H_
