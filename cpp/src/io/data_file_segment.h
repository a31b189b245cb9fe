// One data file of a trace: its fd, running CRC-32C, record counts, step ranges, Meta, rollover.
//
// The sink half of the writer (the IoLoop is the other): it knows files, not
// messages or threads. A segment appends frames it is given, keeps the fields
// its Meta needs as each frame is completely written, and replaces its Meta
// atomically (meta_writer). It does not know how many records the writer
// dropped; callers pass that count in, because Meta reports it per run.
#ifndef XDL_TRACE_IO_DATA_FILE_SEGMENT_H_
#define XDL_TRACE_IO_DATA_FILE_SEGMENT_H_

#include <limits.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "record/encoded_record.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// Frames one writev(2) call carries at most (the kernel's limit, capped).
inline constexpr size_t kMaxIovecs = IOV_MAX < 1024 ? IOV_MAX : 1024;

// What every data file of one writer shares: the few TraceConfig values the
// sink uses (IoLoopOptionsFromConfig, io_loop.h, is the one place they are
// taken from a config), set up before the first segment is created and
// unchanged while any segment exists.
struct SegmentOptions {
  std::string output_dir;  // As configured: files are named "{output_dir}/{stem}.{index}".
  std::string stem;        // "{prefix}.{name}.{rank}" (FileStem).
  int32_t rank = 0;        // Meta.rank.
  std::string run_id;      // Meta.run_id.
  // fdatasync the data before a Meta covers it, fsync the directory after.
  bool fsync = true;
  // Rollover limit: max_file_m_size × 10^6 bytes, saturated (MegabytesToBytes).
  int64_t max_file_bytes = INT64_MAX;
  std::string header_frame;  // The framed Header every file opens with (HeaderFrame()).
  // output_dir, opened once (OutputDir): every file is created and renamed
  // relative to it (see At()) and it is fsynced after a Meta rename. -1: files
  // by path, no directory fsync (tests).
  int dir_fd = -1;
};

// Fills in the Record.crc32c value of a frame the encoder left it to
// (crc_at_write: the last kRecordCrcBytes of `record->frame`), reading every
// piece once; returns the CRC-32C of the whole frame, prefix and checksum
// included. The record's deferred pieces must be resolved.
uint32_t SealFrame(EncodedRecord* record);

// Threading: none. One thread (the IO thread, or a test) calls every method.
class DataFileSegment {
 public:
  // The framed Header {key...}: 4-byte little-endian length, then the message.
  // With `columns` (one per key, or none), the Header also carries the
  // column descriptors (field 2); without, it is XDL's Header exactly.
  static std::string HeaderFrame(const std::vector<std::string>& keys,
                                 const std::vector<xdl::proto::ColumnDescriptor>& columns = {});
  // The same with config.run as Header.run (RunInfo, with config's run_id and
  // rank) unless config.run is empty.
  static std::string HeaderFrame(const std::vector<std::string>& keys,
                                 const std::vector<xdl::proto::ColumnDescriptor>& columns,
                                 const TraceConfig& config);

  // Creates "{output_dir}/{stem}.{index}" with O_EXCL|O_NOFOLLOW, or the next
  // free index when another writer took it since the directory was listed.
  // A symbolic link at the name is an error naming it, never followed or
  // skipped. Writes nothing (see WriteHeader). `options` must outlive the
  // segment. Errors name the file and are marked IoError.
  static absl::StatusOr<std::unique_ptr<DataFileSegment>> Create(const SegmentOptions* options,
                                                                 int64_t index);

  DataFileSegment(const DataFileSegment&) = delete;
  DataFileSegment& operator=(const DataFileSegment&) = delete;
  ~DataFileSegment();  // Closes the fd; writes no Meta.

  // Writes the Header frame, then the file's first Meta (not fsynced first).
  absl::Status WriteHeader(int64_t dropped_records);

  // Whether a record of `record_bytes`, arriving after `pending_records`
  // records of `pending_bytes` that are not appended yet, belongs in a new
  // file: it would pass max_file_bytes (max_file_m_size × 10^6, saturated at
  // INT64_MAX: a huge limit never wraps) and this file (pending
  // included) already holds a record. So a file may end exactly at the limit,
  // and a record larger than the limit sits alone in its own file.
  bool ShouldRollOver(int64_t pending_bytes, int64_t pending_records, int64_t record_bytes) const;

  // Appends the frames of `records` (contiguous or in pieces) in order with as few writev(2) calls
  // as the kernel allows, updating the CRC and bytes() per byte written and records() and the
  // step/timestamp ranges per frame completely written. A frame with crc_at_write is sealed first
  // (SealFrame) and its file CRC combined from the seal's, so its bytes are read once. On error
  // (naming the file and offset) the frames after the last complete one are not written, or only
  // partly.
  absl::Status Append(absl::Span<EncodedRecord* const> records);

  // Replaces the Meta when `closed_cleanly` or when it is stale (bytes or
  // `dropped_records` changed since the last one), after fdatasync of the data
  // when fsync, so a Meta never claims bytes a crash could lose.
  absl::Status SyncAndWriteMeta(bool closed_cleanly, int64_t dropped_records);

  // The Meta that describes the file as written so far. With closed_cleanly,
  // end_time_ms is when the first closing Meta was written (now, if none was).
  xdl::proto::Meta BuildMeta(bool closed_cleanly, int64_t dropped_records) const;

  const std::string& path() const { return path_; }
  int64_t index() const { return index_; }
  int64_t bytes() const { return bytes_; }      // Written, Header included.
  int64_t records() const { return records_; }  // Completely written.
  uint32_t crc32c() const { return crc_; }      // Of the first bytes() bytes.

 private:
  DataFileSegment(const SegmentOptions* options, int fd, std::string path, int64_t index);

  void CountRecord(const EncodedRecord& record);
  absl::Status WriteMeta(bool closed_cleanly, int64_t dropped_records);

  const SegmentOptions* const options_;
  const int fd_;
  const std::string path_;
  const int64_t index_;
  int64_t bytes_ = 0;
  int64_t records_ = 0;
  uint32_t crc_ = 0;
  uint32_t header_crc_ = 0;  // Of the Header frame (Meta.header_crc32c).
  int64_t lstep_begin_ = 0, lstep_end_ = 0, gstep_begin_ = 0, gstep_end_ = 0;
  int64_t ts_begin_ = 0, ts_end_ = 0;
  int64_t meta_bytes_ = -1;    // data_bytes of the last Meta written.
  int64_t meta_dropped_ = -1;  // dropped_records of the last Meta written.
  int64_t closed_at_ms_ = 0;   // Wall clock of the first closing Meta (Meta.end_time_ms).
  // Append's scratch, kept for its capacity: the iovecs and, per iovec, the
  // index of the record it belongs to.
  std::vector<iovec> iovecs_;
  std::vector<size_t> iovec_record_;
  std::vector<uint8_t> sealed_;       // Per record: 1 when Append sealed it (crc_at_write).
  std::vector<uint32_t> sealed_crc_;  // Per record: SealFrame's CRC of the whole frame.
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_DATA_FILE_SEGMENT_H_
