// The training-thread -> IO-thread queue: bounded by bytes, block/drop on overflow.
//
// In the spirit of spdlog's mpmc_blocking_q: data, flush and close travel
// through the same FIFO, so a flush is answered only after every record queued
// before it was written, and shutdown is "post close, join".
//
// Bytes stay "pending" from Push until the consumer Release()s them after
// writing, so the bound covers records the IO thread is still writing, not only
// those waiting: memory held by records is at most max_bytes (plus one record
// larger than the bound, which is admitted alone when nothing is pending).
#ifndef XDL_TRACE_IO_BOUNDED_QUEUE_H_
#define XDL_TRACE_IO_BOUNDED_QUEUE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/mutex.h"
#include "record/encoded_record.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// A one-shot status handed from the IO thread to a waiting caller (flush/close).
class Completion {
 public:
  void Notify(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Wait() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Mutex mu_;
  CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// One message to the IO thread.
struct WriterMessage {
  enum class Kind { kRecord, kFlush, kClose };

  // `written`, when given, is answered once the record is written (or
  // dropped), with the sticky error if any: a write-through.
  static WriterMessage Record(EncodedRecord record, std::shared_ptr<Completion> written = nullptr) {
    WriterMessage m;
    m.kind = Kind::kRecord;
    m.record = std::move(record);
    m.done = std::move(written);
    return m;
  }
  static WriterMessage Control(Kind kind, std::shared_ptr<Completion> done) {
    WriterMessage m;
    m.kind = kind;
    m.done = std::move(done);
    return m;
  }
  // Bytes counted against the bound: the frame for records, 0 for control.
  int64_t bytes() const {
    return kind == Kind::kRecord ? static_cast<int64_t>(record.FrameBytes()) : 0;
  }

  Kind kind = Kind::kRecord;
  EncodedRecord record;  // kRecord only.
  // kFlush, kClose and a write-through kRecord: answered by the IO thread.
  std::shared_ptr<Completion> done;
};

// Threading: any number of producers (Push/PushControl) and one consumer
// (PopAll/Release); counters() from any thread. Everything is guarded by mu_.
class ByteBoundedQueue {
 public:
  enum class PushResult {
    kQueued,   // The record is in the queue.
    kDropped,  // kDrop and the queue was full: the record was destroyed.
    kAborted,  // Abort() was called (write error): the record was destroyed.
  };

  struct Counters {
    int64_t max_bytes = 0;
    int64_t pending_bytes = 0;     // Pushed, not yet released by the consumer.
    int64_t high_water_bytes = 0;  // Largest pending_bytes seen.
    int64_t queued_records = 0;    // Records accepted by Push.
    int64_t dropped_records = 0;   // kDropped + kAborted results.
    int64_t blocked_pushes = 0;    // Pushes that had to wait for room (kBlock).
  };

  explicit ByteBoundedQueue(int64_t max_bytes);
  ByteBoundedQueue(const ByteBoundedQueue&) = delete;
  ByteBoundedQueue& operator=(const ByteBoundedQueue&) = delete;

  // Queues a record message (moved, never copied). When it would pass the bound:
  // kBlock waits for Release() (a record larger than the whole bound is admitted
  // once nothing is pending, so it cannot deadlock); kDrop drops it at once.
  // Returns kAborted without waiting once Abort() was called.
  PushResult Push(WriterMessage message, OverflowPolicy policy) ABSL_LOCKS_EXCLUDED(mu_);

  // Queues a flush/close message; it weighs nothing and is queued even after
  // Abort(), so the consumer always answers it.
  void PushControl(WriterMessage message) ABSL_LOCKS_EXCLUDED(mu_);

  // Consumer: moves every queued message into `*out` (which must be empty),
  // waiting until one arrives or `deadline` passes (time_point::max(): no
  // deadline). Returns the number of messages moved.
  size_t PopAll(std::deque<WriterMessage>* out, std::chrono::steady_clock::time_point deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Consumer: `bytes` of popped records are written (or discarded); frees room.
  void Release(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes blocked producers; every later Push returns kAborted at once.
  void Abort() ABSL_LOCKS_EXCLUDED(mu_);

  Counters counters() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int64_t max_bytes_;
  mutable Mutex mu_;
  CondVar not_empty_;  // Consumer waits here.
  CondVar not_full_;   // Blocked producers wait here.
  std::deque<WriterMessage> queue_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool consumer_waiting_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_producers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_BOUNDED_QUEUE_H_
