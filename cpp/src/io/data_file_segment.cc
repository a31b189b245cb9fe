// One data file: create with O_EXCL|O_NOFOLLOW, append frames with writev, keep CRC and Meta fields
// current.
#include "io/data_file_segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/status_macros.h"
#include "io/file_set.h"
#include "io/io_error.h"
#include "io/meta_writer.h"
#include "io/run_info.h"

namespace xdl_trace {
namespace internal {

std::string DataFileSegment::HeaderFrame(const std::vector<std::string>& keys,
                                         const std::vector<xdl::proto::ColumnDescriptor>& columns) {
  return HeaderFrame(keys, columns, TraceConfig());
}

std::string DataFileSegment::HeaderFrame(const std::vector<std::string>& keys,
                                         const std::vector<xdl::proto::ColumnDescriptor>& columns,
                                         const TraceConfig& config) {
  xdl::proto::Header header;
  for (const std::string& key : keys) header.add_key(key);
  for (const xdl::proto::ColumnDescriptor& column : columns) *header.add_column() = column;
  if (!config.run.empty()) *header.mutable_run() = RunInfoProto(config);
  std::string frame(4, '\0');
  header.AppendToString(&frame);
  const uint32_t n = static_cast<uint32_t>(frame.size() - 4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return frame;
}

absl::StatusOr<std::unique_ptr<DataFileSegment>> DataFileSegment::Create(
    const SegmentOptions* options, int64_t index) {
  for (int attempt = 0;; ++attempt, ++index) {
    std::string path = DataFilePath(options->output_dir, options->stem, index);
    const AtPath at = At(options->dir_fd, path);
    const int fd = openat(at.dir_fd, at.name,
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      return std::unique_ptr<DataFileSegment>(
          new DataFileSegment(options, fd, std::move(path), index));
    }
    const int error = errno;
    if (error == EEXIST) {
      struct stat st;
      if (fstatat(at.dir_fd, at.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        return MarkIoError(absl::PermissionDeniedError(
            absl::StrCat("xdl_trace: data file '", path,
                         "' is a symbolic link; the writer never writes through one (remove it)")));
      }
      // Another writer took this index since the directory was listed: skip it.
      if (attempt < 1000) continue;
    }
    return IoError(error, absl::StrCat("xdl_trace: create of data file '", path, "' failed"));
  }
}

DataFileSegment::DataFileSegment(const SegmentOptions* options, int fd, std::string path,
                                 int64_t index)
    : options_(options), fd_(fd), path_(std::move(path)), index_(index) {}

DataFileSegment::~DataFileSegment() { close(fd_); }

absl::Status DataFileSegment::WriteHeader(int64_t dropped_records) {
  const std::string& header = options_->header_frame;
  XDL_RETURN_IF_ERROR(WriteFully(fd_, header.data(), header.size(), path_, 0));
  crc_ = crc32c::Value(header.data(), header.size());
  header_crc_ = crc_;
  bytes_ = static_cast<int64_t>(header.size());
  return WriteMeta(/*closed_cleanly=*/false, dropped_records);
}

bool DataFileSegment::ShouldRollOver(int64_t pending_bytes, int64_t pending_records,
                                     int64_t record_bytes) const {
  return bytes_ + pending_bytes + record_bytes > options_->max_file_bytes &&
         records_ + pending_records > 0;
}

namespace {

// crc extended over the first `n` bytes of `r`'s frame in pieces.
uint32_t ExtendOverPrefix(uint32_t crc, const EncodedRecord& r, size_t n) {
  for (const FramePiece& piece : r.pieces) {
    if (n == 0) break;
    const char* base = piece.external != nullptr ? piece.external : r.frame.data() + piece.offset;
    const size_t take = std::min(n, piece.size);
    crc = crc32c::Extend(crc, base, take);
    n -= take;
  }
  return crc;
}

}  // namespace

// Frames from this size on get the file's CRC by Combine (O(log n) table work,
// about as much as extending over a few KB) instead of a second pass.
constexpr size_t kCombineMinBytes = 64 * 1024;

uint32_t SealFrame(EncodedRecord* record) {
  std::string& frame = record->frame;
  const size_t total = record->FrameBytes();
  // The body before the checksum field: every piece, less the length prefix
  // (in the first, owned piece) and the checksum field (in the last, owned one).
  const size_t body = total - kFrameLengthBytes - kRecordCrcBytes;
  uint32_t crc = 0;
  size_t at = 0;  // Frame offset of `piece`.
  const FramePiece whole{nullptr, 0, frame.size()};
  const absl::Span<const FramePiece> pieces =
      record->pieces.empty() ? absl::MakeConstSpan(&whole, 1) : absl::MakeConstSpan(record->pieces);
  for (const FramePiece& piece : pieces) {
    const char* base = piece.external != nullptr ? piece.external : frame.data() + piece.offset;
    const size_t begin = std::max(at, kFrameLengthBytes);
    const size_t end = std::min(at + piece.size, kFrameLengthBytes + body);
    if (begin < end) crc = crc32c::Extend(crc, base + (begin - at), end - begin);
    at += piece.size;
  }
  char* value = frame.data() + frame.size() - 4;
  for (int i = 0; i < 4; ++i) value[i] = static_cast<char>(crc >> (8 * i));
  record->crc_at_write = false;
  const uint32_t prefix = crc32c::Value(frame.data(), kFrameLengthBytes);
  return crc32c::Extend(crc32c::Combine(prefix, crc, body), value - 2, kRecordCrcBytes);
}

absl::Status DataFileSegment::Append(absl::Span<EncodedRecord* const> records) {
  // One iovec per contiguous frame, one per piece of a frame in pieces; each
  // names the record it belongs to.
  iovecs_.clear();
  iovec_record_.clear();
  sealed_.assign(records.size(), 0);
  sealed_crc_.assign(records.size(), 0);
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i]->crc_at_write) {
      sealed_crc_[i] = SealFrame(records[i]);
      // A large frame's file CRC is combined from the seal's (its bytes read
      // once); a small one's is extended as written (cheaper than Combine).
      sealed_[i] = records[i]->FrameBytes() >= kCombineMinBytes ? 1 : 0;
    }
    const EncodedRecord& r = *records[i];
    if (r.pieces.empty()) {
      iovecs_.push_back({const_cast<char*>(r.frame.data()), r.frame.size()});
      iovec_record_.push_back(i);
      continue;
    }
    for (const FramePiece& piece : r.pieces) {
      const char* base = piece.external != nullptr ? piece.external : r.frame.data() + piece.offset;
      iovecs_.push_back({const_cast<char*>(base), piece.size});
      iovec_record_.push_back(i);
    }
  }
  size_t next = 0;              // First iovec not completely written.
  size_t pending_done = 0;      // Bytes written of the record at `next` whose CRC is pending.
  int64_t frames_end = bytes_;  // The end of the last complete frame, and the CRC up to it.
  uint32_t frames_end_crc = crc_;
  while (next < iovecs_.size()) {
    const int count = static_cast<int>(std::min(iovecs_.size() - next, kMaxIovecs));
    const ssize_t w = writev(fd_, iovecs_.data() + next, count);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      const int error = w < 0 ? errno : EIO;
      const int64_t offset = bytes_;
      if (bytes_ > frames_end && ftruncate(fd_, frames_end) == 0) {
        // The cut frame is cut off: the file ends at its last complete frame (no torn tail),
        // and on a full disk the blocks it took are what the final Meta needs.
        bytes_ = frames_end;
        crc_ = frames_end_crc;
      } else if (pending_done > 0) {
        // Keep crc_ the CRC of the first bytes_ bytes, a cut frame included.
        crc_ = ExtendOverPrefix(crc_, *records[iovec_record_[next]], pending_done);
      }
      return IoError(error, absl::StrCat("xdl_trace: write to data file '", path_, "' at offset ",
                                         offset, " failed"));
    }
    size_t left = static_cast<size_t>(w);
    while (left > 0) {
      iovec& v = iovecs_[next];
      const size_t index = iovec_record_[next];
      const EncodedRecord& r = *records[index];
      const size_t take = std::min(left, v.iov_len);
      if (!sealed_[index]) {
        crc_ = crc32c::Extend(crc_, v.iov_base, take);
      } else {
        pending_done += take;
      }
      bytes_ += static_cast<int64_t>(take);
      left -= take;
      if (take < v.iov_len) {
        v.iov_base = static_cast<char*>(v.iov_base) + take;
        v.iov_len -= take;
        continue;
      }
      const bool frame_done =
          next + 1 == iovecs_.size() || iovec_record_[next + 1] != iovec_record_[next];
      ++next;
      if (!frame_done) continue;
      if (sealed_[index]) {
        // Computed by SealFrame, which read these bytes once already.
        crc_ = crc32c::Combine(crc_, sealed_crc_[index], r.FrameBytes());
        pending_done = 0;
      }
      CountRecord(r);
      frames_end = bytes_;
      frames_end_crc = crc_;
    }
  }
  return absl::OkStatus();
}

void DataFileSegment::CountRecord(const EncodedRecord& r) {
  if (records_ == 0) {
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
  ++records_;
}

absl::Status DataFileSegment::SyncAndWriteMeta(bool closed_cleanly, int64_t dropped_records) {
  if (!closed_cleanly && bytes_ == meta_bytes_ && dropped_records == meta_dropped_) {
    return absl::OkStatus();
  }
  if (options_->fsync && fdatasync(fd_) != 0) {
    return IoError(errno, absl::StrCat("xdl_trace: fdatasync of data file '", path_, "' failed"));
  }
  return WriteMeta(closed_cleanly, dropped_records);
}

xdl::proto::Meta DataFileSegment::BuildMeta(bool closed_cleanly, int64_t dropped_records) const {
  xdl::proto::Meta meta;
  meta.set_lstep_begin(lstep_begin_);
  meta.set_lstep_end(lstep_end_);
  meta.set_gstep_begin(gstep_begin_);
  meta.set_gstep_end(gstep_end_);
  meta.set_timestamp_begin(ts_begin_);
  meta.set_timestamp_end(ts_end_);
  meta.set_rank(options_->rank);
  meta.set_file_index(index_);
  meta.set_record_count(records_);
  meta.set_data_bytes(bytes_);
  meta.set_crc32c(crc_);
  meta.set_header_crc32c(header_crc_);
  meta.set_run_id(options_->run_id);
  meta.set_format_version(kFormatVersion);
  meta.set_dropped_records(dropped_records);
  meta.set_closed_cleanly(closed_cleanly);
  if (closed_cleanly) meta.set_end_time_ms(closed_at_ms_ != 0 ? closed_at_ms_ : WallClockMs());
  return meta;
}

absl::Status DataFileSegment::WriteMeta(bool closed_cleanly, int64_t dropped_records) {
  if (closed_cleanly && closed_at_ms_ == 0) closed_at_ms_ = WallClockMs();
  XDL_RETURN_IF_ERROR(ReplaceMeta(path_, BuildMeta(closed_cleanly, dropped_records),
                                  options_->fsync, options_->dir_fd));
  meta_bytes_ = bytes_;
  meta_dropped_ = dropped_records;
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace xdl_trace
