// The IO thread's loop: queue messages in, writev batches, rollover, Meta deadline, stats, errors.
//
// The worker half of the writer (DataFileSegment is the sink half), after
// spdlog's thread_pool: it knows messages, the queue and the frame pool, and
// hands batches of frames to the current segment. Flush and close arrive
// through the same FIFO as records and are answered through their Completion
// once everything queued before them is written.
#ifndef XDL_TRACE_IO_IO_LOOP_H_
#define XDL_TRACE_IO_IO_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/mutex.h"
#include "io/bounded_queue.h"
#include "io/data_file_segment.h"
#include "io/frame_pool.h"
#include "io/output_dir.h"
#include "record/encoded_record.h"
#include "record/host_spans.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// IO_WRITE host spans kept between two records of the training thread.
inline constexpr size_t kMaxIoSpans = 256;

// A write group is handed to the segment once it holds kMaxIovecs frames or
// this many bytes, so the queue bytes it holds go back to producers soon.
inline constexpr int64_t kMaxGroupBytes = int64_t{16} << 20;

// What the IO thread uses of a TraceConfig: its segments' options and the
// Meta refresh period. The queue's bound and overflow policy stay with the
// producers' side (TraceWriter).
struct IoLoopOptions {
  SegmentOptions segment;       // dir_fd is set by IoLoop::Start.
  double meta_interval_s = 10;  // Meta refresh period; not > 0: never on a timer.
  // The longest a record waits for its device copies (TraceConfig's
  // device_fence_timeout_s).
  std::chrono::steady_clock::duration device_fence_timeout = std::chrono::seconds(60);
};

// The one place a TraceConfig becomes the IO thread's options. `config.run_id`
// is written as given (TraceWriter::Open names the run); the Header frame
// holds `keys`, `columns` (one per key, or none) and config.run.
IoLoopOptions IoLoopOptionsFromConfig(const TraceConfig& config,
                                      const std::vector<std::string>& keys,
                                      const std::vector<xdl::proto::ColumnDescriptor>& columns);

// Threading: Start() on the caller's thread before the IO thread exists; Run()
// on the IO thread, which alone owns the segment, the write group and the Meta
// deadline (no lock); counters(), error(), failed() and CountDropped() from any
// thread. The queue and pool are shared with producers (internally locked) and
// must outlive the loop.
class IoLoop {
 public:
  struct Counters {
    int64_t records_written = 0;
    int64_t bytes_written = 0;
    int64_t records_dropped = 0;
    int64_t files_written = 0;
    int64_t deferred_failed = 0;  // Records dropped because their device copies failed.
  };

  // `before_record_write`, when set, runs on the IO thread before each record
  // joins a write group (a slow sink for tests).
  IoLoop(IoLoopOptions options, ByteBoundedQueue* queue, FramePool* pool,
         std::function<void()> before_record_write = nullptr);
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // Opens the first data file in `dir` (which must outlive the loop) at the
  // index after every existing one (Header and first Meta written); every
  // later file is created relative to dir.fd(). Call once, before Run().
  absl::Status Start(const OutputDir& dir);

  // The IO thread: handles messages in order until a close message, which it
  // answers (final Meta with closed_cleanly, fd closed) before returning.
  void Run();

  Counters counters() const;
  // The first write error (sticky); OK while none happened.
  absl::Status error() const ABSL_LOCKS_EXCLUDED(error_mu_);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The latest record lost to failed device copies (not sticky: the file is
  // fine and later records are written); OK while none.
  absl::Status last_deferred_error() const ABSL_LOCKS_EXCLUDED(error_mu_);
  // A producer dropped a record (queue full, or after an error): counted in
  // stats and in the next Meta's dropped_records.
  void CountDropped() { records_dropped_.fetch_add(1, std::memory_order_relaxed); }
  // Any thread (the training thread, per record): appends the IO_WRITE spans
  // of the writes since the previous call (at most kMaxIoSpans, the rest
  // counted on the last one) to `out`.
  void TakeIoSpans(std::vector<HostSpanInfo>* out) ABSL_LOCKS_EXCLUDED(io_spans_mu_);
  // Any thread (Ctrl-C during a close or flush): the IO thread stops waiting
  // for device copies (within DeferredBytes::kAbandonPoll); records whose
  // copies are not complete are dropped and counted as deferred_failed, and
  // everything else is written as usual. For good: later fences get one look.
  void AbandonWaits() { abandon_waits_.store(true, std::memory_order_release); }

 private:
  using Clock = std::chrono::steady_clock;

  bool ProcessBatch(std::deque<WriterMessage>* batch);
  void AddRecord(EncodedRecord* record);
  void DropRecord(EncodedRecord* record);
  // Drops a record whose deferred bytes will never arrive: counted as dropped,
  // and as failed (with the error kept) unless it is ResourceExhausted (the
  // producer had no staging memory under kDrop).
  void DropDeferred(EncodedRecord* record, const absl::Status& status);
  void WriteGroup();
  absl::Status OpenSegment(int64_t index);
  absl::Status RotateSegment();
  // Replaces the Meta when stale (always when `closed_cleanly`), unless an
  // error already stopped writing; a failure becomes the sticky error.
  void RefreshMeta(bool closed_cleanly);
  // Makes `status` the sticky error (the first one wins) and aborts the queue
  // so no producer waits for room that will never come.
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(error_mu_);
  Clock::time_point NextMetaDeadline() const;
  int64_t dropped() const { return records_dropped_.load(std::memory_order_relaxed); }

  // ---- Set up by the constructor and Start(), then read-only ----
  IoLoopOptions options_;
  ByteBoundedQueue* const queue_;
  FramePool* const pool_;
  const std::function<void()> before_record_write_;

  // ---- Shared between threads ----
  std::atomic<int64_t> records_written_{0};
  std::atomic<int64_t> bytes_written_{0};
  std::atomic<int64_t> records_dropped_{0};
  std::atomic<int64_t> files_written_{0};
  std::atomic<bool> failed_{false};         // Fast path copy of !error_.ok().
  std::atomic<bool> abandon_waits_{false};  // Set by AbandonWaits, read by the fence waits.
  mutable Mutex error_mu_;
  absl::Status error_ ABSL_GUARDED_BY(error_mu_);
  std::atomic<int64_t> deferred_failed_{0};
  absl::Status last_deferred_error_ ABSL_GUARDED_BY(error_mu_);
  // One IO_WRITE span per write group: the IO thread adds, the training thread takes.
  mutable Mutex io_spans_mu_;
  BoundedSpanLog io_spans_ ABSL_GUARDED_BY(io_spans_mu_){kMaxIoSpans};

  // ---- IO thread only (and Start(), before the thread exists) ----
  std::unique_ptr<DataFileSegment> segment_;  // Null only after an error or close.
  Clock::time_point next_meta_;
  std::vector<EncodedRecord*> group_;  // Frames to write next (owned by the batch).
  int64_t group_bytes_ = 0;
  int64_t io_thread_id_ = 0;  // Set when Run() starts.
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_IO_LOOP_H_
