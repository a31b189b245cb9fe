// Reads trace data files back: mmap'd files, zero-copy record views, directory grouping, Meta
// checks.
#ifndef XDL_TRACE_READER_H_
#define XDL_TRACE_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/dtype.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {

// One column of a record. `data` points into the file's mapping: it stays
// valid as long as the TraceFile that produced it is alive.
struct ColumnView {
  DType dtype = DType::kFloat32;
  Shape shape;             // Empty for a scalar (and for an empty column).
  absl::string_view data;  // Raw C-order little-endian bytes.

  // A column without values: what a trace_once key holds at every step after
  // the first (XDL writes no shape; xdl_trace writes shape [0]).
  bool empty() const {
    return data.empty() && (shape.empty() || (shape.size() == 1 && shape[0] == 0));
  }
  int64_t NumElements() const;
};

// A field of a Record this reader does not interpret (numbers above 4 are
// reserved for device tracing). Both views point into the mapping.
struct RawField {
  uint32_t number = 0;
  uint32_t wire_type = 0;     // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
  absl::string_view payload;  // The value: varint bytes, fixed bytes or the LEN body.
  absl::string_view encoded;  // Tag + value exactly as in the file (re-parseable).
};

struct RecordView {
  int64_t gstep = 0;
  int64_t lstep = 0;
  int64_t timestamp_ms = 0;
  std::vector<ColumnView> columns;  // One per header key, same order.
  std::vector<RawField> extra_fields;
  uint64_t offset = 0;      // Byte offset of the frame's 4-byte length prefix.
  uint64_t frame_size = 0;  // Prefix + body.
};

// The Meta sidecar "<data file>.meta", mirrored without protobuf types.
struct FileMeta {
  int64_t lstep_begin = 0;
  int64_t lstep_end = 0;
  int64_t gstep_begin = 0;
  int64_t gstep_end = 0;
  int64_t timestamp_begin = 0;
  int64_t timestamp_end = 0;
  int32_t rank = 0;
  int64_t file_index = 0;
  int64_t record_count = 0;
  int64_t data_bytes = 0;
  uint32_t crc32c = 0;
  std::string run_id;
  int32_t format_version = 0;
  int64_t dropped_records = 0;
  bool closed_cleanly = false;
};

// Parses a serialized Meta (the whole content of a .meta file).
absl::StatusOr<FileMeta> ParseFileMeta(absl::string_view bytes);
// Reads and parses "<path>"; NotFound when it does not exist.
absl::StatusOr<FileMeta> ReadFileMeta(const std::string& meta_path);

// The outcome of checking a data file against its Meta.
struct VerifyReport {
  bool ok = false;
  bool has_meta = false;
  uint64_t file_bytes = 0;
  uint64_t meta_data_bytes = 0;
  int64_t meta_record_count = 0;
  int64_t records_counted = 0;  // Record frames within meta_data_bytes.
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
  // Moves to the frame starting at `offset` (an offset a RecordView reported).
  void Seek(uint64_t offset);

  const absl::Status& status() const { return status_; }
  bool torn_tail() const { return torn_tail_; }
  uint64_t torn_offset() const { return torn_offset_; }
  uint64_t offset() const { return offset_; }

 private:
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
  // (a missing or unparsable Meta is not an error: see meta_error()).
  static absl::StatusOr<std::shared_ptr<TraceFile>> Open(const std::string& path);

  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& keys() const { return keys_; }
  // The whole mapping (the file's bytes at open time).
  absl::string_view bytes() const { return bytes_; }
  uint64_t size() const { return bytes_.size(); }
  // Offset of the first Record frame (after the Header frame).
  uint64_t first_record_offset() const { return first_record_offset_; }
  // True when the file ends inside its Header frame (no keys are known).
  bool header_torn() const { return header_torn_; }
  const std::optional<FileMeta>& meta() const { return meta_; }
  const absl::Status& meta_error() const { return meta_error_; }

  RecordCursor Records() const { return RecordCursor(shared_from_this()); }

  // Decodes the frame at `offset` into *record. Sets *torn when the file ends
  // inside the frame (not an error); DataLoss naming the file and offset for
  // corruption.
  absl::Status ReadFrame(uint64_t offset, RecordView* record, bool* torn) const;

  // Compares the Meta's data_bytes, record_count and crc32c with the file.
  VerifyReport Verify() const;

 private:
  TraceFile(std::string path, const char* mapping, size_t size);

  std::string path_;
  const char* mapping_;  // nullptr for an empty file.
  absl::string_view bytes_;
  std::vector<std::string> keys_;
  uint64_t first_record_offset_ = 0;
  bool header_torn_ = false;
  std::optional<FileMeta> meta_;
  absl::Status meta_error_;
};

// A data file named "{prefix}.{name}.{rank}.{index}".
struct TraceFileInfo {
  std::string path;
  std::string prefix;
  std::string name;
  int32_t rank = 0;
  int64_t index = 0;
};

// Splits a data file's base name into prefix, name, rank and index; false when
// it does not follow the naming scheme (or is a .meta / temporary file).
bool ParseTraceFileName(absl::string_view base_name, TraceFileInfo* info);

// Lists the data files of `dir` with the given prefix and name (empty name:
// any name), sorted by rank, then index.
absl::StatusOr<std::vector<TraceFileInfo>> ListTraceFiles(const std::string& dir,
                                                          absl::string_view prefix,
                                                          absl::string_view name);

// A trace on disk: one data file, or a directory of ranks and rolled-over files.
class TraceReader {
 public:
  // `path` is a data file or a directory. For a directory, files are grouped
  // by `prefix` ("train"/"test") and `name`; NotFound when none match.
  static absl::StatusOr<TraceReader> Open(const std::string& path,
                                          absl::string_view prefix = "train",
                                          absl::string_view name = "trace");

  // Every file, sorted by rank, then index.
  const std::vector<TraceFileInfo>& files() const { return files_; }
  std::vector<int32_t> ranks() const;
  // The files of one rank in index order.
  std::vector<TraceFileInfo> files_of_rank(int32_t rank) const;

  static absl::StatusOr<std::shared_ptr<TraceFile>> OpenFile(const TraceFileInfo& info) {
    return TraceFile::Open(info.path);
  }

 private:
  std::vector<TraceFileInfo> files_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_H_
