// The IO side of a tracer: a byte-bounded queue drained by one IO thread into data + meta files.
//
// TraceWriter is the interface the tracer uses. Open() returns the file writer
// (trace_writer.cc): the training-thread side (frame checks, the queue, the
// frame pool) and the IO thread, which runs an IoLoop (io_loop.h) that writes
// each data file through a DataFileSegment (data_file_segment.h).
#ifndef XDL_TRACE_IO_TRACE_WRITER_H_
#define XDL_TRACE_IO_TRACE_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/file_set.h"  // DataFilePath: where Open's files are.
#include "record/encoded_record.h"
#include "record/host_spans.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/config.h"
#include "xdl_trace/stats.h"

namespace xdl_trace {
namespace internal {

// The IO thread's name (Linux limits names to 15 characters).
inline constexpr char kIoThreadName[] = "xdl_trace_io";

// Written record buffers kept for reuse by one writer.
inline constexpr size_t kMaxPooledFrames = 4;

// What Submit did with a record that was valid and submitted in time.
enum class SubmitResult {
  kQueued,   // In the queue; the IO thread will write it.
  kDropped,  // kDrop and the queue was full: destroyed and counted in stats.
};

// Hooks for tests; production code leaves them empty.
struct WriterTestHooks {
  // Called on the IO thread before each record is written (a slow sink).
  std::function<void()> before_record_write;
};

// Threading: Submit/Flush/Close/TakeBuffer from the training thread (one at a
// time); stats() from any thread. Everything about files is owned by the IO
// thread. Written frames go back to a small pool (at most kMaxPooledFrames
// buffers and max_pending_mb of capacity) that TakeBuffer draws from, so
// record buffers hold at most twice max_pending_mb (queued + pooled).
class TraceWriter {
 public:
  // Opens output_dir once (OutputDir: created if needed, this rank's lock,
  // the first index after any existing "{prefix}.{name}.{rank}.{index}" file,
  // so nothing is overwritten), opens that file, writes the Header frame (with
  // `columns`, one descriptor per key, when given) and starts the IO thread,
  // whose loop gets only the options it uses (IoLoopOptionsFromConfig).
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(
      const TraceConfig& config, std::vector<std::string> keys, WriterTestHooks hooks = {},
      const std::vector<xdl::proto::ColumnDescriptor>& columns = {});

  virtual ~TraceWriter() = default;

  // Queues a record: kQueued once queued. Under kBlock waits while the queue
  // is full; under kDrop drops and counts it, and returns kDropped. After a
  // write error returns that error at once and counts the record as dropped.
  // InvalidArgument for a frame whose body passes kMaxFrameBytes or whose
  // length prefix is wrong; FailedPrecondition after Close. The record should
  // be contiguous: pieces pointing at memory the caller may change once
  // Submit returns are the caller's bug (use WriteThrough).
  virtual absl::StatusOr<SubmitResult> Submit(EncodedRecord record) = 0;
  // Write-through: queues a record (contiguous or in pieces, see
  // EncodedRecord) and returns once the IO thread has written it, or dropped
  // it after a write error; no Meta refresh, no fsync. Afterwards nothing
  // refers to the record's external pieces, so the caller may free or change
  // that memory. Returns the sticky write error (the record counted as
  // dropped) if any, at once when the error came before; waits for room
  // whatever the overflow policy (callers pair it with kBlock). The same
  // checks and errors as Submit.
  virtual absl::Status WriteThrough(EncodedRecord record) = 0;
  // Returns once every record submitted before it is written and Meta is
  // replaced; the sticky write error if any.
  virtual absl::Status Flush() = 0;
  // Flush, final Meta with closed_cleanly, fsync (if configured), join.
  // Idempotent.
  virtual absl::Status Close() = 0;

  virtual TraceStats stats() const = 0;

  // The run every file of this writer names: the config's run_id, or the one
  // Open generated (the only place a run id is made).
  virtual const std::string& run_id() const = 0;

  // Training thread: an empty string to encode the next record into, with
  // capacity >= min_capacity when a written record's buffer can be recycled
  // (else a fresh one). Never waits for the IO thread.
  virtual std::string TakeBuffer(size_t min_capacity) {
    (void)min_capacity;
    return std::string();
  }

  // Training thread: appends the IO thread's IO_WRITE spans since the
  // previous call to `out` (bounded: io/io_loop.h kMaxIoSpans).
  virtual void TakeIoSpans(std::vector<HostSpanInfo>* out) { (void)out; }
  // Any thread, also while Flush or Close wait: stop waiting for device
  // copies (IoLoop::AbandonWaits), so that wait ends promptly.
  virtual void AbandonWaits() {}
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_TRACE_WRITER_H_
