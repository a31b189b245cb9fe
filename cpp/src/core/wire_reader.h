// The one protobuf field walker of the core (reader, analysis, plugin): fields in order, payloads
// never copied; the primitives (WireType, ReadVarint) are core/wire.h's, the writer side.
//
// Not std-only (absl::string_view, the reader's currency): the plugins under cpp/plugins write
// the wire format and never read it.
#ifndef XDL_TRACE_CORE_WIRE_READER_H_
#define XDL_TRACE_CORE_WIRE_READER_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "core/wire.h"

namespace xdl_trace {
namespace internal {

// One decoded field. For varints `varint` holds the value; for every wire type
// `payload` views the value's bytes and `encoded` the tag plus value.
struct WireField {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t varint = 0;
  absl::string_view payload;
  absl::string_view encoded;
};

// Reads the fields of one message in order. On malformed input Next() returns
// false with error() set and error_offset() relative to the message start.
class WireReader {
 public:
  explicit WireReader(absl::string_view message)
      : begin_(message.data()), pos_(message.data()), end_(message.data() + message.size()) {}

  // True with *field filled; false at the end or on error.
  bool Next(WireField* field);

  const char* error() const { return error_; }
  uint64_t error_offset() const { return error_offset_; }
  // Offset of the next unread byte within the message.
  uint64_t position() const { return static_cast<uint64_t>(pos_ - begin_); }

 private:
  bool Fail(const char* what, const char* at);

  const char* begin_;
  const char* pos_;
  const char* end_;
  const char* error_ = nullptr;
  uint64_t error_offset_ = 0;
};

inline bool WireReader::Fail(const char* what, const char* at) {
  error_ = what;
  error_offset_ = static_cast<uint64_t>(at - begin_);
  pos_ = end_;
  return false;
}

inline bool WireReader::Next(WireField* field) {
  if (pos_ >= end_ || error_ != nullptr) return false;
  const char* start = pos_;
  uint64_t tag;
  if (!ReadVarint(&pos_, end_, &tag)) return Fail("bad varint in field tag", start);
  field->number = static_cast<uint32_t>(tag >> 3);
  field->wire_type = static_cast<uint32_t>(tag & 7);
  if (field->number == 0 || (tag >> 3) > kMaxFieldNumber)
    return Fail("invalid field number", start);
  const char* value = pos_;
  switch (field->wire_type) {
    case kWireVarint:
      if (!ReadVarint(&pos_, end_, &field->varint)) return Fail("bad varint", value);
      break;
    case kWireFixed64:
      if (end_ - pos_ < 8) return Fail("fixed64 field overruns its message", start);
      pos_ += 8;
      break;
    case kWireFixed32:
      if (end_ - pos_ < 4) return Fail("fixed32 field overruns its message", start);
      pos_ += 4;
      break;
    case kWireLengthDelimited: {
      uint64_t length;
      if (!ReadVarint(&pos_, end_, &length)) return Fail("bad varint in field length", value);
      if (length > static_cast<uint64_t>(end_ - pos_)) {
        return Fail("length-delimited field overruns its message", start);
      }
      value = pos_;
      pos_ += length;
      break;
    }
    default:
      return Fail("unsupported wire type", start);
  }
  field->payload = absl::string_view(value, static_cast<size_t>(pos_ - value));
  field->encoded = absl::string_view(start, static_cast<size_t>(pos_ - start));
  return true;
}

// Calls visit(field) (returning bool) for every field of `message` in order; false as soon as
// visit returns false or the message does not parse (a walker with nothing to say about where).
template <typename Visit>
bool ForEachWireField(absl::string_view message, Visit visit) {
  WireReader reader(message);
  WireField field;
  while (reader.Next(&field)) {
    if (!visit(field)) return false;
  }
  return reader.error() == nullptr;
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_WIRE_READER_H_
