// One mmap'd data file: opening regular files only, Header parsing, zero-copy Record decoding with
// checked shapes, torn-tail (and zero-filled tail) detection, Meta reading and verification.
#include "xdl_trace/reader/trace_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/crc32c.h"
#include "core/file_kind.h"
#include "core/status_macros.h"
#include "core/wire_reader.h"
#include "reader/mapping_guard.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"

namespace xdl_trace {
namespace {

using internal::WireField;
using internal::WireReader;

constexpr uint64_t kPrefixBytes = 4;

// Field numbers, from the generated code (the .proto is their one source).
constexpr uint32_t kHeaderKeyField = xdl::proto::Header::kKeyFieldNumber;
constexpr uint32_t kHeaderColumnField = xdl::proto::Header::kColumnFieldNumber;
constexpr uint32_t kColumnDtypeField = xdl::proto::Column::kDtypeFieldNumber;
constexpr uint32_t kColumnShapeField = xdl::proto::Column::kShapeFieldNumber;
constexpr uint32_t kColumnDataField = xdl::proto::Column::kDataFieldNumber;
constexpr uint32_t kRecordGstepField = xdl::proto::Record::kGstepFieldNumber;
constexpr uint32_t kRecordLstepField = xdl::proto::Record::kLstepFieldNumber;
constexpr uint32_t kRecordColumnField = xdl::proto::Record::kColumnFieldNumber;
constexpr uint32_t kRecordTimestampField = xdl::proto::Record::kTimestampFieldNumber;
constexpr uint32_t kRecordCrcField = xdl::proto::Record::kCrc32CFieldNumber;
constexpr uint32_t kMetaCrcField = xdl::proto::Meta::kMetaCrc32CFieldNumber;
// XDL's Meta: lstep_begin .. timestamp_end, nothing after.
constexpr uint32_t kLastXdlMetaField = xdl::proto::Meta::kTimestampEndFieldNumber;

uint32_t LoadLength(const char* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
         (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

absl::Status Corrupt(const std::string& path, uint64_t offset, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": corrupt at byte offset ", offset, ": ", what));
}

constexpr uint64_t kSectorBytes = 512;  // The smallest unit a disk loses.

// ColumnInfo's enums carry xdl.proto.ColumnDescriptor's wire values.
using ProtoColumn = xdl::proto::ColumnDescriptor;
static_assert(static_cast<int>(ColumnInfo::Content::kValue) == ProtoColumn::VALUE);
static_assert(static_cast<int>(ColumnInfo::Content::kStats) == ProtoColumn::STATS);
static_assert(static_cast<int>(ColumnInfo::Content::kHistogram) == ProtoColumn::HISTOGRAM);
static_assert(static_cast<int>(ColumnInfo::Content::kUserSummary) == ProtoColumn::USER_SUMMARY);
static_assert(static_cast<int>(ColumnInfo::Content::kDigest) == ProtoColumn::DIGEST);
static_assert(static_cast<int>(ColumnInfo::Source::kTensor) == ProtoColumn::TENSOR);
static_assert(static_cast<int>(ColumnInfo::Source::kVariable) == ProtoColumn::VARIABLE);
static_assert(static_cast<int>(ColumnInfo::Source::kGradient) == ProtoColumn::GRADIENT);
static_assert(static_cast<int>(ColumnInfo::Source::kCallback) == ProtoColumn::CALLBACK);
static_assert(static_cast<int>(ColumnInfo::Source::kOnce) == ProtoColumn::ONCE);

// Parses Header field 2 (one ColumnDescriptor, generated code) at byte `at`
// and appends it to *columns.
absl::Status AddColumnInfo(const std::string& path, uint64_t at, const WireField& field,
                           std::vector<ColumnInfo>* columns) {
  ProtoColumn message;
  if (field.wire_type != internal::kWireLengthDelimited ||
      !message.ParseFromArray(field.payload.data(), static_cast<int>(field.payload.size()))) {
    return Corrupt(path, at,
                   absl::StrCat("Header.column ", columns->size(), " is not a ColumnDescriptor"));
  }
  ColumnInfo& info = columns->emplace_back();
  info.content = static_cast<ColumnInfo::Content>(message.content());
  info.source = static_cast<ColumnInfo::Source>(message.source());
  info.layout_version = message.layout_version();
  info.histogram_bins = message.histogram_bins();
  info.summary_name = message.summary_name();
  info.has_input = message.has_input();
  if (info.has_input) {
    info.input_dtype = static_cast<DType>(message.input().dtype());
    info.input_shape.assign(message.input().shape().begin(), message.input().shape().end());
  }
  return absl::OkStatus();
}

// Opens `path` read-only if it is a regular file, filling *st. O_NONBLOCK: a
// FIFO cannot make the open wait for a writer; fstat after the open (no race
// with a rename) refuses a FIFO, a device (a link to /dev/zero), a directory.
absl::StatusOr<int> OpenRegularFile(const std::string& path, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat(path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    if (err == EACCES) return absl::PermissionDeniedError(message);
    return absl::UnavailableError(message);
  }
  if (fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", internal::FileKind(st->st_mode), ")"));
  }
  return fd;
}

// Where the file's last data extent ends: past it a sparse file holds a hole, which reads as
// zeros without being stored or read (lseek SEEK_DATA / SEEK_HOLE). `size` where the
// filesystem does not say. The zero-tail scan starts here, so a hole costs no page.
uint64_t DataEnd(int fd, uint64_t size) {
  uint64_t end = 0;
  off_t at = 0;
  while (static_cast<uint64_t>(at) < size) {
    const off_t data = lseek(fd, at, SEEK_DATA);
    if (data < 0) return errno == ENXIO ? end : size;  // ENXIO: no data past `at`.
    const off_t hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return size;
    end = static_cast<uint64_t>(hole);
    at = hole;
  }
  return std::min(end, size);
}

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The element count of a shape with no negative dimension; nullopt past int64.
std::optional<int64_t> CheckedElements(const Shape& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (const int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::string Decimal(absl::uint128 value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value != 0);
  return digits;
}

// "column 2 ('loss')": how errors name a column.
std::string ColumnName(size_t index, const std::vector<std::string>& keys) {
  if (index < keys.size()) return absl::StrCat("column ", index, " ('", keys[index], "')");
  return absl::StrCat("column ", index);
}

// Decodes a Column message at file offset `base`; `name` (ColumnName) is for errors.
absl::Status DecodeColumn(const std::string& path, uint64_t base, absl::string_view message,
                          size_t index, const std::vector<std::string>& keys, ColumnView* column) {
  column->dtype = DType::kInt8;  // The proto3 default (Type 0).
  column->shape.clear();
  column->data = absl::string_view();
  auto bad = [&](uint64_t at, absl::string_view what) {
    return Corrupt(path, at, absl::StrCat(ColumnName(index, keys), ": ", what));
  };
  WireReader reader(message);
  WireField field;
  while (reader.Next(&field)) {
    const uint64_t at = base + static_cast<uint64_t>(field.encoded.data() - message.data());
    switch (field.number) {
      case kColumnDtypeField:
        if (field.wire_type != internal::kWireVarint)
          return Corrupt(path, at, "Column.dtype is not a varint");
        // Kept as written (int32 wire semantics): a dtype newer than this
        // reader is opaque bytes, not corruption (docs/format.md).
        column->dtype = static_cast<DType>(static_cast<int32_t>(field.varint));
        break;
      case kColumnShapeField: {
        auto add_dim = [&](uint64_t raw) -> absl::Status {
          const auto dim = static_cast<int32_t>(raw);  // int32 wire semantics: truncate.
          if (dim < 0) return bad(at, absl::StrCat("negative dimension ", dim));
          column->shape.push_back(dim);
          return absl::OkStatus();
        };
        if (field.wire_type == internal::kWireVarint) {
          XDL_RETURN_IF_ERROR(add_dim(field.varint));
        } else if (field.wire_type == internal::kWireLengthDelimited) {  // Packed.
          const char* p = field.payload.data();
          const char* end = p + field.payload.size();
          while (p < end) {
            uint64_t raw;
            if (!internal::ReadVarint(&p, end, &raw)) {
              return Corrupt(path, at, "bad varint in packed Column.shape");
            }
            XDL_RETURN_IF_ERROR(add_dim(raw));
          }
        } else {
          return Corrupt(path, at, "Column.shape has a wrong wire type");
        }
        break;
      }
      case kColumnDataField:
        if (field.wire_type != internal::kWireLengthDelimited) {
          return Corrupt(path, at, "Column.data is not length-delimited");
        }
        column->data = field.payload;
        break;
      default:
        break;  // Unknown field: skipped.
    }
  }
  if (reader.error() != nullptr) return Corrupt(path, base + reader.error_offset(), reader.error());
  if (column->empty()) return absl::OkStatus();
  const std::optional<int64_t> elements = CheckedElements(column->shape);
  if (!elements) {
    return bad(base, absl::StrCat("shape ", ShapeString(column->shape), " has more than ",
                                  std::numeric_limits<int64_t>::max(), " elements"));
  }
  if (!column->known_dtype()) return absl::OkStatus();  // Opaque bytes of any length.
  const absl::uint128 expected =
      absl::uint128(static_cast<uint64_t>(*elements)) * absl::uint128(DTypeSize(column->dtype));
  if (expected != absl::uint128(column->data.size())) {
    return bad(base, absl::StrCat("column data has ", column->data.size(), " bytes but its shape ",
                                  ShapeString(column->shape), " and ", DTypeName(column->dtype),
                                  " dtype need ", Decimal(expected)));
  }
  return absl::OkStatus();
}

// Whether a record must carry Record.crc32c, and whether its value is checked.
struct CrcRule {
  bool required = false;  // A file whose Meta has its own checksum (format 1): every record.
  bool check = false;     // The value is the CRC-32C of the bytes before it.
};

// Decodes a Record message at file offset `base` (the body, after the prefix).
// Its Record.crc32c, when it has one, must be its last field; with `crc.check`
// it must also be the CRC-32C of the bytes before it, and with `crc.required` a
// record without one is corruption (a flipped tag bit would otherwise make it
// an unchecked record).
absl::Status DecodeRecord(const std::string& path, uint64_t base, absl::string_view message,
                          const std::vector<std::string>& keys, CrcRule crc, RecordView* record) {
  record->gstep = record->lstep = record->timestamp_ms = 0;
  record->extra_fields.clear();
  size_t column_count = 0;
  bool has_crc = false;
  WireReader reader(message);
  WireField field;
  while (reader.Next(&field)) {
    const uint64_t at = base + static_cast<uint64_t>(field.encoded.data() - message.data());
    const bool is_varint = field.wire_type == internal::kWireVarint;
    switch (field.number) {
      case kRecordGstepField:
      case kRecordLstepField:
      case kRecordTimestampField: {
        if (!is_varint)
          return Corrupt(path, at, absl::StrCat("Record field ", field.number, " is not a varint"));
        const auto value = static_cast<int64_t>(field.varint);
        if (field.number == kRecordGstepField) record->gstep = value;
        if (field.number == kRecordLstepField) record->lstep = value;
        if (field.number == kRecordTimestampField) record->timestamp_ms = value;
        break;
      }
      case kRecordColumnField: {
        if (field.wire_type != internal::kWireLengthDelimited) {
          return Corrupt(path, at, "Record.column is not length-delimited");
        }
        if (column_count == record->columns.size()) record->columns.emplace_back();
        const uint64_t column_base =
            base + static_cast<uint64_t>(field.payload.data() - message.data());
        XDL_RETURN_IF_ERROR(DecodeColumn(path, column_base, field.payload, column_count, keys,
                                         &record->columns[column_count]));
        ++column_count;
        break;
      }
      case kRecordCrcField: {
        const size_t before = static_cast<size_t>(field.encoded.data() - message.data());
        if (field.wire_type != internal::kWireFixed32) {
          return Corrupt(path, at, "Record.crc32c is not a fixed32");
        }
        if (before + field.encoded.size() != message.size()) {
          return Corrupt(path, at, "Record.crc32c is not the last field of its record");
        }
        has_crc = true;
        if (crc.check) {
          const uint32_t actual = internal::crc32c::Value(message.data(), before);
          const uint32_t expected = LoadLength(field.payload.data());
          if (actual != expected) {
            return Corrupt(path, base - kPrefixBytes,
                           absl::StrFormat("record checksum mismatch: crc32c of its %d bytes is "
                                           "%08x, its Record.crc32c says %08x (a damaged record)",
                                           before, actual, expected));
          }
        }
        break;
      }
      default:
        record->extra_fields.push_back(
            RawField{field.number, field.wire_type, field.payload, field.encoded});
        break;
    }
  }
  record->columns.resize(column_count);
  if (reader.error() != nullptr) return Corrupt(path, base + reader.error_offset(), reader.error());
  if (crc.required && !has_crc) {
    return Corrupt(
        path, base - kPrefixBytes,
        absl::StrCat("record without its checksum (Record.crc32c, field ", kRecordCrcField,
                     ") in a file whose Meta has its own: every record of such a file "
                     "carries one (a damaged record)"));
  }
  if (column_count != keys.size() && !IsDeviceOnlyRecord(*record, keys.size())) {
    return Corrupt(path, base - kPrefixBytes,
                   absl::StrCat("record has ", column_count, " columns but the header has ",
                                keys.size(), " keys"));
  }
  return absl::OkStatus();
}

FileMeta FromProto(const xdl::proto::Meta& m, absl::string_view serialized) {
  FileMeta meta;
  meta.lstep_begin = m.lstep_begin();
  meta.lstep_end = m.lstep_end();
  meta.gstep_begin = m.gstep_begin();
  meta.gstep_end = m.gstep_end();
  meta.timestamp_begin = m.timestamp_begin();
  meta.timestamp_end = m.timestamp_end();
  meta.record_count = m.record_count();
  meta.data_bytes = m.data_bytes();
  meta.crc32c = m.crc32c();
  meta.rank = m.rank();
  meta.file_index = m.file_index();
  meta.format_version = m.format_version();
  meta.closed_cleanly = m.closed_cleanly();
  if (m.has_header_crc32c()) meta.header_crc32c = m.header_crc32c();
  meta.serialized = std::string(serialized);
  return meta;
}

}  // namespace

int64_t ColumnView::NumElements() const {
  if (empty()) return 0;
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) return -1;
  return CheckedElements(shape).value_or(-1);
}

std::string DescribeTornTail(const TornTail& torn) {
  if (!torn.zero_filled && torn.writer_open) {
    return absl::StrCat(torn.path,
                        ": still being written (or its writer stopped before closing it); ",
                        torn.complete_records,
                        " complete records, then a partial frame at byte offset ", torn.offset);
  }
  if (!torn.zero_filled) {
    return absl::StrCat(torn.path, ": torn final frame at byte offset ", torn.offset,
                        " (the writer stopped mid-record); the records before it are complete");
  }
  std::string text = absl::StrCat(torn.path, ": torn tail at byte offset ", torn.offset,
                                  ": zero-filled from byte offset ", torn.zero_from,
                                  " to the end (", torn.file_bytes - torn.zero_from,
                                  " bytes), as a power loss leaves unsynced data");
  if (torn.meta_data_bytes > torn.offset) {
    absl::StrAppend(&text, "; the Meta covers ", torn.meta_data_bytes,
                    " bytes, so records it counted were lost");
  }
  return text;
}

absl::StatusOr<FileMeta> ParseFileMeta(absl::string_view bytes) {
  xdl::proto::Meta meta;
  if (!meta.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("not a serialized Meta");
  }
  // Its own checksum (Meta.meta_crc32c, the last field) when it has one.
  bool has_meta_crc = false;
  uint32_t beyond_xdl = 0;  // The first field XDL's Meta never has, 0 when none.
  WireReader reader(bytes);
  WireField field;
  while (reader.Next(&field)) {
    if (beyond_xdl == 0 && field.number > kLastXdlMetaField) beyond_xdl = field.number;
    if (field.number != kMetaCrcField) continue;
    has_meta_crc = true;
    const size_t before = static_cast<size_t>(field.encoded.data() - bytes.data());
    if (field.wire_type != internal::kWireFixed32 ||
        before + field.encoded.size() != bytes.size()) {
      return absl::DataLossError("Meta.meta_crc32c is not the Meta's last field (fixed32)");
    }
    const uint32_t actual = internal::crc32c::Value(bytes.data(), before);
    const uint32_t expected = LoadLength(field.payload.data());
    if (actual != expected) {
      return absl::DataLossError(absl::StrFormat(
          "Meta checksum mismatch: crc32c of its first %d bytes is %08x, its meta_crc32c says "
          "%08x (a damaged Meta: the file is read as without one)",
          before, actual, expected));
    }
  }
  // protobuf reads a tag's varint as 32 bits and skips what it does not know;
  // a Meta that the field walker refuses (an overlong tag, a bad wire type) was
  // written by no writer, and would hide its fields from the checks below.
  if (reader.error() != nullptr) {
    return absl::DataLossError(absl::StrCat("the Meta does not parse as protobuf wire data: ",
                                            reader.error(), " at byte ", reader.error_offset()));
  }
  // The writer that writes Meta.header_crc32c seals every Meta: without its own
  // checksum such a Meta lost it (a flipped bit in its tag), and nothing in it
  // can be trusted for pruning.
  if (meta.has_header_crc32c() && !has_meta_crc) {
    return absl::DataLossError(absl::StrCat(
        "the Meta has header_crc32c (field ", xdl::proto::Meta::kHeaderCrc32CFieldNumber,
        ") but not its own checksum (meta_crc32c, field ", kMetaCrcField,
        "), which the writer always writes with it (a damaged Meta: the file is read as "
        "without one)"));
  }
  // XDL's Meta holds its fields 1-6 only: a Meta without a format_version that
  // holds another lost it to a flipped bit (a tag's wire type or number), and
  // would otherwise be read as XDL's, with nothing to verify.
  if (meta.format_version() == 0 && beyond_xdl != 0) {
    return absl::DataLossError(absl::StrCat(
        "the Meta has no format_version but holds field ", beyond_xdl,
        ", which XDL's Meta (fields ", xdl::proto::Meta::kLstepBeginFieldNumber, "-",
        kLastXdlMetaField, ") never has (a damaged Meta: the file is read as without one)"));
  }
  // Ranges a reader prunes by: begin <= end (XDL's -1 means unknown).
  const bool ours = meta.format_version() != 0;
  const std::pair<const char*, std::pair<int64_t, int64_t>> ranges[] = {
      {"lstep", {meta.lstep_begin(), meta.lstep_end()}},
      {"gstep", {meta.gstep_begin(), meta.gstep_end()}},
      {"timestamp", {meta.timestamp_begin(), meta.timestamp_end()}},
  };
  for (const auto& [name, range] : ranges) {
    const bool unknown = !ours && (range.first == -1 || range.second == -1);
    if (!unknown && range.first > range.second) {
      return absl::DataLossError(absl::StrCat("impossible Meta: ", name, "_begin ", range.first,
                                              " > ", name, "_end ", range.second,
                                              " (the file is read as without a Meta)"));
    }
  }
  if (ours && (meta.record_count() < 0 || meta.data_bytes() < 0)) {
    return absl::DataLossError(absl::StrCat("impossible Meta: record_count ", meta.record_count(),
                                            ", data_bytes ", meta.data_bytes()));
  }
  FileMeta parsed = FromProto(meta, bytes);
  parsed.has_meta_crc32c = has_meta_crc;
  return parsed;
}

absl::StatusOr<FileMeta> ReadFileMeta(const std::string& meta_path) {
  struct stat st;
  absl::StatusOr<int> opened = OpenRegularFile(meta_path, &st);
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(absl::StrCat(meta_path, ": no such file"));
  }
  XDL_ASSIGN_OR_RETURN(const int fd, std::move(opened));
  if (static_cast<uint64_t>(st.st_size) > kMaxMetaBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        meta_path, ": ", st.st_size, " bytes, more than a Meta can be (", kMaxMetaBytes, ")"));
  }
  // Read at most one byte past the cap: a file that grew since fstat is refused, not slurped.
  std::string content(kMaxMetaBytes + 1, '\0');
  size_t got = 0;
  while (got < content.size()) {
    const ssize_t n = ::read(fd, content.data() + got, content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(meta_path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > kMaxMetaBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": more than ", kMaxMetaBytes, " bytes: not a Meta"));
  }
  content.resize(got);
  auto meta = ParseFileMeta(content);
  if (!meta.ok())
    return absl::DataLossError(absl::StrCat(meta_path, ": ", meta.status().message()));
  return meta;
}

// --- RecordCursor -----------------------------------------------------------

RecordCursor::RecordCursor(std::shared_ptr<const TraceFile> file)
    : file_(std::move(file)), offset_(file_->first_record_offset()) {
  done_ = file_->header_torn();
  if (done_) {
    torn_tail_ = true;
    torn_offset_ = 0;
  }
}

void RecordCursor::Seek(uint64_t offset) {
  offset_ = offset;
  done_ = file_->header_torn();
  torn_tail_ = done_;
  status_ = absl::OkStatus();
}

bool RecordCursor::Next(RecordView* record) { return Step(record, nullptr); }

bool RecordCursor::Skip(uint64_t* frame_size) { return Step(nullptr, frame_size); }

bool RecordCursor::Step(RecordView* record, uint64_t* frame_size) {
  if (!file_->version_error().ok()) {
    status_ = file_->version_error();
    done_ = true;
    return false;
  }
  if (done_ || offset_ >= file_->size()) {
    // The walk's end: the caller read the last record's arrays, views of the mapping, since.
    if (status_.ok()) status_ = file_->CheckNotCut();
    done_ = true;
    return false;
  }
  bool torn = false;
  uint64_t size = 0;
  if (record != nullptr) {
    status_ = file_->ReadFrame(offset_, record, &torn);
    size = record->frame_size;
  } else {
    status_ = file_->FrameSize(offset_, &size, &torn);
    *frame_size = size;
  }
  if (!status_.ok() || torn) {
    done_ = true;
    if (torn) {
      torn_tail_ = true;
      torn_offset_ = offset_;
    }
    return false;
  }
  offset_ += size;
  return true;
}

// --- TraceFile --------------------------------------------------------------

TraceFile::TraceFile(std::string path, const char* mapping, size_t size, const FileOptions& options)
    : path_(std::move(path)),
      options_(options),
      mapping_(mapping),
      bytes_(mapping, size),
      guard_slot_(internal::MappingGuard::Register(mapping, size)) {}

TraceFile::~TraceFile() {
  internal::MappingGuard::Unregister(guard_slot_);
  if (mapping_ != nullptr) munmap(const_cast<char*>(mapping_), bytes_.size());
}

absl::Status TraceFile::CheckNotCut() const {
  if (!internal::MappingGuard::Cut(guard_slot_)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      path_, ": the file shrank while it was read (truncated by another process?): its ",
      bytes_.size(),
      " bytes at open are no longer all there; its bytes past the new end read as "
      "zeros, so nothing more is served from it"));
}

absl::StatusOr<std::shared_ptr<TraceFile>> TraceFile::Open(const std::string& path,
                                                           const FileOptions& options) {
  struct stat st;
  XDL_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &st));
  const auto size = static_cast<size_t>(st.st_size);
  const char* mapping = nullptr;
  if (size > 0) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    madvise(m, size, MADV_SEQUENTIAL);
    mapping = static_cast<const char*>(m);
  }
  const uint64_t data_end = size > 0 ? DataEnd(fd, size) : 0;
  ::close(fd);
  std::shared_ptr<TraceFile> file(new TraceFile(path, mapping, size, options));

  // The zero run that ends the file: what a power loss leaves (see ReadFrame). A
  // hole that ends a sparse file is part of it, found without touching its pages.
  uint64_t zero_from = data_end;
  while (zero_from > 0 && mapping[zero_from - 1] == '\0') --zero_from;
  file->zero_from_ = zero_from;
  file->lost_block_ =
      zero_from < size && (zero_from + kSectorBytes - 1) / kSectorBytes * kSectorBytes < size;

  // Header frame.
  const uint32_t length = size < kPrefixBytes ? 0 : LoadLength(mapping);
  if (zero_from == 0 || size < kPrefixBytes || length > size - kPrefixBytes) {
    file->header_torn_ = true;
    file->first_record_offset_ = size;
  } else {
    absl::string_view body(mapping + kPrefixBytes, length);
    WireReader reader(body);
    WireField field;
    absl::Status status;
    while (status.ok() && reader.Next(&field)) {
      const uint64_t at = kPrefixBytes + (field.encoded.data() - body.data());
      if (field.number == kHeaderKeyField) {
        if (field.wire_type != internal::kWireLengthDelimited) {
          status = Corrupt(path, at, "Header.key is not length-delimited");
        }
        file->keys_.emplace_back(field.payload);
      } else if (field.number == kHeaderColumnField) {
        status = AddColumnInfo(path, at, field, &file->columns_);
      }
    }
    if (status.ok() && reader.error() != nullptr) {
      status = Corrupt(path, kPrefixBytes + reader.error_offset(),
                       absl::StrCat(reader.error(), " (in the Header frame)"));
    }
    if (status.ok() && !file->columns_.empty() && file->columns_.size() != file->keys_.size()) {
      status = Corrupt(path, kPrefixBytes,
                       absl::StrCat("the Header has ", file->columns_.size(),
                                    " column descriptors for ", file->keys_.size(), " keys"));
    }
    if (!status.ok()) {
      if (!file->lost_block_ || kPrefixBytes + length <= zero_from) return status;
      file->keys_.clear();  // The Header runs into a zero-filled tail.
      file->columns_.clear();
      file->header_torn_ = true;
      file->first_record_offset_ = size;
    } else {
      file->first_record_offset_ = kPrefixBytes + length;
    }
  }

  file->key_order_.resize(file->keys_.size());
  for (size_t i = 0; i < file->keys_.size(); ++i) file->key_order_[i] = static_cast<uint32_t>(i);
  std::stable_sort(file->key_order_.begin(), file->key_order_.end(),
                   [&keys = file->keys_](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });

  auto meta = ReadFileMeta(path + ".meta");
  if (meta.ok()) {
    file->meta_ = *std::move(meta);
    const int32_t version = file->meta_->format_version;
    if (version != 0 && version != kFormatVersion) {
      file->version_error_ = absl::FailedPreconditionError(
          absl::StrCat(path, ".meta: format_version ", version, " ",
                       version > kFormatVersion
                           ? absl::StrCat("is newer than this reader knows (", kFormatVersion, ")")
                           : std::string("is not one this reader knows"),
                       ": not reading ", path));
    }
  } else {
    file->meta_error_ = meta.status();
  }
  // A Header cut short inside what our Meta covers: the Meta vouches for a
  // Header and records this file no longer holds (a copy or truncation that
  // lost them), not a writer that stopped mid-Header. Zeros are a power loss.
  const FileMeta* vouching =
      file->meta_ && file->version_error_.ok() && file->meta_->format_version == kFormatVersion
          ? &*file->meta_
          : nullptr;
  if (file->header_torn_ && vouching != nullptr && zero_from > 0 && !file->lost_block_ &&
      static_cast<uint64_t>(vouching->data_bytes) > size) {
    return Corrupt(path, 0,
                   absl::StrCat("the Header frame is cut short (the file has ", size,
                                " bytes) but the Meta covers ", vouching->data_bytes, " bytes and ",
                                vouching->record_count, " records"));
  }
  XDL_RETURN_IF_ERROR(file->CheckHeader(zero_from));
  XDL_RETURN_IF_ERROR(file->CheckNotCut());
  return file;
}

absl::Status TraceFile::CheckHeader(uint64_t zero_from) const {
  if (!meta_ || !version_error_.ok() || meta_->format_version != kFormatVersion) {
    return absl::OkStatus();
  }
  const uint64_t size = bytes_.size();
  const auto covered = static_cast<uint64_t>(meta_->data_bytes);
  // A Header frame the Meta covers but that does not fit the file (a flipped
  // bit in its length prefix): corruption, never a torn tail. Zeros are a
  // power loss, and a file shorter than the Meta says is "cut short" above.
  if (header_torn_ && covered >= kPrefixBytes && covered <= size && zero_from > 0 && !lost_block_) {
    const uint32_t length = LoadLength(bytes_.data());
    return Corrupt(
        path_, 0,
        absl::StrCat("the Header frame's length prefix says ", length,
                     " bytes, which do not fit the ", size, " bytes of a file whose Meta",
                     " covers ", covered, " (a damaged length prefix)"));
  }
  if (!meta_->header_crc32c || header_torn_) return absl::OkStatus();
  const uint32_t actual = internal::crc32c::Value(bytes_.data(), first_record_offset_);
  if (actual != *meta_->header_crc32c) {
    return Corrupt(path_, 0,
                   absl::StrFormat("Header checksum mismatch: crc32c of its %d-byte frame is %08x, "
                                   "the Meta's header_crc32c says %08x (a damaged Header)",
                                   first_record_offset_, actual, *meta_->header_crc32c));
  }
  return absl::OkStatus();
}

TornTail TraceFile::TornTailAt(uint64_t offset, int32_t rank) const {
  TornTail torn;
  torn.path = path_;
  torn.rank = rank;
  torn.offset = offset;
  torn.file_bytes = bytes_.size();
  // ReadFrame's rule: every torn tail of a file with a lost block is zero-filled.
  torn.zero_filled = offset < bytes_.size() && (offset >= zero_from_ || lost_block_);
  torn.zero_from = std::max(zero_from_, offset);
  if (meta_ && meta_->format_version == kFormatVersion) {
    torn.meta_data_bytes = static_cast<uint64_t>(std::max<int64_t>(meta_->data_bytes, 0));
  }
  // XDL writes its Meta when it finishes a file: a file with one is closed.
  torn.writer_open = !meta_ || (meta_->format_version == kFormatVersion && !meta_->closed_cleanly);
  // Every frame before `offset` was read whole: hop over their length prefixes.
  for (uint64_t at = first_record_offset_; at + kPrefixBytes <= offset;
       at += kPrefixBytes + LoadLength(bytes_.data() + at)) {
    ++torn.complete_records;
  }
  return torn;
}

absl::Status TraceFile::FrameLength(uint64_t offset, uint64_t* length, bool* torn) const {
  *torn = false;
  XDL_RETURN_IF_ERROR(version_error_);
  const uint64_t size = bytes_.size();
  if (offset > size) return Corrupt(path_, offset, "offset past the end of the file");
  // A power loss with data not synced leaves zeros from where the synced data
  // ended (a frame boundary) or from a lost block's start: a torn tail, even
  // inside what the Meta covers (its rename reached the disk, the data did
  // not). docs/format.md, "Torn tails", is the rule; read_trace.py follows it.
  if (offset >= zero_from_ && offset < size) {
    *torn = true;
    return absl::OkStatus();
  }
  // The Meta vouches for every byte below data_bytes: a frame cut short there
  // is corruption, not a crash mid-write.
  const bool vouched = meta_.has_value() && static_cast<uint64_t>(meta_->data_bytes) > offset;
  if (size - offset < kPrefixBytes) {
    if (vouched && !lost_block_) {
      return Corrupt(path_, offset,
                     absl::StrCat("length prefix cut short but the Meta covers ", meta_->data_bytes,
                                  " bytes"));
    }
    *torn = true;
    return absl::OkStatus();
  }
  *length = LoadLength(bytes_.data() + offset);
  if (*length > size - offset - kPrefixBytes) {
    if (vouched && !lost_block_) {
      return Corrupt(
          path_, offset,
          absl::StrCat("frame length ", *length, " runs past the end of the file (", size,
                       " bytes) inside the ", meta_->data_bytes, " bytes the Meta covers"));
    }
    *torn = true;
  }
  return absl::OkStatus();
}

std::optional<size_t> TraceFile::KeyIndex(absl::string_view key) const {
  const auto it = std::lower_bound(
      key_order_.begin(), key_order_.end(), key,
      [this](uint32_t index, absl::string_view wanted) { return keys_[index] < wanted; });
  if (it == key_order_.end() || keys_[*it] != key) return std::nullopt;
  return *it;
}

absl::Status TraceFile::FrameSize(uint64_t offset, uint64_t* frame_size, bool* torn) const {
  uint64_t length = 0;
  XDL_RETURN_IF_ERROR(FrameLength(offset, &length, torn));
  *frame_size = kPrefixBytes + length;
  return absl::OkStatus();
}

absl::Status TraceFile::ReadFrame(uint64_t offset, RecordView* record, bool* torn) const {
  return DecodeFrame(offset, record, torn, options_.check_record_crc);
}

absl::Status TraceFile::DecodeFrame(uint64_t offset, RecordView* record, bool* torn,
                                    bool check_crc) const {
  uint64_t length = 0;
  XDL_RETURN_IF_ERROR(FrameLength(offset, &length, torn));
  if (*torn) return absl::OkStatus();
  record->offset = offset;
  record->frame_size = kPrefixBytes + length;
  // The decoder reads the frame's field headers, a tensor's bytes apart: with many small
  // tensors each is a cache miss of its own. Asking for the frame's first 4 KB now lets those
  // misses overlap (a 1M-record report of 64-element tensors: 1.7 -> 1.5 s).
  const char* const frame = bytes_.data() + offset;
  for (uint64_t at = 0; at < std::min<uint64_t>(kPrefixBytes + length, 4096); at += 64) {
    __builtin_prefetch(frame + at);
  }
  // A format-1 Meta with its own checksum comes from a writer that seals every record.
  const CrcRule crc{meta_ && meta_->has_meta_crc32c && meta_->format_version == kFormatVersion,
                    check_crc};
  absl::Status status =
      DecodeRecord(path_, offset + kPrefixBytes, bytes_.substr(offset + kPrefixBytes, length),
                   keys_, crc, record);
  XDL_RETURN_IF_ERROR(CheckNotCut());  // Before a decoding error the zeros caused.
  if (!status.ok() && lost_block_ && offset + kPrefixBytes + length > zero_from_) {
    *torn = true;  // The frame runs into a zero-filled tail.
    return absl::OkStatus();
  }
  return status;
}

TraceFile::FrameCount TraceFile::CountFrames() const {
  FrameCount count;
  if (!version_error_.ok()) {
    count.corruption = std::string(version_error_.message());
    return count;
  }
  count.torn_tail = header_torn_;
  uint64_t offset = first_record_offset_;
  while (offset < bytes_.size() && !header_torn_) {
    uint64_t length = 0;
    bool torn = false;
    const absl::Status status = FrameLength(offset, &length, &torn);
    if (!status.ok()) {
      count.corruption = std::string(status.message());
      break;
    }
    if (torn) {
      count.torn_tail = true;
      break;
    }
    ++count.records;
    offset += kPrefixBytes + length;
  }
  return count;
}

VerifyReport TraceFile::Verify() const {
  VerifyReport report;
  report.file_bytes = bytes_.size();
  report.has_meta = meta_.has_value();
  auto problem = [&](uint64_t offset, absl::string_view what) {
    report.problems.push_back(absl::StrCat(path_, ": at byte offset ", offset, ": ", what));
  };
  if (!version_error_.ok()) {
    report.problems.push_back(std::string(version_error_.message()));
    return report;
  }
  // Our Meta vouches for a prefix; XDL's (format_version 0) only names steps.
  const bool ours = report.has_meta && meta_->format_version == kFormatVersion;
  const uint64_t covered =
      ours ? static_cast<uint64_t>(std::max<int64_t>(meta_->data_bytes, 0)) : 0;
  if (ours) {
    report.meta_data_bytes = covered;
    report.meta_record_count = meta_->record_count;
    report.crc_expected = meta_->crc32c;
    if (covered > bytes_.size()) {
      problem(bytes_.size(), absl::StrCat("file has ", bytes_.size(), " bytes but its Meta covers ",
                                          covered, " (truncated)"));
    }
    report.crc_actual =
        internal::crc32c::Value(bytes_.data(), std::min<uint64_t>(covered, bytes_.size()));
    if (report.crc_actual != report.crc_expected) {
      problem(0, absl::StrFormat("crc32c of the first %d bytes is %08x, the Meta says %08x",
                                 covered, report.crc_actual, report.crc_expected));
    }
  }
  if (header_torn_) {
    report.torn_tail = true;
    if (covered > 0) problem(0, "the Header frame is cut short");
  }

  // Walk every frame: count those the Meta covers (and their step and time
  // ranges), decode all of them.
  struct Range {
    int64_t begin = 0, end = 0;
    void Add(int64_t v, bool first) {
      begin = first ? v : std::min(begin, v);
      end = first ? v : std::max(end, v);
    }
  } gsteps, lsteps, timestamps;
  RecordView record;
  uint64_t offset = first_record_offset_;
  bool boundary_ok = covered == 0 || covered == offset;
  bool frames_ok = true;
  int64_t& records_read = report.records_read;
  while (offset < bytes_.size() && !header_torn_) {
    bool torn = false;
    absl::Status status = DecodeFrame(offset, &record, &torn, /*check_crc=*/true);
    if (!status.ok()) {
      report.problems.push_back(std::string(status.message()));
      frames_ok = false;
      break;
    }
    if (torn) {
      report.torn_tail = true;
      const TornTail tail = TornTailAt(offset, 0);
      if (tail.zero_filled && offset < covered) problem(offset, DescribeTornTail(tail));
      break;
    }
    ++records_read;
    if (offset < covered) {
      const bool first = report.records_counted++ == 0;
      gsteps.Add(record.gstep, first);
      lsteps.Add(record.lstep, first);
      timestamps.Add(record.timestamp_ms, first);
    }
    offset += record.frame_size;
    if (offset == covered) boundary_ok = true;
  }

  if (!report.has_meta) {
    if (absl::IsNotFound(meta_error_) && records_read == 0 && frames_ok) {
      // What a crash between writing the Header and the first Meta leaves.
      report.unverifiable = true;
      report.note = "no .meta and no record (a crash before the first Meta): no data lost";
    } else {
      report.problems.insert(report.problems.begin(),
                             absl::StrCat(path_, ": cannot verify: ", meta_error_.message()));
    }
  } else if (!ours) {
    report.unverifiable = true;
    report.note = meta_->serialized.empty()
                      ? "unverifiable (XDL Meta, no checksum): an empty .meta, as XDL leaves a "
                        "file it has not finished"
                      : "unverifiable (XDL Meta, no checksum)";
  } else {
    if (covered <= bytes_.size() && !boundary_ok && covered > 0) {
      problem(covered, "the Meta's data_bytes does not fall on a frame boundary");
    }
    // A file copied or renamed under another rank or index holds another file's
    // records: counted twice, or in the wrong rank (issue 24). The writer numbers
    // files from 1: a file_index of 0 is a Meta that never recorded either.
    TraceFileInfo named;
    const size_t slash = path_.rfind('/');
    if (meta_->file_index != 0 &&
        ParseTraceFileName(slash == std::string::npos ? path_ : path_.substr(slash + 1), &named) &&
        (named.rank != meta_->rank || named.index != meta_->file_index)) {
      problem(0, absl::StrCat("the Meta says rank ", meta_->rank, " file_index ", meta_->file_index,
                              " but the file is named rank ", named.rank, " index ", named.index,
                              " (a copied or renamed file: its records are another file's)"));
    }
    if (report.records_counted != meta_->record_count) {
      problem(0, absl::StrCat("the Meta says ", meta_->record_count, " records, the file holds ",
                              report.records_counted, " within its first ", covered, " bytes"));
    }
    // The ranges the reader skips files by (ReadStartOffset): a Meta that lies
    // about them would make a selection silently miss records. Compared only
    // when the checksum holds: otherwise the bytes are not what the Meta
    // describes, and the crc32c problem says so.
    const bool crc_ok = report.crc_actual == report.crc_expected;
    const std::pair<const char*, std::pair<int64_t, int64_t>> checks[] = {
        {"lstep_begin", {meta_->lstep_begin, lsteps.begin}},
        {"lstep_end", {meta_->lstep_end, lsteps.end}},
        {"gstep_begin", {meta_->gstep_begin, gsteps.begin}},
        {"gstep_end", {meta_->gstep_end, gsteps.end}},
        {"timestamp_begin", {meta_->timestamp_begin, timestamps.begin}},
        {"timestamp_end", {meta_->timestamp_end, timestamps.end}},
    };
    for (const auto& [field, values] : checks) {
      if (crc_ok && values.first != values.second) {
        problem(0, absl::StrCat("the Meta says ", field, " ", values.first, ", the records say ",
                                values.second));
      }
    }
    if (bytes_.size() > covered) {
      report.unverified_tail_bytes = bytes_.size() - covered;
      if (meta_->closed_cleanly) {
        problem(covered, absl::StrCat(report.unverified_tail_bytes,
                                      " bytes follow the end of a cleanly closed file"));
      }
    }
  }
  if (const absl::Status cut = CheckNotCut(); !cut.ok()) {
    report.problems.push_back(std::string(cut.message()));
  }
  report.ok = report.problems.empty();
  return report;
}

}  // namespace xdl_trace
