// Protobuf wire encoding of Header and Record frames: sizes first, then one exact buffer.
#include "record/record_encoder.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace xdl_trace {
namespace internal {
namespace {

// Wire tags: (field_number << 3) | wire_type; 0 = varint, 2 = length-delimited.
constexpr char kTagHeaderKey = 0x0A;     // Header.key = 1, bytes.
constexpr char kTagRecordGstep = 0x08;   // Record.gstep = 1, varint.
constexpr char kTagRecordLstep = 0x10;   // Record.lstep = 2, varint.
constexpr char kTagRecordColumn = 0x1A;  // Record.column = 3, message.
constexpr char kTagRecordTime = 0x20;    // Record.timestamp = 4, varint.
constexpr char kTagColumnDtype = 0x08;   // Column.dtype = 1, varint (enum).
constexpr char kTagColumnShape = 0x12;   // Column.shape = 2, packed int32.
constexpr char kTagColumnData = 0x1A;    // Column.data = 3, bytes.

constexpr int kMaxVarintBytes = 10;

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// int32 and int64 fields are varints of the value sign-extended to 64 bits
// (a negative value takes 10 bytes), exactly as protobuf writes them.
uint64_t SignExtend(int64_t v) { return static_cast<uint64_t>(v); }

// Appends the varint of `v` to `out` (capacity already reserved).
void AppendVarint(uint64_t v, std::string* out) {
  char buf[kMaxVarintBytes];
  int n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out->append(buf, n);
}

size_t VarintFieldSize(int64_t v) { return v == 0 ? 0 : 1 + VarintSize(SignExtend(v)); }

void AppendLittleEndian32(uint32_t v, std::string* out) {
  const char bytes[4] = {static_cast<char>(v), static_cast<char>(v >> 8),
                         static_cast<char>(v >> 16), static_cast<char>(v >> 24)};
  out->append(bytes, 4);
}

// Stages the small framing bytes (tags, lengths, dims) on the stack and
// appends them in one call, so a column costs two appends: framing, data.
class Stager {
 public:
  explicit Stager(std::string* out) : out_(out) {}
  ~Stager() { Flush(); }
  void Put(char c) {
    Reserve(1);
    buf_[n_++] = c;
  }
  void PutVarint(uint64_t v) {
    Reserve(kMaxVarintBytes);
    while (v >= 0x80) {
      buf_[n_++] = static_cast<char>((v & 0x7F) | 0x80);
      v >>= 7;
    }
    buf_[n_++] = static_cast<char>(v);
  }
  void PutVarintField(char tag, int64_t v) {
    if (v == 0) return;
    Put(tag);
    PutVarint(SignExtend(v));
  }
  void Flush() {
    out_->append(buf_, n_);
    n_ = 0;
  }

 private:
  void Reserve(int bytes) {
    if (n_ + bytes > static_cast<int>(sizeof(buf_))) Flush();
  }
  std::string* const out_;
  char buf_[256];
  int n_ = 0;
};

std::string ColumnName(absl::Span<const std::string> keys, size_t i) {
  if (i < keys.size()) return absl::StrCat("'", keys[i], "'");
  return absl::StrCat("column ", i);
}

// Sizes of one Column message, computed before anything is written.
struct ColumnLayout {
  uint64_t data_bytes = 0;
  uint64_t shape_payload = 0;  // Bytes of the packed shape values.
  uint64_t body = 0;           // Serialized Column size.
};

absl::StatusOr<ColumnLayout> LayOutColumn(const TensorView& view,
                                          absl::Span<const std::string> keys, size_t i) {
  ColumnLayout layout;
  const int32_t dtype = static_cast<int32_t>(view.dtype);
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(ColumnName(keys, i), ": invalid dtype ", dtype));
  }
  // Element count, saturated above the frame limit so huge shapes cannot overflow.
  uint64_t elements = 1;
  bool has_zero = false;
  bool too_large = false;
  for (int64_t dim : view.shape) {
    if (dim < 0 || dim > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(ColumnName(keys, i), ": dimension ", dim,
                                                     " does not fit a non-negative int32"));
    }
    layout.shape_payload += VarintSize(static_cast<uint64_t>(dim));
    if (dim == 0) {
      has_zero = true;
    } else if (elements > kMaxFrameBytes / static_cast<uint64_t>(dim)) {
      too_large = true;
    } else {
      elements *= static_cast<uint64_t>(dim);
    }
  }
  const uint64_t size = DTypeSize(view.dtype);
  if (has_zero) {
    too_large = false;
  } else if (!too_large && elements > kMaxFrameBytes / size) {
    too_large = true;
  } else if (!too_large) {
    layout.data_bytes = elements * size;
  }
  if (too_large) {
    return absl::InvalidArgumentError(absl::StrCat(ColumnName(keys, i), ": tensor of more than ",
                                                   kMaxFrameBytes,
                                                   " bytes exceeds the 4 GiB record frame limit"));
  }
  if (layout.data_bytes > 0 && view.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(ColumnName(keys, i), ": null data for ", layout.data_bytes, " bytes"));
  }
  layout.body = VarintFieldSize(dtype);
  if (layout.shape_payload > 0) {
    layout.body += 1 + VarintSize(layout.shape_payload) + layout.shape_payload;
  }
  if (layout.data_bytes > 0) {
    layout.body += 1 + VarintSize(layout.data_bytes) + layout.data_bytes;
  }
  return layout;
}

}  // namespace

absl::StatusOr<EncodedRecord> EncodeRecord(int64_t gstep, int64_t lstep, int64_t timestamp_ms,
                                           absl::Span<const TensorView> columns,
                                           absl::Span<const std::string> keys,
                                           absl::string_view trailing_fields) {
  return EncodeRecord(gstep, lstep, timestamp_ms, columns, keys, trailing_fields,
                      [](size_t) { return std::string(); });
}

absl::StatusOr<EncodedRecord> EncodeRecord(int64_t gstep, int64_t lstep, int64_t timestamp_ms,
                                           absl::Span<const TensorView> columns,
                                           absl::Span<const std::string> keys,
                                           absl::string_view trailing_fields,
                                           FrameBufferSource buffer_source) {
  // Pass 1: sizes. Column bodies are small structs, kept on the stack for
  // typical records so this pass does not allocate.
  absl::InlinedVector<ColumnLayout, 32> layouts;
  layouts.reserve(columns.size());
  uint64_t body = VarintFieldSize(gstep) + VarintFieldSize(lstep) + VarintFieldSize(timestamp_ms) +
                  trailing_fields.size();
  for (size_t i = 0; i < columns.size(); ++i) {
    absl::StatusOr<ColumnLayout> layout = LayOutColumn(columns[i], keys, i);
    if (!layout.ok()) return layout.status();
    body += 1 + VarintSize(layout->body) + layout->body;
    if (body > kMaxFrameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(ColumnName(keys, i), ": record of more than ", kMaxFrameBytes,
                       " bytes exceeds the 4 GiB record frame limit"));
    }
    layouts.push_back(*layout);
  }

  // Pass 2: one buffer of at least the exact size; append() copies each
  // tensor's bytes once, straight from its memory (reserve + append never
  // zero-fills). A recycled buffer is already faulted in and large enough.
  EncodedRecord record;
  record.gstep = gstep;
  record.lstep = lstep;
  record.timestamp_ms = timestamp_ms;
  std::string& out = record.frame;
  out = buffer_source(static_cast<size_t>(4 + body));
  out.clear();
  out.reserve(4 + body);
  AppendLittleEndian32(static_cast<uint32_t>(body), &out);
  {
    Stager stage(&out);
    stage.PutVarintField(kTagRecordGstep, gstep);
    stage.PutVarintField(kTagRecordLstep, lstep);
    for (size_t i = 0; i < columns.size(); ++i) {
      const TensorView& view = columns[i];
      const ColumnLayout& layout = layouts[i];
      stage.Put(kTagRecordColumn);
      stage.PutVarint(layout.body);
      stage.PutVarintField(kTagColumnDtype, static_cast<int32_t>(view.dtype));
      if (layout.shape_payload > 0) {
        stage.Put(kTagColumnShape);
        stage.PutVarint(layout.shape_payload);
        for (int64_t dim : view.shape) stage.PutVarint(static_cast<uint64_t>(dim));
      }
      if (layout.data_bytes > 0) {
        stage.Put(kTagColumnData);
        stage.PutVarint(layout.data_bytes);
        stage.Flush();
        out.append(static_cast<const char*>(view.data), layout.data_bytes);
      }
    }
    stage.PutVarintField(kTagRecordTime, timestamp_ms);
  }
  out.append(trailing_fields.data(), trailing_fields.size());
  return record;
}

std::string EncodeHeaderFrame(absl::Span<const std::string> keys) {
  uint64_t body = 0;
  for (const std::string& key : keys) body += 1 + VarintSize(key.size()) + key.size();
  std::string out;
  out.reserve(4 + body);
  AppendLittleEndian32(static_cast<uint32_t>(body), &out);
  for (const std::string& key : keys) {
    out.push_back(kTagHeaderKey);
    AppendVarint(key.size(), &out);
    out.append(key);
  }
  return out;
}

}  // namespace internal
}  // namespace xdl_trace
