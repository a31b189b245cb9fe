// The file TraceWriter: checks frames, queues them, and owns the IO thread that runs the IoLoop.
#include "io/trace_writer.h"

#include <pthread.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/status_macros.h"
#include "core/thread_priority.h"
#include "io/bounded_queue.h"
#include "io/frame_pool.h"
#include "io/io_loop.h"
#include "io/limits.h"
#include "io/output_dir.h"

namespace xdl_trace {
namespace internal {
namespace {

// InvalidArgument unless `record` is a 4-byte length prefix and the body it
// announces; in pieces, the owned bytes start with the prefix and the pieces
// lie within them or are external, adding up to the frame.
absl::Status CheckFrame(const EncodedRecord& record) {
  const std::string& frame = record.frame;
  const size_t size = record.FrameBytes();
  if (frame.size() < 4 || size - 4 > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("xdl_trace: record frame of ", size,
                     " bytes does not fit the 4-byte length prefix (limit 4 GiB - 1 per record)"));
  }
  uint32_t prefix = 0;
  for (int i = 0; i < 4; ++i) prefix |= uint32_t{static_cast<uint8_t>(frame[i])} << (8 * i);
  if (prefix != size - 4) {
    return absl::InvalidArgumentError(absl::StrCat("xdl_trace: record frame length prefix ", prefix,
                                                   " does not match its body of ", size - 4,
                                                   " bytes"));
  }
  if (record.crc_at_write &&
      (frame.size() < kFrameLengthBytes + kRecordCrcBytes ||
       (!record.pieces.empty() &&
        (record.pieces.back().is_external() ||
         record.pieces.back().offset + record.pieces.back().size != frame.size() ||
         record.pieces.back().size < kRecordCrcBytes)))) {
    return absl::InvalidArgumentError(
        "xdl_trace: a record frame left for the writer to checksum does not end in its own "
        "checksum field");
  }
  if (record.pieces.empty()) {
    if (record.external_bytes == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "xdl_trace: record frame counts external bytes but has no pieces");
  }
  size_t owned = 0;
  size_t external = 0;
  for (const FramePiece& piece : record.pieces) {
    if (piece.is_external()) {
      external += piece.size;
    } else if (piece.offset > frame.size() || piece.size > frame.size() - piece.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("xdl_trace: record frame piece [", piece.offset, ", +", piece.size,
                       ") lies outside its ", frame.size(), " owned bytes"));
    } else {
      owned += piece.size;
    }
  }
  if (record.pieces.front().is_external() || record.pieces.front().offset != 0 ||
      owned != frame.size() || external != record.external_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "xdl_trace: record frame pieces (", owned, " owned + ", external,
        " external bytes) do not start with the length prefix and add up to the frame's ",
        frame.size(), " + ", record.external_bytes));
  }
  return absl::OkStatus();
}

int64_t PendingBytesBound(const TraceConfig& config) {
  return MegabytesToBytes(config.max_pending_mb);
}

// Threading: see TraceWriter. The queue and pool are internally locked; the
// loop's IO-thread state is touched only by thread_ once Start() returned.
class FileTraceWriter final : public TraceWriter {
 public:
  FileTraceWriter(const TraceConfig& config, IoLoopOptions loop_options, WriterTestHooks hooks,
                  OutputDir dir)
      : dir_(std::move(dir)),
        run_id_(config.run_id),
        overflow_(config.overflow),
        queue_(PendingBytesBound(config)),
        pool_(kMaxPooledFrames, PendingBytesBound(config)),
        loop_(std::move(loop_options), &queue_, &pool_, std::move(hooks.before_record_write)) {}

  ~FileTraceWriter() override { (void)Close(); }

  // Runs on the caller's thread: the first file, then the IO thread.
  absl::Status Start() {
    XDL_RETURN_IF_ERROR(loop_.Start(dir_));
    thread_ = std::thread([this] {
      NoWakeupPreemption();
      loop_.Run();
    });
    // Named for top, perf and the overhead benchmark's per-thread CPU figure.
    pthread_setname_np(thread_.native_handle(), kIoThreadName);
    return absl::OkStatus();
  }

  absl::StatusOr<SubmitResult> Submit(EncodedRecord record) override {
    if (closed_) return absl::FailedPreconditionError("xdl_trace: Submit after Close");
    XDL_RETURN_IF_ERROR(CheckFrame(record));
    if (loop_.failed()) {
      loop_.CountDropped();
      return loop_.error();
    }
    switch (queue_.Push(WriterMessage::Record(std::move(record)), overflow_)) {
      case ByteBoundedQueue::PushResult::kQueued:
        return SubmitResult::kQueued;
      case ByteBoundedQueue::PushResult::kDropped:
        loop_.CountDropped();
        return SubmitResult::kDropped;
      case ByteBoundedQueue::PushResult::kAborted:
        loop_.CountDropped();
        return loop_.error();
    }
    return SubmitResult::kDropped;
  }

  absl::Status WriteThrough(EncodedRecord record) override {
    if (closed_) return absl::FailedPreconditionError("xdl_trace: WriteThrough after Close");
    XDL_RETURN_IF_ERROR(CheckFrame(record));
    if (loop_.failed()) {
      loop_.CountDropped();
      return loop_.error();
    }
    auto written = std::make_shared<Completion>();
    // The IO thread seals a frame in pieces (SealFrame) and derives the file's
    // CRC from that one read of its bytes.
    // kBlock: one write-through is in flight at a time, so this waits at most
    // for records queued before it (kDrop + inline is refused by Validate).
    switch (
        queue_.Push(WriterMessage::Record(std::move(record), written), OverflowPolicy::kBlock)) {
      case ByteBoundedQueue::PushResult::kQueued:
        // The IO thread answers every queued record, written or dropped,
        // until Close (which this thread would be the one to call).
        return written->Wait();
      case ByteBoundedQueue::PushResult::kDropped:
      case ByteBoundedQueue::PushResult::kAborted:
        break;  // Destroyed by Push: nothing refers to the pieces.
    }
    loop_.CountDropped();
    return loop_.error();
  }

  absl::Status Flush() override {
    if (closed_) return close_status_;
    auto done = std::make_shared<Completion>();
    queue_.PushControl(WriterMessage::Control(WriterMessage::Kind::kFlush, done));
    return done->Wait();
  }

  absl::Status Close() override {
    if (closed_) return close_status_;
    closed_ = true;
    if (thread_.joinable()) {
      auto done = std::make_shared<Completion>();
      queue_.PushControl(WriterMessage::Control(WriterMessage::Kind::kClose, done));
      close_status_ = done->Wait();
      thread_.join();
    } else {
      close_status_ = loop_.error();
    }
    dir_.lock().Release();  // After the last Meta: a next writer on this rank may start.
    return close_status_;
  }

  std::string TakeBuffer(size_t min_capacity) override { return pool_.Take(min_capacity); }
  const std::string& run_id() const override { return run_id_; }
  void TakeIoSpans(std::vector<HostSpanInfo>* out) override { loop_.TakeIoSpans(out); }
  void AbandonWaits() override { loop_.AbandonWaits(); }

  TraceStats stats() const override {
    const IoLoop::Counters c = loop_.counters();
    const ByteBoundedQueue::Counters q = queue_.counters();
    TraceStats s;
    s.records_written = c.records_written;
    s.bytes_written = c.bytes_written;
    s.records_dropped = c.records_dropped;
    s.files_written = c.files_written;
    s.deferred_failed = c.deferred_failed;
    s.last_deferred_error = loop_.last_deferred_error();
    s.pending_bytes = q.pending_bytes;
    s.queue_high_water_bytes = q.high_water_bytes;
    s.last_error = loop_.error();
    return s;
  }

 private:
  // output_dir, open, and this rank's lock, held from Open to Close; outlives
  // loop_, whose files are created relative to it.
  OutputDir dir_;
  const std::string run_id_;
  const OverflowPolicy overflow_;
  ByteBoundedQueue queue_;  // Internally synchronized; outlives loop_.
  FramePool pool_;          // Internally synchronized: IO thread gives, training thread takes.
  IoLoop loop_;             // Run() on thread_; counters and error from any thread.

  // ---- Caller (training) thread only ----
  std::thread thread_;
  bool closed_ = false;
  absl::Status close_status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(
    const TraceConfig& config, std::vector<std::string> keys, WriterTestHooks hooks,
    const std::vector<xdl::proto::ColumnDescriptor>& columns) {
  XDL_RETURN_IF_ERROR(config.Validate());
  // The one place a run id is made: the lock file, every Header and Meta, and
  // the tracer (run_id()) all name the same run.
  TraceConfig named = config;
  if (named.run_id.empty()) named.run_id = NewRunId();
  // The one open of output_dir: created, locked for this rank and listed here.
  XDL_ASSIGN_OR_RETURN(OutputDir dir, OutputDir::Open(named));
  auto writer = std::make_unique<FileTraceWriter>(
      named, IoLoopOptionsFromConfig(named, keys, columns), std::move(hooks), std::move(dir));
  XDL_RETURN_IF_ERROR(writer->Start());
  return std::unique_ptr<TraceWriter>(std::move(writer));
}

}  // namespace internal
}  // namespace xdl_trace
