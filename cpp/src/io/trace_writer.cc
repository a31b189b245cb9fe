// The IO thread: drains the queue into data files (writev, rollover) and their Meta.
#include "io/trace_writer.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <deque>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/mutex.h"
#include "io/bounded_queue.h"
#include "io/crc32c.h"
#include "io/file_set.h"
#include "io/frame_pool.h"
#include "io/meta_writer.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

// Largest body the 4-byte length prefix can describe.
constexpr uint64_t kMaxFrameBody = 0xFFFFFFFFull;
// One writev call carries at most this many frames / bytes before the queue
// bytes are released to producers.
constexpr size_t kMaxIovecs = IOV_MAX < 1024 ? IOV_MAX : 1024;
constexpr int64_t kMaxGroupBytes = int64_t{16} << 20;

std::string FrameOf(const google::protobuf::MessageLite& message) {
  std::string frame(4, '\0');
  message.AppendToString(&frame);
  const uint32_t n = static_cast<uint32_t>(frame.size() - 4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return frame;
}

std::string NewRunId() {
  std::random_device rd;
  std::mt19937_64 rng((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  return absl::StrFormat("%016x%016x", rng(), rng());
}

class FileTraceWriter final : public TraceWriter {
 public:
  FileTraceWriter(const TraceConfig& config, std::vector<std::string> keys, WriterTestHooks hooks)
      : config_(config),
        hooks_(std::move(hooks)),
        max_file_bytes_(static_cast<int64_t>(std::llround(config.max_file_m_size * 1e6))),
        queue_(static_cast<int64_t>(std::llround(config.max_pending_mb * 1e6))),
        pool_(kMaxPooledFrames, static_cast<int64_t>(std::llround(config.max_pending_mb * 1e6))) {
    if (config_.run_id.empty()) config_.run_id = NewRunId();
    xdl::proto::Header header;
    for (auto& key : keys) header.add_key(std::move(key));
    header_frame_ = FrameOf(header);
  }

  ~FileTraceWriter() override {
    (void)Close();
    CloseDataFd();
    if (dir_fd_ >= 0) close(dir_fd_);
  }

  // Runs on the caller's thread before the IO thread exists.
  absl::Status Start() {
    if (absl::Status s = MakeDirectories(config_.output_dir); !s.ok()) return s;
    dir_fd_ = open(config_.output_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("xdl_trace: open of directory '", config_.output_dir, "' failed"));
    }
    absl::StatusOr<int64_t> highest = HighestExistingIndex(config_);
    if (!highest.ok()) return highest.status();
    if (absl::Status s = OpenDataFile(*highest + 1); !s.ok()) return s;
    next_meta_ = NextMetaDeadline();
    thread_ = std::thread([this] { RunIoThread(); });
    // Named for top, perf and the overhead benchmark's per-thread CPU figure.
    pthread_setname_np(thread_.native_handle(), kIoThreadName);
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Submit(EncodedRecord record) override {
    if (closed_) return absl::FailedPreconditionError("xdl_trace: Submit after Close");
    const std::string& frame = record.frame;
    if (frame.size() < 4 || frame.size() - 4 > kMaxFrameBody) {
      return absl::InvalidArgumentError(absl::StrCat(
          "xdl_trace: record frame of ", frame.size(),
          " bytes does not fit the 4-byte length prefix (limit 4 GiB - 1 per record)"));
    }
    uint32_t prefix = 0;
    for (int i = 0; i < 4; ++i) prefix |= uint32_t{static_cast<uint8_t>(frame[i])} << (8 * i);
    if (prefix != frame.size() - 4) {
      return absl::InvalidArgumentError(absl::StrCat("xdl_trace: record frame length prefix ",
                                                     prefix, " does not match its body of ",
                                                     frame.size() - 4, " bytes"));
    }
    if (failed_.load(std::memory_order_acquire)) {
      records_dropped_.fetch_add(1, std::memory_order_relaxed);
      return error();
    }
    switch (queue_.Push(WriterMessage::Record(std::move(record)), config_.overflow)) {
      case ByteBoundedQueue::PushResult::kQueued:
        return true;
      case ByteBoundedQueue::PushResult::kDropped:
        records_dropped_.fetch_add(1, std::memory_order_relaxed);
        return false;
      case ByteBoundedQueue::PushResult::kAborted:
        records_dropped_.fetch_add(1, std::memory_order_relaxed);
        return error();
    }
    return false;
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
      close_status_ = error();
    }
    return close_status_;
  }

  std::string TakeBuffer(size_t min_capacity) override { return pool_.Take(min_capacity); }

  TraceStats stats() const override {
    TraceStats s;
    const ByteBoundedQueue::Counters q = queue_.counters();
    s.records_written = records_written_.load(std::memory_order_relaxed);
    s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
    s.records_dropped = records_dropped_.load(std::memory_order_relaxed);
    s.files_written = files_written_.load(std::memory_order_relaxed);
    s.pending_bytes = q.pending_bytes;
    s.queue_high_water_bytes = q.high_water_bytes;
    s.last_error = error();
    return s;
  }

 private:
  // ---- Shared state helpers (any thread) ----

  absl::Status error() const ABSL_LOCKS_EXCLUDED(error_mu_) {
    MutexLock lock(&error_mu_);
    return error_;
  }

  // IO thread: makes `status` the sticky error (first one wins) and stops the
  // queue from blocking producers.
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(error_mu_) {
    {
      MutexLock lock(&error_mu_);
      if (error_.ok()) error_ = std::move(status);
    }
    failed_.store(true, std::memory_order_release);
    queue_.Abort();
  }

  bool failed() const { return failed_.load(std::memory_order_acquire); }

  Clock::time_point NextMetaDeadline() const {
    if (!(config_.meta_interval_s > 0)) return Clock::time_point::max();
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(config_.meta_interval_s));
  }

  // ---- IO thread (and Start(), before the thread exists) ----

  void RunIoThread() {
    std::deque<WriterMessage> batch;
    bool closing = false;
    while (!closing) {
      queue_.PopAll(&batch, next_meta_);
      closing = ProcessBatch(&batch);
      batch.clear();
      if (!closing && Clock::now() >= next_meta_) {
        if (!failed()) {
          if (absl::Status s = SyncAndWriteMeta(/*closed_cleanly=*/false); !s.ok()) Fail(s);
        }
        next_meta_ = NextMetaDeadline();
      }
    }
  }

  // Handles the messages in order; returns true after a close message.
  bool ProcessBatch(std::deque<WriterMessage>* batch) {
    for (WriterMessage& m : *batch) {
      switch (m.kind) {
        case WriterMessage::Kind::kRecord:
          AddRecord(&m.record);
          break;
        case WriterMessage::Kind::kFlush:
          WriteGroup();
          if (!failed()) {
            if (absl::Status s = SyncAndWriteMeta(/*closed_cleanly=*/false); !s.ok()) Fail(s);
          }
          m.done->Notify(error());
          break;
        case WriterMessage::Kind::kClose:
          WriteGroup();
          if (!failed()) {
            if (absl::Status s = FinishDataFile(); !s.ok()) Fail(s);
          }
          CloseDataFd();
          m.done->Notify(error());
          return true;
      }
    }
    WriteGroup();
    return false;
  }

  // Appends a record to the current write group, rotating first when it would
  // pass the size limit of a file that already holds a record.
  void AddRecord(EncodedRecord* record) {
    const int64_t size = static_cast<int64_t>(record->frame.size());
    if (failed()) {
      DropRecord(record);
      return;
    }
    if (file_bytes_ + group_bytes_ + size > max_file_bytes_ &&
        file_records_ + static_cast<int64_t>(group_.size()) > 0) {
      WriteGroup();
      if (!failed()) {
        if (absl::Status s = RotateDataFile(); !s.ok()) Fail(s);
      }
      if (failed()) {
        DropRecord(record);
        return;
      }
    }
    if (hooks_.before_record_write) hooks_.before_record_write();
    group_.push_back(record);
    group_bytes_ += size;
    if (group_.size() >= kMaxIovecs || group_bytes_ >= kMaxGroupBytes) WriteGroup();
  }

  void DropRecord(EncodedRecord* record) {
    records_dropped_.fetch_add(1, std::memory_order_relaxed);
    const int64_t bytes = static_cast<int64_t>(record->frame.size());
    pool_.Give(std::move(record->frame));  // Pooled or freed before its bytes leave the bound.
    queue_.Release(bytes);
  }

  // Writes the group with as few writev calls as the kernel allows, keeping
  // the running crc, Meta fields and stats per completed frame; releases the
  // group's bytes from the queue bound. On error, unwritten records are dropped.
  void WriteGroup() {
    if (group_.empty()) return;
    iovecs_.clear();
    for (EncodedRecord* r : group_) {
      iovecs_.push_back({const_cast<char*>(r->frame.data()), r->frame.size()});
    }
    size_t next = 0;  // First iovec not completely written.
    while (next < iovecs_.size()) {
      iovec* iov = iovecs_.data() + next;
      const int count = static_cast<int>(iovecs_.size() - next);
      const ssize_t w = writev(fd_, iov, count);
      if (w <= 0) {
        if (w < 0 && errno == EINTR) continue;
        const int err = w < 0 ? errno : EIO;
        Fail(absl::ErrnoToStatus(err, absl::StrCat("xdl_trace: write to data file '", data_path_,
                                                   "' at offset ", file_bytes_, " failed")));
        break;
      }
      size_t left = static_cast<size_t>(w);
      while (left > 0) {
        iovec& v = iovecs_[next];
        const size_t take = std::min(left, v.iov_len);
        crc_ = crc32c::Extend(crc_, v.iov_base, take);
        file_bytes_ += static_cast<int64_t>(take);
        bytes_written_.fetch_add(static_cast<int64_t>(take), std::memory_order_relaxed);
        left -= take;
        if (take == v.iov_len) {
          CompleteRecord(*group_[next]);
          ++next;
        } else {
          v.iov_base = static_cast<char*>(v.iov_base) + take;
          v.iov_len -= take;
        }
      }
    }
    for (size_t i = next; i < group_.size(); ++i) {
      records_dropped_.fetch_add(1, std::memory_order_relaxed);
    }
    // Recycle (or free) the frames before their bytes leave the bound, so
    // queued records never hold more than max_pending_mb (the batch outlives
    // the group) and pooled ones at most as much again.
    for (EncodedRecord* r : group_) pool_.Give(std::move(r->frame));
    queue_.Release(group_bytes_);
    group_.clear();
    group_bytes_ = 0;
  }

  void CompleteRecord(const EncodedRecord& r) {
    if (file_records_ == 0) {
      lstep_begin_ = lstep_end_ = r.lstep;
      gstep_begin_ = gstep_end_ = r.gstep;
      ts_begin_ = ts_end_ = r.timestamp_ms;
    } else {
      lstep_begin_ = std::min(lstep_begin_, r.lstep);
      lstep_end_ = std::max(lstep_end_, r.lstep);
      gstep_begin_ = std::min(gstep_begin_, r.gstep);
      gstep_end_ = std::max(gstep_end_, r.gstep);
      ts_begin_ = std::min(ts_begin_, r.timestamp_ms);
      ts_end_ = std::max(ts_end_, r.timestamp_ms);
    }
    ++file_records_;
    records_written_.fetch_add(1, std::memory_order_relaxed);
  }

  // Opens "{stem}.{index}" (or the next free index) with O_EXCL, writes the
  // Header frame and the file's first Meta.
  absl::Status OpenDataFile(int64_t index) {
    for (int attempt = 0;; ++attempt, ++index) {
      data_path_ = DataFilePath(config_, index);
      fd_ = open(data_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
      if (fd_ >= 0) break;
      // Another writer took this index since the directory was listed: skip it.
      if (errno == EEXIST && attempt < 1000) continue;
      return absl::ErrnoToStatus(
          errno, absl::StrCat("xdl_trace: create of data file '", data_path_, "' failed"));
    }
    file_index_ = index;
    file_bytes_ = 0;
    file_records_ = 0;
    crc_ = 0;
    lstep_begin_ = lstep_end_ = gstep_begin_ = gstep_end_ = ts_begin_ = ts_end_ = 0;
    files_written_.fetch_add(1, std::memory_order_relaxed);
    if (absl::Status s = WriteFully(fd_, header_frame_.data(), header_frame_.size(), data_path_, 0);
        !s.ok()) {
      return s;
    }
    crc_ = crc32c::Value(header_frame_.data(), header_frame_.size());
    file_bytes_ = static_cast<int64_t>(header_frame_.size());
    bytes_written_.fetch_add(file_bytes_, std::memory_order_relaxed);
    return WriteMeta(/*closed_cleanly=*/false);
  }

  // fsync (when configured) so the Meta never claims bytes a crash could lose.
  absl::Status SyncData() {
    if (config_.fsync && fdatasync(fd_) != 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("xdl_trace: fdatasync of data file '", data_path_, "' failed"));
    }
    return absl::OkStatus();
  }

  absl::Status SyncAndWriteMeta(bool closed_cleanly) {
    if (!closed_cleanly && !MetaIsStale()) return absl::OkStatus();
    if (absl::Status s = SyncData(); !s.ok()) return s;
    return WriteMeta(closed_cleanly);
  }

  // Final Meta (closed_cleanly) of the current file; the fd stays open.
  absl::Status FinishDataFile() { return SyncAndWriteMeta(/*closed_cleanly=*/true); }

  absl::Status RotateDataFile() {
    if (absl::Status s = FinishDataFile(); !s.ok()) return s;
    CloseDataFd();
    return OpenDataFile(file_index_ + 1);
  }

  void CloseDataFd() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  bool MetaIsStale() const {
    return file_bytes_ != meta_data_bytes_ ||
           records_dropped_.load(std::memory_order_relaxed) != meta_dropped_;
  }

  absl::Status WriteMeta(bool closed_cleanly) {
    xdl::proto::Meta meta;
    meta.set_lstep_begin(lstep_begin_);
    meta.set_lstep_end(lstep_end_);
    meta.set_gstep_begin(gstep_begin_);
    meta.set_gstep_end(gstep_end_);
    meta.set_timestamp_begin(ts_begin_);
    meta.set_timestamp_end(ts_end_);
    meta.set_rank(config_.rank);
    meta.set_file_index(file_index_);
    meta.set_record_count(file_records_);
    meta.set_data_bytes(file_bytes_);
    meta.set_crc32c(crc_);
    meta.set_run_id(config_.run_id);
    meta.set_format_version(kFormatVersion);
    const int64_t dropped = records_dropped_.load(std::memory_order_relaxed);
    meta.set_dropped_records(dropped);
    meta.set_closed_cleanly(closed_cleanly);
    if (absl::Status s = ReplaceMeta(data_path_, meta, config_.fsync, dir_fd_); !s.ok()) return s;
    meta_data_bytes_ = file_bytes_;
    meta_dropped_ = dropped;
    return absl::OkStatus();
  }

  // ---- Immutable after construction ----
  TraceConfig config_;
  const WriterTestHooks hooks_;
  const int64_t max_file_bytes_;
  std::string header_frame_;
  int dir_fd_ = -1;  // Set in Start(), closed by the destructor.

  // ---- Shared between threads ----
  ByteBoundedQueue queue_;  // Internally synchronized.
  FramePool pool_;          // Internally synchronized: IO thread gives, training thread takes.
  std::atomic<int64_t> records_written_{0};
  std::atomic<int64_t> bytes_written_{0};
  std::atomic<int64_t> records_dropped_{0};
  std::atomic<int64_t> files_written_{0};
  std::atomic<bool> failed_{false};  // Fast path copy of !error_.ok().
  mutable Mutex error_mu_;
  absl::Status error_ ABSL_GUARDED_BY(error_mu_);

  // ---- Caller (training) thread only ----
  std::thread thread_;
  bool closed_ = false;
  absl::Status close_status_;

  // ---- IO thread only (set up by Start() before the thread starts) ----
  int fd_ = -1;
  std::string data_path_;
  int64_t file_index_ = 0;
  int64_t file_bytes_ = 0;    // Bytes written to the current file, Header included.
  int64_t file_records_ = 0;  // Records completely written to the current file.
  uint32_t crc_ = 0;          // CRC-32C of the file's first file_bytes_ bytes.
  int64_t lstep_begin_ = 0, lstep_end_ = 0, gstep_begin_ = 0, gstep_end_ = 0;
  int64_t ts_begin_ = 0, ts_end_ = 0;
  int64_t meta_data_bytes_ = -1;  // data_bytes of the last Meta written.
  int64_t meta_dropped_ = -1;     // dropped_records of the last Meta written.
  Clock::time_point next_meta_;
  std::vector<EncodedRecord*> group_;  // Records to write next (owned by the batch).
  int64_t group_bytes_ = 0;
  std::vector<iovec> iovecs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const TraceConfig& config,
                                                               std::vector<std::string> keys,
                                                               WriterTestHooks hooks) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  auto writer = std::make_unique<FileTraceWriter>(config, std::move(keys), std::move(hooks));
  if (absl::Status s = writer->Start(); !s.ok()) return s;
  return std::unique_ptr<TraceWriter>(std::move(writer));
}

}  // namespace internal
}  // namespace xdl_trace
