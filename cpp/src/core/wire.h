// The protobuf wire format in one place: tags, varints, fixed and length-delimited fields, both
// ways.
//
// Std-only, so the CUPTI plugin (a separate shared library that cannot link
// the core or the generated protobuf code) uses it too. Every hand-written
// encoder (record/record_encoder.cc, record/host_spans.cc,
// plugins/cupti/device_trace_serializer.cc) and the core's one field walker
// (core/wire_reader.h) go through these helpers; a tag is written as
// Tag(field, kWireVarint), never as a literal such as 0x1A. Field numbers come
// from the generated kXxxFieldNumber constants where the caller may include
// them, else from core/device_trace_fields.h (checked against them in
// tests/cpp/core/wire_test.cc).
#ifndef XDL_TRACE_CORE_WIRE_H_
#define XDL_TRACE_CORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xdl_trace {
namespace internal {

// The low three bits of a tag. Groups (3, 4) are not supported.
enum WireType : uint32_t {
  kWireVarint = 0,
  kWireFixed64 = 1,
  kWireLengthDelimited = 2,
  kWireFixed32 = 5,
};

// Longest varint: a 64-bit value (a negative int32/int64 takes all 10 bytes).
inline constexpr int kMaxVarintBytes = 10;
// Largest field number protobuf allows (2^29 - 1).
inline constexpr uint32_t kMaxFieldNumber = (1u << 29) - 1;

// The tag of field `field` with wire type `type`: (field << 3) | type.
constexpr uint32_t Tag(uint32_t field, WireType type) { return (field << 3) | type; }

// Bytes of the varint of `value`.
constexpr size_t VarintSize(uint64_t value) {
  // 7 bits a byte, 0 takes one: (floor(log2(value | 1)) * 9 + 73) / 64, as protobuf's
  // VarintSize64, without a loop (device traces size ~15 varints an event).
  const int log2 = 63 - __builtin_clzll(value | 1);
  return static_cast<size_t>((log2 * 9 + 73) / 64);
}

// Bytes of the tag of `field` (any wire type).
constexpr size_t TagSize(uint32_t field) { return VarintSize(Tag(field, kWireVarint)); }

// int32, int64 and enum fields are varints of the value sign-extended to 64
// bits (a negative value takes 10 bytes), exactly as protobuf writes them.
constexpr uint64_t SignExtend(int64_t value) { return static_cast<uint64_t>(value); }

// Writes the varint of `value` at `p` (room for kMaxVarintBytes); returns the
// end of what was written.
inline char* WriteVarint(uint64_t value, char* p) {
  while (value >= 0x80) {
    *p++ = static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  *p++ = static_cast<char>(value);
  return p;
}

inline void AppendVarint(uint64_t value, std::string* out) {
  char buf[kMaxVarintBytes];
  out->append(buf, static_cast<size_t>(WriteVarint(value, buf) - buf));
}

inline void AppendTag(uint32_t field, WireType type, std::string* out) {
  AppendVarint(Tag(field, type), out);
}

inline void AppendFixed32(uint32_t value, std::string* out) {
  const char bytes[4] = {static_cast<char>(value), static_cast<char>(value >> 8),
                         static_cast<char>(value >> 16), static_cast<char>(value >> 24)};
  out->append(bytes, 4);
}

inline void AppendFixed64(uint64_t value, std::string* out) {
  AppendFixed32(static_cast<uint32_t>(value), out);
  AppendFixed32(static_cast<uint32_t>(value >> 32), out);
}

// A varint field as proto3 writes a scalar: nothing when `value` is 0.
inline size_t VarintFieldSize(uint32_t field, uint64_t value) {
  return value == 0 ? 0 : TagSize(field) + VarintSize(value);
}
inline void AppendVarintField(uint32_t field, uint64_t value, std::string* out) {
  if (value == 0) return;
  AppendTag(field, kWireVarint, out);
  AppendVarint(value, out);
}

// A length-delimited field (bytes, string, sub-message, packed repeated):
// tag, length, payload; written even when empty (repeated elements).
inline constexpr size_t LengthDelimitedFieldSize(uint32_t field, uint64_t payload_bytes) {
  return TagSize(field) + VarintSize(payload_bytes) + payload_bytes;
}
inline void AppendLengthDelimitedField(uint32_t field, std::string_view payload, std::string* out) {
  AppendTag(field, kWireLengthDelimited, out);
  AppendVarint(payload.size(), out);
  out->append(payload.data(), payload.size());
}

// Decodes a varint at *p (< end), advancing *p; false when it is cut short or
// longer than kMaxVarintBytes.
inline bool ReadVarint(const char** p, const char* end, uint64_t* value) {
  uint64_t result = 0;
  const char* q = *p;
  for (int shift = 0; shift < 7 * kMaxVarintBytes && q < end; shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(*q++);
    result |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      *value = result;
      *p = q;
      return true;
    }
  }
  return false;
}

// Little-endian fixed-width values at `p` (which must hold 4 or 8 bytes).
inline uint32_t ReadFixed32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
         static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
}
inline uint64_t ReadFixed64(const char* p) {
  return static_cast<uint64_t>(ReadFixed32(p)) | static_cast<uint64_t>(ReadFixed32(p + 4)) << 32;
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_WIRE_H_
