// One data file, memory-mapped: its records one by one, and its check against its Meta.
#ifndef XDL_TRACE_READER_TRACE_FILE_H_
#define XDL_TRACE_READER_TRACE_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"

namespace xdl_trace {

// The outcome of checking a data file against its Meta.
struct VerifyReport {
  bool ok = false;  // No problem found (also true for an unverifiable file).
  // Nothing to check the frames against, though nothing is wrong with them: a
  // Meta written by XDL (no checksum), or no Meta and no record (a crash
  // between the Header and the first Meta: no data lost). `note` says which.
  bool unverifiable = false;
  std::string note;
  bool has_meta = false;
  uint64_t file_bytes = 0;
  uint64_t meta_data_bytes = 0;
  int64_t meta_record_count = 0;
  int64_t records_counted = 0;  // Record frames within meta_data_bytes.
  int64_t records_read = 0;     // Complete record frames in the whole file.
  uint32_t crc_expected = 0;
  uint32_t crc_actual = 0;
  uint64_t unverified_tail_bytes = 0;  // Bytes after meta_data_bytes (written after the last Meta).
  bool torn_tail = false;              // The file ends in a partial frame.
  std::vector<std::string> problems;   // Each names the file (and offset when known).
};

class TraceFile;

// Iterates the records of one file. Next() returns false at the end: check
// status() for corruption and torn_tail() for a partial final frame.
// Not thread-safe; keeps its TraceFile alive.
class RecordCursor {
 public:
  explicit RecordCursor(std::shared_ptr<const TraceFile> file);

  // Fills *record (reusing its vectors) and returns true, or returns false.
  bool Next(RecordView* record);
  // Moves past the next frame by its length prefix alone (no decode), as Next
  // would (the same torn-tail and corruption rules for the prefix), setting
  // *frame_size; false at the end, as Next.
  bool Skip(uint64_t* frame_size);
  // Moves to the frame starting at `offset` (an offset a RecordView reported).
  void Seek(uint64_t offset);

  const absl::Status& status() const { return status_; }
  bool torn_tail() const { return torn_tail_; }
  uint64_t torn_offset() const { return torn_offset_; }
  uint64_t offset() const { return offset_; }

 private:
  // Next (record set) or Skip (frame_size set).
  bool Step(RecordView* record, uint64_t* frame_size);

  std::shared_ptr<const TraceFile> file_;
  uint64_t offset_;
  bool done_ = false;
  bool torn_tail_ = false;
  uint64_t torn_offset_ = 0;
  absl::Status status_;
};

// One data file, memory-mapped read-only. Thread-compatible: const methods may
// be called from several threads at once.
class TraceFile : public std::enable_shared_from_this<TraceFile> {
 public:
  // Maps `path`, parses the Header frame and reads "<path>.meta" when present
  // (a missing, unparsable or inconsistent Meta is not an error: see
  // meta_error(); the file is then read as without one). A Header frame cut
  // short inside the bytes a Meta of ours covers is DataLoss (a frame the
  // Meta vouches for is damaged), unless the file ends in zeros (a power loss).
  static absl::StatusOr<std::shared_ptr<TraceFile>> Open(const std::string& path,
                                                         const FileOptions& options = {});

  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& keys() const { return keys_; }
  // The Header index of `key` (its first, should a Header repeat one), or
  // nullopt; O(log keys), so finding every key of a wide file stays
  // O(keys log keys) (issue 24 #2: 100,000 keys).
  std::optional<size_t> KeyIndex(absl::string_view key) const;
  // One per key when the Header carries column descriptors; empty when it
  // does not (XDL's files, files written before them, a bare TraceWriter).
  const std::vector<ColumnInfo>& columns() const { return columns_; }
  // The whole mapping (the file's bytes at open time).
  absl::string_view bytes() const { return bytes_; }
  uint64_t size() const { return bytes_.size(); }
  // Offset of the first Record frame (after the Header frame).
  uint64_t first_record_offset() const { return first_record_offset_; }
  // True when the file ends inside its Header frame (no keys are known).
  bool header_torn() const { return header_torn_; }
  const std::optional<FileMeta>& meta() const { return meta_; }
  const absl::Status& meta_error() const { return meta_error_; }
  // FailedPrecondition naming the version when the Meta's format_version is
  // one this reader does not know: reading the file is refused (docs/format.md).
  const absl::Status& version_error() const { return version_error_; }

  RecordCursor Records() const { return RecordCursor(shared_from_this()); }

  // Decodes the frame at `offset` into *record. Sets *torn when the file ends
  // inside the frame (not an error); DataLoss naming the file and offset for
  // corruption, a record checksum that does not match included (unless
  // FileOptions::check_record_crc is off).
  absl::Status ReadFrame(uint64_t offset, RecordView* record, bool* torn) const;
  // The size (prefix included) of the frame at `offset` by its length prefix
  // alone, with ReadFrame's rules for the prefix.
  absl::Status FrameSize(uint64_t offset, uint64_t* frame_size, bool* torn) const;

  // Compares the Meta's data_bytes, record_count, crc32c and step and time
  // ranges with the file (docs/format.md, "Verifying a file").
  VerifyReport Verify() const;

  // Counts the complete record frames by their length prefixes, without
  // decoding or checksumming them (what a stale Meta cannot say): the torn-tail
  // rules of ReadFrame apply to each prefix. Stops at a frame that is corrupt
  // by its prefix alone (`corruption` names it); a body that does not decode
  // is not noticed (Verify decodes).
  struct FrameCount {
    int64_t records = 0;
    bool torn_tail = false;
    std::string corruption;  // Empty when the walk reached the end or a torn tail.
  };
  FrameCount CountFrames() const;

  // Where the run of zero bytes that ends the file begins (size() when the
  // last byte is not zero).
  uint64_t zero_tail_from() const { return zero_from_; }
  // The torn tail that starts at `offset` (a frame the file ends inside).
  TornTail TornTailAt(uint64_t offset, int32_t rank) const;
  // DataLoss naming the file when it shrank while mapped: an access past its
  // new end read zeros instead of raising SIGBUS (reader/mapping_guard.h).
  // Every frame read and every cursor's last step check it.
  absl::Status CheckNotCut() const;

 private:
  TraceFile(std::string path, const char* mapping, size_t size, const FileOptions& options);
  // The body length of the frame at `offset` by its prefix alone, or *torn
  // (ReadFrame's torn-tail rules); corruption is DataLoss naming the offset.
  absl::Status FrameLength(uint64_t offset, uint64_t* length, bool* torn) const;
  // ReadFrame, checking the record's checksum or not (Verify always does).
  absl::Status DecodeFrame(uint64_t offset, RecordView* record, bool* torn, bool check_crc) const;
  // At open, under our Meta: the Header frame against Meta.header_crc32c, and
  // a Header frame the Meta covers that does not fit the file; DataLoss
  // naming the file and offset 0 (`zero_from`: where the zero tail begins).
  absl::Status CheckHeader(uint64_t zero_from) const;

  std::string path_;
  const FileOptions options_;
  const char* mapping_;  // nullptr for an empty file.
  absl::string_view bytes_;
  const int guard_slot_;  // MappingGuard's slot for mapping_, -1 when unguarded.
  std::vector<std::string> keys_;
  std::vector<uint32_t> key_order_;  // Indices into keys_ sorted by key, then index.
  std::vector<ColumnInfo> columns_;  // Empty, or one per key.
  uint64_t first_record_offset_ = 0;
  bool header_torn_ = false;
  std::optional<FileMeta> meta_;
  absl::Status meta_error_;
  absl::Status version_error_;  // A Meta format_version this reader does not know.
  uint64_t zero_from_ = 0;      // See zero_tail_from().
  bool lost_block_ = false;     // The zero tail spans a 512-byte boundary.
};

// Where a read starts in `file` for `steps`: its first record, past the part
// its Meta proves is outside the range, or nullopt when the Meta proves the
// whole file is. A Meta written by XDL (format_version 0) describes a closed
// file with no record count or byte count, so it can only skip whole files.
std::optional<uint64_t> ReadStartOffset(const TraceFile& file, const StepSelection& steps);

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_TRACE_FILE_H_
