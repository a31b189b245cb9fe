// Protobuf wire encoding of Record frames: sizes first, then one exact buffer.
#include "record/record_encoder.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using xdl::proto::Column;
using xdl::proto::Record;

// Field numbers from the generated code: the .proto is their one source.
constexpr uint32_t kRecordGstep = Record::kGstepFieldNumber;
constexpr uint32_t kRecordLstep = Record::kLstepFieldNumber;
constexpr uint32_t kRecordColumn = Record::kColumnFieldNumber;
constexpr uint32_t kRecordTimestamp = Record::kTimestampFieldNumber;
constexpr uint32_t kRecordCrc = Record::kCrc32CFieldNumber;
static_assert(TagSize(kRecordCrc) + 4 == kRecordCrcBytes, "Record.crc32c: a 2-byte tag");
constexpr uint32_t kColumnDtype = Column::kDtypeFieldNumber;
constexpr uint32_t kColumnShape = Column::kShapeFieldNumber;
constexpr uint32_t kColumnData = Column::kDataFieldNumber;

// Size of an int64/int32/enum field as proto3 writes it (nothing when 0).
size_t IntFieldSize(uint32_t field, int64_t v) { return VarintFieldSize(field, SignExtend(v)); }

// Stages the small framing bytes (tags, lengths, dims) on the stack and
// appends them in one call, so a column costs two appends: framing, data.
class Stager {
 public:
  explicit Stager(std::string* out) : out_(out) {}
  ~Stager() { Flush(); }
  void PutTag(uint32_t field, WireType type) { PutVarint(Tag(field, type)); }
  void PutVarint(uint64_t v) {
    Reserve(kMaxVarintBytes);
    n_ = static_cast<int>(WriteVarint(v, buf_ + n_) - buf_);
  }
  // An int64/int32/enum field as proto3 writes it: nothing when 0.
  void PutIntField(uint32_t field, int64_t v) {
    if (v == 0) return;
    PutTag(field, kWireVarint);
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
                                          absl::Span<const std::string> keys, size_t i,
                                          bool deferred) {
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
  if (layout.data_bytes > 0 && view.data == nullptr && !deferred) {
    return absl::InvalidArgumentError(
        absl::StrCat(ColumnName(keys, i), ": null data for ", layout.data_bytes, " bytes"));
  }
  layout.body = IntFieldSize(kColumnDtype, dtype);
  if (layout.shape_payload > 0) {
    layout.body += LengthDelimitedFieldSize(kColumnShape, layout.shape_payload);
  }
  if (layout.data_bytes > 0) {
    layout.body += LengthDelimitedFieldSize(kColumnData, layout.data_bytes);
  }
  return layout;
}

// The index of `bytes` in record->deferred, added if new (a step's columns
// share one or a few).
size_t DeferredIndex(EncodedRecord* record, const std::shared_ptr<DeferredBytes>& bytes) {
  for (size_t k = 0; k < record->deferred.size(); ++k) {
    if (record->deferred[k] == bytes) return k;
  }
  record->deferred.push_back(bytes);
  return record->deferred.size() - 1;
}

}  // namespace

absl::Status ResolveDeferred(EncodedRecord* record, std::chrono::steady_clock::duration timeout,
                             const std::atomic<bool>* abandon) {
  absl::InlinedVector<const char*, 2> bases;
  for (const std::shared_ptr<DeferredBytes>& bytes : record->deferred) {
    absl::StatusOr<const char*> base = bytes->Wait(timeout, abandon);
    if (!base.ok()) return base.status();
    bases.push_back(*base);
  }
  for (FramePiece& piece : record->pieces) {
    if (piece.deferred >= 0)
      piece.external = bases[static_cast<size_t>(piece.deferred)] + piece.offset;
  }
  return absl::OkStatus();
}

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
                                           FrameBufferSource buffer_source,
                                           const EncodeOptions& options) {
  // Pass 1: sizes. Column bodies are small structs, kept on the stack for
  // typical records so this pass does not allocate.
  absl::InlinedVector<ColumnLayout, 32> layouts;
  layouts.reserve(columns.size());
  uint64_t body = IntFieldSize(kRecordGstep, gstep) + IntFieldSize(kRecordLstep, lstep) +
                  IntFieldSize(kRecordTimestamp, timestamp_ms) + trailing_fields.size() +
                  kRecordCrcBytes;
  uint64_t referenced = 0;  // Column data left in place, or deferred.
  const auto deferred_source = [&](size_t i) -> const DeferredSource* {
    return i < options.deferred.size() && options.deferred[i].bytes != nullptr
               ? &options.deferred[i]
               : nullptr;
  };
  if (options.moved_fields != nullptr) {
    for (const std::string& payload : *options.moved_fields) {
      body += LengthDelimitedFieldSize(options.moved_field_number, payload.size());
      referenced += payload.size();
    }
    if (body > kMaxFrameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "record of more than ", kMaxFrameBytes, " bytes exceeds the 4 GiB record frame limit"));
    }
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    XDL_ASSIGN_OR_RETURN(const ColumnLayout layout,
                         LayOutColumn(columns[i], keys, i, deferred_source(i) != nullptr));
    body += LengthDelimitedFieldSize(kRecordColumn, layout.body);
    if (body > kMaxFrameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(ColumnName(keys, i), ": record of more than ", kMaxFrameBytes,
                       " bytes exceeds the 4 GiB record frame limit"));
    }
    if (layout.data_bytes > 0 &&
        (layout.data_bytes >= options.reference_min_bytes || deferred_source(i) != nullptr)) {
      referenced += layout.data_bytes;
    }
    layouts.push_back(layout);
  }

  // Pass 2: one buffer of at least the exact size; append() copies each
  // tensor's bytes once, straight from its memory (reserve + append never
  // zero-fills). A recycled buffer is already faulted in and large enough.
  // Referenced data becomes a piece between two runs of owned bytes.
  EncodedRecord record;
  record.gstep = gstep;
  record.lstep = lstep;
  record.timestamp_ms = timestamp_ms;
  record.external_bytes = static_cast<size_t>(referenced);
  std::string& out = record.frame;
  const size_t owned_bytes = static_cast<size_t>(kFrameLengthBytes + body - referenced);
  out = buffer_source(owned_bytes);
  out.clear();
  out.reserve(owned_bytes);
  size_t owned_begin = 0;  // Start of the owned run not yet in record.pieces.
  AppendFixed32(static_cast<uint32_t>(body), &out);  // The frame's length prefix.
  {
    Stager stage(&out);
    stage.PutIntField(kRecordGstep, gstep);
    stage.PutIntField(kRecordLstep, lstep);
    for (size_t i = 0; i < columns.size(); ++i) {
      const TensorView& view = columns[i];
      const ColumnLayout& layout = layouts[i];
      stage.PutTag(kRecordColumn, kWireLengthDelimited);
      stage.PutVarint(layout.body);
      stage.PutIntField(kColumnDtype, static_cast<int32_t>(view.dtype));
      if (layout.shape_payload > 0) {
        stage.PutTag(kColumnShape, kWireLengthDelimited);
        stage.PutVarint(layout.shape_payload);
        for (int64_t dim : view.shape) stage.PutVarint(static_cast<uint64_t>(dim));
      }
      if (layout.data_bytes > 0) {
        stage.PutTag(kColumnData, kWireLengthDelimited);
        stage.PutVarint(layout.data_bytes);
        stage.Flush();
        const char* data = static_cast<const char*>(view.data);
        const size_t n = static_cast<size_t>(layout.data_bytes);
        if (const DeferredSource* source = deferred_source(i)) {
          record.pieces.push_back({nullptr, owned_begin, out.size() - owned_begin});
          FramePiece piece{nullptr, source->offset, n};
          piece.deferred = static_cast<int32_t>(DeferredIndex(&record, source->bytes));
          record.pieces.push_back(piece);
          owned_begin = out.size();
        } else if (layout.data_bytes >= options.reference_min_bytes) {
          record.pieces.push_back({nullptr, owned_begin, out.size() - owned_begin});
          record.pieces.push_back({data, 0, n});
          owned_begin = out.size();
        } else {
          out.append(data, n);
        }
      }
    }
    stage.PutIntField(kRecordTimestamp, timestamp_ms);
    if (options.moved_fields != nullptr) {
      record.owned = std::move(*options.moved_fields);
      options.moved_fields->clear();
      for (const std::string& payload : record.owned) {
        stage.PutTag(options.moved_field_number, kWireLengthDelimited);
        stage.PutVarint(payload.size());
        stage.Flush();
        record.pieces.push_back({nullptr, owned_begin, out.size() - owned_begin});
        record.pieces.push_back({payload.data(), 0, payload.size()});
        owned_begin = out.size();
      }
    }
  }
  out.append(trailing_fields.data(), trailing_fields.size());
  // Record.crc32c, last: of the bytes before it. Its value is the IO thread's to
  // compute (SealFrame), off the training thread (docs/writer.md) and once every
  // piece is in host memory.
  record.crc_at_write = true;
  AppendTag(kRecordCrc, kWireFixed32, &out);
  AppendFixed32(0, &out);
  if (!record.pieces.empty() && out.size() > owned_begin) {
    record.pieces.push_back({nullptr, owned_begin, out.size() - owned_begin});
  }
  return record;
}

}  // namespace internal
}  // namespace xdl_trace
