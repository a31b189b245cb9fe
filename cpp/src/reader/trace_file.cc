// One mmap'd data file: Header parsing, zero-copy Record decoding, torn-tail detection, Meta
// verification.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "io/crc32c.h"
#include "reader/wire_decoder.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader.h"

namespace xdl_trace {
namespace {

using internal::WireField;
using internal::WireReader;

constexpr uint64_t kPrefixBytes = 4;

uint32_t LoadLength(const char* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
         (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

absl::Status Corrupt(const std::string& path, uint64_t offset, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": corrupt at byte offset ", offset, ": ", what));
}

// Decodes a Column message at file offset `base`.
absl::Status DecodeColumn(const std::string& path, uint64_t base, absl::string_view message,
                          ColumnView* column) {
  column->dtype = DType::kInt8;  // The proto3 default (Type 0).
  column->shape.clear();
  column->data = absl::string_view();
  WireReader reader(message);
  WireField field;
  while (reader.Next(&field)) {
    const uint64_t at = base + static_cast<uint64_t>(field.encoded.data() - message.data());
    switch (field.number) {
      case 1: {
        if (field.wire_type != internal::kWireVarint)
          return Corrupt(path, at, "Column.dtype is not a varint");
        const auto value = static_cast<int64_t>(field.varint);
        if (!IsValidDType(static_cast<int32_t>(value)) || value != static_cast<int32_t>(value)) {
          return Corrupt(path, at, absl::StrCat("invalid dtype ", value));
        }
        column->dtype = static_cast<DType>(value);
        break;
      }
      case 2: {
        auto add_dim = [&](uint64_t raw) -> absl::Status {
          const auto dim = static_cast<int32_t>(raw);  // int32 wire semantics: truncate.
          if (dim < 0) return Corrupt(path, at, absl::StrCat("negative dimension ", dim));
          column->shape.push_back(dim);
          return absl::OkStatus();
        };
        if (field.wire_type == internal::kWireVarint) {
          if (auto s = add_dim(field.varint); !s.ok()) return s;
        } else if (field.wire_type == internal::kWireLengthDelimited) {  // Packed.
          const char* p = field.payload.data();
          const char* end = p + field.payload.size();
          while (p < end) {
            uint64_t raw;
            if (!WireReader::ReadVarint(&p, end, &raw)) {
              return Corrupt(path, at, "bad varint in packed Column.shape");
            }
            if (auto s = add_dim(raw); !s.ok()) return s;
          }
        } else {
          return Corrupt(path, at, "Column.shape has a wrong wire type");
        }
        break;
      }
      case 3:
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
  if (!column->empty()) {
    const int64_t elements = column->NumElements();
    const uint64_t expected = static_cast<uint64_t>(elements) * DTypeSize(column->dtype);
    if (elements < 0 || expected != column->data.size()) {
      return Corrupt(
          path, base,
          absl::StrCat("column data has ", column->data.size(), " bytes but its shape and ",
                       DTypeName(column->dtype), " dtype need ", expected));
    }
  }
  return absl::OkStatus();
}

// Decodes a Record message at file offset `base` (the body, after the prefix).
absl::Status DecodeRecord(const std::string& path, uint64_t base, absl::string_view message,
                          size_t expected_columns, RecordView* record) {
  record->gstep = record->lstep = record->timestamp_ms = 0;
  record->extra_fields.clear();
  size_t column_count = 0;
  WireReader reader(message);
  WireField field;
  while (reader.Next(&field)) {
    const uint64_t at = base + static_cast<uint64_t>(field.encoded.data() - message.data());
    const bool is_varint = field.wire_type == internal::kWireVarint;
    switch (field.number) {
      case 1:
      case 2:
      case 4: {
        if (!is_varint)
          return Corrupt(path, at, absl::StrCat("Record field ", field.number, " is not a varint"));
        const auto value = static_cast<int64_t>(field.varint);
        if (field.number == 1) record->gstep = value;
        if (field.number == 2) record->lstep = value;
        if (field.number == 4) record->timestamp_ms = value;
        break;
      }
      case 3: {
        if (field.wire_type != internal::kWireLengthDelimited) {
          return Corrupt(path, at, "Record.column is not length-delimited");
        }
        if (column_count == record->columns.size()) record->columns.emplace_back();
        const uint64_t column_base =
            base + static_cast<uint64_t>(field.payload.data() - message.data());
        if (auto s = DecodeColumn(path, column_base, field.payload, &record->columns[column_count]);
            !s.ok()) {
          return s;
        }
        ++column_count;
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
  if (column_count != expected_columns && !IsDeviceOnlyRecord(*record, expected_columns)) {
    return Corrupt(path, base - kPrefixBytes,
                   absl::StrCat("record has ", column_count, " columns but the header has ",
                                expected_columns, " keys"));
  }
  return absl::OkStatus();
}

FileMeta FromProto(const xdl::proto::Meta& m, absl::string_view serialized) {
  FileMeta meta;
  meta.gstep_begin = m.gstep_begin();
  meta.gstep_end = m.gstep_end();
  meta.record_count = m.record_count();
  meta.data_bytes = m.data_bytes();
  meta.crc32c = m.crc32c();
  meta.format_version = m.format_version();
  meta.closed_cleanly = m.closed_cleanly();
  meta.serialized = std::string(serialized);
  return meta;
}

}  // namespace

int64_t ColumnView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return empty() ? 0 : n;
}

absl::StatusOr<FileMeta> ParseFileMeta(absl::string_view bytes) {
  xdl::proto::Meta meta;
  if (!meta.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("not a serialized Meta");
  }
  return FromProto(meta, bytes);
}

absl::StatusOr<FileMeta> ReadFileMeta(const std::string& meta_path) {
  std::ifstream in(meta_path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(meta_path, ": no such file"));
    return absl::UnavailableError(absl::StrCat(meta_path, ": ", std::strerror(errno)));
  }
  std::stringstream content;
  content << in.rdbuf();
  auto meta = ParseFileMeta(content.str());
  if (!meta.ok()) return absl::DataLossError(absl::StrCat(meta_path, ": not a serialized Meta"));
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

bool RecordCursor::Next(RecordView* record) {
  if (done_ || offset_ >= file_->size()) {
    done_ = true;
    return false;
  }
  bool torn = false;
  status_ = file_->ReadFrame(offset_, record, &torn);
  if (!status_.ok() || torn) {
    done_ = true;
    if (torn) {
      torn_tail_ = true;
      torn_offset_ = offset_;
    }
    return false;
  }
  offset_ += record->frame_size;
  return true;
}

// --- TraceFile --------------------------------------------------------------

TraceFile::TraceFile(std::string path, const char* mapping, size_t size)
    : path_(std::move(path)), mapping_(mapping), bytes_(mapping, size) {}

TraceFile::~TraceFile() {
  if (mapping_ != nullptr) munmap(const_cast<char*>(mapping_), bytes_.size());
}

absl::StatusOr<std::shared_ptr<TraceFile>> TraceFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat(path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    if (err == EACCES) return absl::PermissionDeniedError(message);
    return absl::UnavailableError(message);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
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
  ::close(fd);
  std::shared_ptr<TraceFile> file(new TraceFile(path, mapping, size));

  // Header frame.
  if (size < kPrefixBytes || LoadLength(mapping) > size - kPrefixBytes) {
    file->header_torn_ = true;
    file->first_record_offset_ = size;
  } else {
    const uint32_t length = LoadLength(mapping);
    absl::string_view body(mapping + kPrefixBytes, length);
    WireReader reader(body);
    WireField field;
    while (reader.Next(&field)) {
      if (field.number != 1) continue;
      if (field.wire_type != internal::kWireLengthDelimited) {
        return Corrupt(path, kPrefixBytes + (field.encoded.data() - body.data()),
                       "Header.key is not length-delimited");
      }
      file->keys_.emplace_back(field.payload);
    }
    if (reader.error() != nullptr) {
      return Corrupt(path, kPrefixBytes + reader.error_offset(),
                     absl::StrCat(reader.error(), " (in the Header frame)"));
    }
    file->first_record_offset_ = kPrefixBytes + length;
  }

  auto meta = ReadFileMeta(path + ".meta");
  if (meta.ok()) {
    file->meta_ = *std::move(meta);
  } else {
    file->meta_error_ = meta.status();
  }
  return file;
}

absl::Status TraceFile::ReadFrame(uint64_t offset, RecordView* record, bool* torn) const {
  *torn = false;
  const uint64_t size = bytes_.size();
  // The Meta vouches for every byte below data_bytes: a frame cut short there
  // is corruption, not a crash mid-write.
  const bool vouched = meta_.has_value() && static_cast<uint64_t>(meta_->data_bytes) > offset;
  if (offset > size) return Corrupt(path_, offset, "offset past the end of the file");
  if (size - offset < kPrefixBytes) {
    if (vouched) {
      return Corrupt(path_, offset,
                     absl::StrCat("length prefix cut short but the Meta covers ", meta_->data_bytes,
                                  " bytes"));
    }
    *torn = true;
    return absl::OkStatus();
  }
  const uint64_t length = LoadLength(bytes_.data() + offset);
  if (length > size - offset - kPrefixBytes) {
    if (vouched) {
      return Corrupt(
          path_, offset,
          absl::StrCat("frame length ", length, " runs past the end of the file (", size,
                       " bytes) inside the ", meta_->data_bytes, " bytes the Meta covers"));
    }
    *torn = true;
    return absl::OkStatus();
  }
  record->offset = offset;
  record->frame_size = kPrefixBytes + length;
  return DecodeRecord(path_, offset + kPrefixBytes, bytes_.substr(offset + kPrefixBytes, length),
                      keys_.size(), record);
}

VerifyReport TraceFile::Verify() const {
  VerifyReport report;
  report.file_bytes = bytes_.size();
  report.has_meta = meta_.has_value();
  auto problem = [&](uint64_t offset, absl::string_view what) {
    report.problems.push_back(absl::StrCat(path_, ": at byte offset ", offset, ": ", what));
  };
  if (!report.has_meta) {
    report.problems.push_back(absl::StrCat(path_, ": cannot verify: ", meta_error_.message()));
  }
  const uint64_t covered =
      report.has_meta ? static_cast<uint64_t>(std::max<int64_t>(meta_->data_bytes, 0)) : 0;
  if (report.has_meta) {
    report.meta_data_bytes = covered;
    report.meta_record_count = meta_->record_count;
    report.crc_expected = meta_->crc32c;
    if (meta_->format_version == 0) {
      report.problems.push_back(
          absl::StrCat(path_, ": cannot verify: its Meta carries no checksum (format_version 0)"));
    }
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

  // Walk every frame: count those the Meta covers, decode all of them.
  RecordView record;
  uint64_t offset = first_record_offset_;
  bool boundary_ok = covered == 0 || covered == offset;
  while (offset < bytes_.size() && !header_torn_) {
    bool torn = false;
    absl::Status status = ReadFrame(offset, &record, &torn);
    if (!status.ok()) {
      report.problems.push_back(std::string(status.message()));
      break;
    }
    if (torn) {
      report.torn_tail = true;
      break;
    }
    if (offset < covered) ++report.records_counted;
    offset += record.frame_size;
    if (offset == covered) boundary_ok = true;
  }
  if (report.has_meta && covered <= bytes_.size() && !boundary_ok && covered > 0) {
    problem(covered, "the Meta's data_bytes does not fall on a frame boundary");
  }
  if (report.has_meta) {
    if (report.records_counted != meta_->record_count) {
      problem(0, absl::StrCat("the Meta says ", meta_->record_count, " records, the file holds ",
                              report.records_counted, " within its first ", covered, " bytes"));
    }
    if (bytes_.size() > covered) {
      report.unverified_tail_bytes = bytes_.size() - covered;
      if (meta_->closed_cleanly) {
        problem(covered, absl::StrCat(report.unverified_tail_bytes,
                                      " bytes follow the end of a cleanly closed file"));
      }
    }
  }
  report.ok = report.problems.empty();
  return report;
}

}  // namespace xdl_trace
