// The IO thread's loop: drains the queue into write groups for the current data file segment.
#include "io/io_loop.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/status_macros.h"
#include "io/file_set.h"
#include "io/limits.h"

namespace xdl_trace {
namespace internal {

IoLoopOptions IoLoopOptionsFromConfig(const TraceConfig& config,
                                      const std::vector<std::string>& keys,
                                      const std::vector<xdl::proto::ColumnDescriptor>& columns) {
  IoLoopOptions options;
  SegmentOptions& segment = options.segment;
  segment.output_dir = config.output_dir;
  segment.stem = FileStem(config);
  segment.rank = config.rank;
  segment.run_id = config.run_id;
  segment.fsync = config.fsync;
  segment.max_file_bytes = MegabytesToBytes(config.max_file_m_size);
  segment.header_frame = DataFileSegment::HeaderFrame(keys, columns, config);
  options.meta_interval_s = config.meta_interval_s;
  options.device_fence_timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::min(config.device_fence_timeout_s, 1e9)));
  return options;
}

IoLoop::IoLoop(IoLoopOptions options, ByteBoundedQueue* queue, FramePool* pool,
               std::function<void()> before_record_write)
    : options_(std::move(options)),
      queue_(queue),
      pool_(pool),
      before_record_write_(std::move(before_record_write)) {}

absl::Status IoLoop::Start(const OutputDir& dir) {
  // Files inside output_dir are never followed (O_NOFOLLOW, O_EXCL, renameat).
  options_.segment.dir_fd = dir.fd();
  XDL_RETURN_IF_ERROR(OpenSegment(dir.next_index()));
  next_meta_ = NextMetaDeadline();
  return absl::OkStatus();
}

void IoLoop::Run() {
  io_thread_id_ = CurrentThreadId();
  std::deque<WriterMessage> batch;
  bool closing = false;
  while (!closing) {
    queue_->PopAll(&batch, next_meta_);
    closing = ProcessBatch(&batch);
    batch.clear();
    if (!closing && Clock::now() >= next_meta_) {
      RefreshMeta(/*closed_cleanly=*/false);
      next_meta_ = NextMetaDeadline();
    }
  }
}

IoLoop::Counters IoLoop::counters() const {
  Counters c;
  c.records_written = records_written_.load(std::memory_order_relaxed);
  c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  c.records_dropped = records_dropped_.load(std::memory_order_relaxed);
  c.files_written = files_written_.load(std::memory_order_relaxed);
  c.deferred_failed = deferred_failed_.load(std::memory_order_relaxed);
  return c;
}

absl::Status IoLoop::error() const {
  MutexLock lock(&error_mu_);
  return error_;
}

// Handles the messages in order; returns true after a close message.
bool IoLoop::ProcessBatch(std::deque<WriterMessage>* batch) {
  for (WriterMessage& m : *batch) {
    switch (m.kind) {
      case WriterMessage::Kind::kRecord:
        AddRecord(&m.record);
        if (m.done != nullptr) {
          // A write-through: its pieces point at memory the caller frees once
          // answered, so it is written (or dropped) now, and never touched again.
          WriteGroup();
          m.record.pieces.clear();
          m.done->Notify(error());
        }
        break;
      case WriterMessage::Kind::kFlush:
        WriteGroup();
        RefreshMeta(/*closed_cleanly=*/false);
        m.done->Notify(error());
        break;
      case WriterMessage::Kind::kClose:
        WriteGroup();
        if (failed()) {
          // A write failed (a full disk): the file is not closed cleanly, but its Meta still
          // says what was written and how many records were lost. Best effort: on a full disk
          // the Meta's temp file may not fit either; the first error stays the one reported.
          if (segment_ != nullptr) {
            segment_->SyncAndWriteMeta(/*closed_cleanly=*/false, dropped()).IgnoreError();
          }
        } else {
          RefreshMeta(/*closed_cleanly=*/true);
        }
        segment_.reset();
        m.done->Notify(error());
        return true;
    }
  }
  WriteGroup();
  return false;
}

// Appends a record to the write group, rotating first when the segment says
// it belongs in a new file.
void IoLoop::AddRecord(EncodedRecord* record) {
  const int64_t size = static_cast<int64_t>(record->FrameBytes());
  if (failed()) {
    DropRecord(record);
    return;
  }
  if (!record->deferred.empty()) {
    // Copies in flight: what is grouped so far goes out first, then this
    // thread waits for the fence (the training thread never does).
    WriteGroup();
    if (absl::Status s = ResolveDeferred(record, options_.device_fence_timeout, &abandon_waits_);
        !s.ok()) {
      DropDeferred(record, s);
      return;
    }
  }
  if (segment_->ShouldRollOver(group_bytes_, static_cast<int64_t>(group_.size()), size)) {
    WriteGroup();
    if (!failed()) {
      if (absl::Status s = RotateSegment(); !s.ok()) Fail(std::move(s));
    }
    if (failed()) {
      DropRecord(record);
      return;
    }
  }
  if (before_record_write_) before_record_write_();
  group_.push_back(record);
  group_bytes_ += size;
  if (group_.size() >= kMaxIovecs || group_bytes_ >= kMaxGroupBytes) WriteGroup();
}

void IoLoop::TakeIoSpans(std::vector<HostSpanInfo>* out) {
  MutexLock lock(&io_spans_mu_);
  io_spans_.TakeInto(out);
}

void IoLoop::DropRecord(EncodedRecord* record) {
  CountDropped();
  const int64_t bytes = static_cast<int64_t>(record->FrameBytes());
  pool_->Give(std::move(record->frame));  // Pooled or freed before its bytes leave the bound.
  std::vector<std::string>().swap(record->owned);
  queue_->Release(bytes);
}

void IoLoop::DropDeferred(EncodedRecord* record, const absl::Status& status) {
  if (!absl::IsResourceExhausted(status)) {
    deferred_failed_.fetch_add(1, std::memory_order_relaxed);
    MutexLock lock(&error_mu_);
    last_deferred_error_ = absl::Status(
        status.code(), absl::StrCat("record gstep=", record->gstep, " lstep=", record->lstep,
                                    " not written: its device copies failed: ", status.message()));
  }
  DropRecord(record);
}

absl::Status IoLoop::last_deferred_error() const {
  MutexLock lock(&error_mu_);
  return last_deferred_error_;
}

// Hands the group to the segment and counts what it wrote; frames it could not
// write are dropped. Releases the group's bytes from the queue bound.
void IoLoop::WriteGroup() {
  if (group_.empty()) return;
  const int64_t bytes_before = segment_->bytes();
  const int64_t records_before = segment_->records();
  const int64_t begin_ns = WallClockNs();
  const absl::Status status = segment_->Append(group_);
  const int64_t end_ns = WallClockNs();
  const int64_t written = segment_->records() - records_before;
  {
    HostSpanInfo span{HostSpanKind::kIoWrite, begin_ns, end_ns,       group_.front()->gstep,
                      group_.front()->lstep,  0,        io_thread_id_};
    span.records = static_cast<int64_t>(group_.size());
    MutexLock lock(&io_spans_mu_);
    io_spans_.Add(span);
  }
  bytes_written_.fetch_add(segment_->bytes() - bytes_before, std::memory_order_relaxed);
  records_written_.fetch_add(written, std::memory_order_relaxed);
  records_dropped_.fetch_add(static_cast<int64_t>(group_.size()) - written,
                             std::memory_order_relaxed);
  if (!status.ok()) Fail(status);
  // Recycle (or free) the frames before their bytes leave the bound, so
  // queued records never hold more than max_pending_mb (the batch outlives
  // the group) and pooled ones at most as much again.
  for (EncodedRecord* r : group_) {
    pool_->Give(std::move(r->frame));
    std::vector<std::string>().swap(r->owned);
  }
  queue_->Release(group_bytes_);
  group_.clear();
  group_bytes_ = 0;
}

absl::Status IoLoop::OpenSegment(int64_t index) {
  XDL_ASSIGN_OR_RETURN(segment_, DataFileSegment::Create(&options_.segment, index));
  files_written_.fetch_add(1, std::memory_order_relaxed);
  const absl::Status status = segment_->WriteHeader(dropped());
  bytes_written_.fetch_add(segment_->bytes(), std::memory_order_relaxed);
  return status;
}

// Final Meta of the current file, then the next file.
absl::Status IoLoop::RotateSegment() {
  XDL_RETURN_IF_ERROR(segment_->SyncAndWriteMeta(/*closed_cleanly=*/true, dropped()));
  const int64_t next = segment_->index() + 1;
  segment_.reset();
  return OpenSegment(next);
}

void IoLoop::RefreshMeta(bool closed_cleanly) {
  if (failed()) return;
  if (absl::Status s = segment_->SyncAndWriteMeta(closed_cleanly, dropped()); !s.ok()) {
    Fail(std::move(s));
  }
}

void IoLoop::Fail(absl::Status status) {
  {
    MutexLock lock(&error_mu_);
    if (error_.ok()) error_ = std::move(status);
  }
  failed_.store(true, std::memory_order_release);
  queue_->Abort();
}

IoLoop::Clock::time_point IoLoop::NextMetaDeadline() const {
  return DeadlineAfter<Clock>(Clock::now(), options_.meta_interval_s);
}

}  // namespace internal
}  // namespace xdl_trace
