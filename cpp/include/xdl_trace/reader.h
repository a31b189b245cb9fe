// Reads traces back: mmap'd files, zero-copy record views, a cursor merging ranks by gstep,
// stacking, Meta checks.
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
  // The wire value as written. A value newer than this reader (not
  // IsValidDType) is kept as is: docs/format.md makes such a column opaque
  // bytes, so `data` is any length and `shape` only what the writer said.
  DType dtype = DType::kFloat32;
  Shape shape;             // Empty for a scalar (and for an empty column).
  absl::string_view data;  // Raw C-order little-endian bytes.

  // A column without values: what a trace_once key holds at every step after
  // the first (XDL writes no shape; xdl_trace writes shape [0]).
  bool empty() const {
    return data.empty() && (shape.empty() || (shape.size() == 1 && shape[0] == 0));
  }
  // False for a dtype newer than this reader (read it as raw bytes).
  bool known_dtype() const { return IsValidDType(static_cast<int32_t>(dtype)); }
  // The product of the dimensions (0 for an empty column); -1 when it does not
  // fit an int64 or a dimension is negative (the reader never hands out such a
  // column: it is corruption).
  int64_t NumElements() const;
};

// What a column holds: one of the Header's column descriptors (field 2,
// docs/format.md "Column descriptors"). The enums carry the wire values of
// xdl.proto.ColumnDescriptor (checked against the generated code); a value
// newer than this reader is kept as is.
struct ColumnInfo {
  enum class Content : int32_t {
    kUnknown = 0,      // Unspecified, or newer than this reader: read the column as a value.
    kValue = 1,        // The tensor itself.
    kStats = 2,        // Built-in stats summary, float64[8].
    kHistogram = 3,    // Built-in histogram summary, float64[2 + 2 * histogram_bins].
    kUserSummary = 4,  // A user summary function's output (summary_name).
    kDigest = 5,       // Built-in tensor digest, float64[2] (high, low 32 bits).
  };
  enum class Source : int32_t {
    kUnknown = 0,
    kTensor = 1,
    kVariable = 2,
    kGradient = 3,
    kCallback = 4,
    kOnce = 5,
  };
  Content content = Content::kUnknown;
  Source source = Source::kUnknown;
  int32_t layout_version = 0;  // Of a stats or histogram layout; 0 otherwise.
  int32_t histogram_bins = 0;
  std::string summary_name;
  // The tensor the column is computed from, when the writer knew it at Start
  // (an entry reading registered memory in place).
  bool has_input = false;
  DType input_dtype = DType::kFloat32;  // The wire value (may be newer than this reader).
  Shape input_shape;
};

// The newest summary layout this reader can name the fields of.
inline constexpr int32_t kSummaryLayoutVersion = 1;

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

// A device-only record (docs/format.md, "Device events"): no column while the
// header has keys, and fields above 4 (what device tracing collected after
// the last step, written at close). Readers hand it out only to a read that
// selects no key (the timeline's); records() of any key and stack skip it.
inline bool IsDeviceOnlyRecord(const RecordView& record, size_t header_keys) {
  return record.columns.empty() && header_keys > 0 && !record.extra_fields.empty();
}

// The Meta sidecar "<data file>.meta": the fields the reader's own logic
// reads (file skipping, torn-tail vouching, Verify), plus the serialized
// message for everything else. The .proto is the one list of Meta fields:
// the Python binding turns `serialized` into a dict by protobuf reflection, so
// a new Meta field reaches Python with no edit here.
struct FileMeta {
  int64_t lstep_begin = 0;
  int64_t lstep_end = 0;
  int64_t gstep_begin = 0;
  int64_t gstep_end = 0;
  int64_t timestamp_begin = 0;
  int64_t timestamp_end = 0;
  int64_t record_count = 0;
  int64_t data_bytes = 0;
  uint32_t crc32c = 0;
  int32_t rank = 0;        // Meta.rank: the writer's rank, as in the file name.
  int64_t file_index = 0;  // Meta.file_index: the file's index, as in its name.
  // 0: a Meta written by XDL (fields 1-6 only: the first and last record's
  // steps and times, -1 where XDL never learnt one; no record count, no
  // checksum). kFormatVersion: ours. Anything else is refused.
  int32_t format_version = 0;
  bool closed_cleanly = false;
  // Meta.header_crc32c: the CRC-32C of the Header frame, checked at open.
  std::optional<uint32_t> header_crc32c;
  // The Meta ended with its own checksum (Meta.meta_crc32c), which held.
  bool has_meta_crc32c = false;
  std::string serialized;  // The whole xdl.proto.Meta as read.
};

// The newest Meta.format_version this reader knows.
inline constexpr int32_t kFormatVersion = 1;
// A Meta is about 100 bytes; a .meta larger than this is refused unread.
inline constexpr uint64_t kMaxMetaBytes = 64 * 1024;

// Parses a serialized Meta (the whole content of a .meta file).
absl::StatusOr<FileMeta> ParseFileMeta(absl::string_view bytes);
// Reads and parses "<path>"; NotFound when it does not exist. Only a regular
// file of at most kMaxMetaBytes is read (a FIFO or a link to /dev/zero is
// InvalidArgument naming it, and is never waited on or read to its end).
absl::StatusOr<FileMeta> ReadFileMeta(const std::string& meta_path);

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

// How a TraceFile reads its records.
struct FileOptions {
  // Check each record's Record.crc32c (docs/format.md, "Record checksums")
  // before decoding it: a mismatch is DataLoss naming the file and offset. A
  // record without one (XDL's files, older writers) is read unchecked. Off:
  // a hot path that trusts its disk skips one pass over the record's bytes
  // (the cost is in docs/benchmarks.md); Verify checks them either way.
  bool check_record_crc = true;
};

class TraceFile;
struct TornTail;

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
// any name), sorted by rank, then index. An entry named like a data file that
// is not a regular file (a planted FIFO or link to a device) is listed, so
// that reading it fails naming it; listing never opens an entry.
absl::StatusOr<std::vector<TraceFileInfo>> ListTraceFiles(const std::string& dir,
                                                          absl::string_view prefix,
                                                          absl::string_view name);

// Which gsteps a read selects: an inclusive range (either end open) and,
// optionally, an exact set of steps inside it.
struct StepSelection {
  std::optional<int64_t> begin;
  std::optional<int64_t> end;
  std::optional<std::vector<int64_t>> steps;  // Any order; duplicates are fine.
};

// Where a file ends inside a frame: the writer stopped mid-record (a crash),
// or the file ends in zeros a power loss left (docs/format.md, "Torn tails").
// The records before it are complete.
struct TornTail {
  std::string path;
  int32_t rank = 0;
  uint64_t offset = 0;       // The partial frame's first byte (0: the Header is cut short).
  bool zero_filled = false;  // The tail is zeros from `zero_from` to the end.
  uint64_t zero_from = 0;
  uint64_t file_bytes = 0;
  uint64_t meta_data_bytes = 0;  // What the file's Meta covers (0: no Meta).
  // The writer had not closed the file (no Meta, or closed_cleanly false): it
  // may still be writing it, or it stopped (a crash).
  bool writer_open = false;
  int64_t complete_records = 0;  // Record frames before `offset`.
};

// One line naming the file and offset: the warning every reader prints.
std::string DescribeTornTail(const TornTail& torn);

// Where a read starts in `file` for `steps`: its first record, past the part
// its Meta proves is outside the range, or nullopt when the Meta proves the
// whole file is. A Meta written by XDL (format_version 0) describes a closed
// file with no record count or byte count, so it can only skip whole files.
std::optional<uint64_t> ReadStartOffset(const TraceFile& file, const StepSelection& steps);

// What TraceReader::Read yields.
struct ReadOptions {
  std::optional<std::vector<std::string>> keys;  // nullopt: every key of each file, in order.
  StepSelection steps;
  std::optional<std::vector<int32_t>> ranks;  // nullopt: every rank; unknown ranks are ignored.
  // Also yield the device-only records (docs/format.md "Device events") of a
  // read that selects keys, with no column and TraceRecord::device_only set;
  // a read of no key yields them anyway.
  bool device_only_records = false;

  // One lane of a one-rank read split into `lanes` reads that decode in
  // parallel: the rank's frames (from where the read starts, selected or not)
  // are numbered in blocks that end after `block_frames` frames or
  // `block_bytes` bytes, whichever comes first; this read decodes the blocks
  // whose number % lanes == lane and hops over the others by their length
  // prefixes (no decode). After each of its blocks it returns kBlockEnd. So
  // the lanes' blocks, taken in turn, are the plain read's records in order;
  // a torn tail belongs to the block it is met in (TraceCursor::block()), and
  // so does the end. A read of several ranks is refused (InvalidArgument).
  struct Interleave {
    int lanes = 1;
    int lane = 0;
    uint64_t block_frames = 1024;
    uint64_t block_bytes = uint64_t{64} << 20;
  };
  std::optional<Interleave> interleave;
};

// One record from a TraceCursor. `view` holds the selected columns (named by
// `keys`, in selection order); its data points into the file's mapping.
struct TraceRecord {
  RecordView view;
  const std::vector<std::string>* keys = nullptr;
  size_t file = 0;  // Index into TraceReader::files().
  int32_t rank = 0;
  bool device_only = false;  // A device-only record (IsDeviceOnlyRecord): `view` has no column.
};

// True for the NotFound a read returns when a file lacks a selected key (the
// message names the file, the key and the file's keys).
bool IsMissingKeyError(const absl::Status& status);

class TraceReader;

// Yields the selected records of a TraceReader, merged across ranks by
// (gstep, rank) as they are read: each rank is its files in index order, and
// the next record is the smallest head among the ranks (heapq.merge's rule).
// Files are opened and their keys checked as the read reaches them; a file
// whose Meta proves it holds none of the steps is not read. Not thread-safe;
// keeps its reader's files alive.
class TraceCursor {
 public:
  enum class Event {
    kRecord,    // record() holds the next record.
    kTornTail,  // torn_tail() names a file that ends inside a frame (once per file).
    kEnd,       // Nothing more.
    kBlockEnd,  // ReadOptions::interleave only: one of this lane's blocks ended.
  };

  TraceCursor(TraceCursor&&) noexcept;
  TraceCursor& operator=(TraceCursor&&) noexcept;
  ~TraceCursor();

  // Moves on. Corruption (DataLoss naming the file and offset) and a missing
  // key (IsMissingKeyError) are errors, returned again by every later call.
  absl::StatusOr<Event> Next();

  // The record of the last kRecord; valid until the next call to Next().
  const TraceRecord& record() const;
  // DataLoss naming the file of the last record returned if it shrank since it
  // was opened (TraceFile::CheckNotCut): records handed out as views of its
  // mapping read zeros past its new end. Returned again by every later Next().
  // For a caller that hands records on in batches, at each batch's start.
  absl::Status CheckNotCut();
  // The torn tail of the last kTornTail.
  const TornTail& torn_tail() const;
  // Frame bytes walked so far (including frames outside the step selection).
  uint64_t bytes_read() const;
  // ReadOptions::interleave: the number of the block the next frame is in
  // (at kTornTail and kEnd, the block they are met in).
  uint64_t block() const;

 private:
  friend class TraceReader;
  struct Impl;
  explicit TraceCursor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One key stacked over steps: the non-empty columns in the selection, as
// views into the mappings (kept alive by StackResult::files).
struct StackedKey {
  std::string key;
  DType dtype = DType::kFloat32;  // Of every row (when there are rows).
  Shape shape;  // Of one row; [row bytes] for a dtype newer than this reader (raw bytes).
  std::vector<int64_t> gsteps;
  std::vector<absl::string_view> rows;

  size_t row_bytes() const { return rows.empty() ? 0 : rows[0].size(); }
  // Copies the rows back to back into `out` (rows.size() * row_bytes() bytes).
  void CopyRowsTo(char* out) const;
};

struct StackResult {
  std::vector<StackedKey> keys;  // In the order asked for.
  std::vector<TornTail> torn_tails;
  std::vector<std::shared_ptr<const TraceFile>> files;  // Owners of the row views.
};

// The dtype and shape of a key in a trace's first record, and what the
// column holds when that record's file has column descriptors.
struct KeySchema {
  std::string key;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::optional<ColumnInfo> column;
};

// One run in a trace: the files one tracer wrote, which share a Meta.run_id
// (docs/format.md "Runs"). Files without a run id (XDL's) are one run with id "".
struct RunSummary {
  std::string run_id;
  std::vector<size_t> files;   // Into TraceReader::files(), in its order.
  std::vector<int32_t> ranks;  // Sorted.
  int64_t records = 0;         // Meta record counts; -1 when a file's is unknown (XDL Meta).
  bool has_steps = false;      // gstep_begin/end hold the range of the run's records.
  int64_t gstep_begin = 0;
  int64_t gstep_end = 0;
  int64_t start_time_ms = 0;    // Earliest RunInfo start, else earliest record; 0: unknown.
  int64_t end_time_ms = 0;      // Latest Meta end_time_ms, else latest record; 0: unknown.
  bool closed_cleanly = false;  // Every file's Meta says its writer closed it.
  // The serialized xdl.proto.RunInfo of each rank (Header field 3 of the
  // rank's first file), in `ranks` order; "" for a rank whose Header has none.
  std::vector<std::string> run_infos;
  // Writers of one rank under this run id, told apart by their Header's
  // RunInfo (pid, start time): more than 1 when a job restarted with the same
  // run id (TORCHELASTIC_RUN_ID, XDL_TRACE_RUN_ID). Their records are merged,
  // so resumed gsteps appear more than once (docs/format.md "Runs").
  int32_t attempts = 1;
};

// A trace on disk: one data file, or a directory of ranks and rolled-over
// files. Copies share the files, which are mapped at first use; thread-safe.
class TraceReader {
 public:
  // `path` is a data file or a directory. For a directory, files are grouped
  // by `prefix` ("train"/"test") and `name`; NotFound when none match.
  // `options` applies to every file it opens.
  static absl::StatusOr<TraceReader> Open(const std::string& path,
                                          absl::string_view prefix = "train",
                                          absl::string_view name = "trace",
                                          const FileOptions& options = {});

  // Every file, sorted by rank, then index.
  const std::vector<TraceFileInfo>& files() const;
  std::vector<int32_t> ranks() const;
  // The files of one rank in index order.
  std::vector<TraceFileInfo> files_of_rank(int32_t rank) const;

  // files()[index], mapped at the first call; later calls and cursors share it.
  absl::StatusOr<std::shared_ptr<TraceFile>> File(size_t index) const;
  // Maps a file on its own (not shared with the reader).
  static absl::StatusOr<std::shared_ptr<TraceFile>> OpenFile(const TraceFileInfo& info) {
    return TraceFile::Open(info.path);
  }

  // The keys of the first file whose Header is complete (empty when none is).
  absl::StatusOr<std::vector<std::string>> Keys() const;
  // Each key's dtype and shape in the first record of the trace (empty when
  // the trace holds no record).
  absl::StatusOr<std::vector<KeySchema>> Schema() const;

  // The selected records, merged across ranks (see TraceCursor).
  TraceCursor Read(ReadOptions options) const;

  // Copies nothing yet: gathers each of `keys` (nullopt: Keys()) over the
  // selected steps of one rank (nullopt: the only rank; InvalidArgument when
  // there are several), in file order, leaving out empty (trace_once) columns.
  // A key whose dtype or shape changes is InvalidArgument naming the file,
  // key, gstep and offset.
  absl::StatusOr<StackResult> Stack(std::optional<std::vector<std::string>> keys,
                                    const StepSelection& steps,
                                    std::optional<int32_t> rank = std::nullopt) const;

  // The runs among files(), oldest first (by start time, then first file
  // index). A file's run is its Meta's run_id, else its Header's RunInfo; a
  // file that names neither (a writer that died before both, a stray entry)
  // goes with the same rank's closest earlier file that names a run (else
  // its closest later one), else in the run "" (XDL's files). Reads every
  // Meta and maps each run's first file per rank (for its Header). A file
  // that cannot be mapped or whose RunInfo does not parse gives no run info:
  // reading or verifying it names the problem.
  absl::StatusOr<std::vector<RunSummary>> Runs() const;
  // A reader over the files of one run (an id from Runs(), or a prefix of
  // exactly one). NotFound naming the runs there are when none matches,
  // InvalidArgument when a prefix matches several.
  absl::StatusOr<TraceReader> OfRun(absl::string_view run_id) const;
  // A reader over files() less those whose path is one of `paths` (as in
  // files()): the files a reader sets aside, such as a copy whose Meta names
  // another rank or file index. A path that is not one of files() is ignored.
  TraceReader Without(const std::vector<std::string>& paths) const;

 private:
  struct Shared;
  explicit TraceReader(std::shared_ptr<Shared> shared);
  // A reader over `files`, sharing whichever of them this one has mapped.
  TraceReader Subset(const std::vector<size_t>& files) const;
  std::shared_ptr<Shared> shared_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_H_
