// RepairUtf8Strings: see utf8_repair.h.
#include "analysis/utf8_repair.h"

#include <google/protobuf/descriptor.h>

#include <string>
#include <utility>

#include "core/wire.h"
#include "core/wire_reader.h"

namespace xdl_trace {
namespace internal {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of the well-formed UTF-8 sequence at text[i], or 0 when none starts there.
size_t SequenceAt(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // The range of the second byte.
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // Overlong.
    if (c == 0xED) hi = 0x9F;  // Surrogates.
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // Overlong.
    if (c == 0xF4) hi = 0x8F;  // Past U+10FFFF.
  } else {
    return 0;
  }
  if (text.size() - i < n) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

void AppendField(uint32_t number, absl::string_view payload, std::string* out) {
  AppendTag(number, kWireLengthDelimited, out);
  AppendVarint(payload.size(), out);
  out->append(payload.data(), payload.size());
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceAt(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ReplaceInvalidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    const size_t n = SequenceAt(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

namespace {

// The string fields of `message` (nested ones included) that are not UTF-8; copies nothing.
int64_t CountInvalid(const google::protobuf::Descriptor& type, absl::string_view message) {
  using google::protobuf::FieldDescriptor;
  int64_t bad = 0;
  WireReader reader(message);
  WireField field;
  while (reader.Next(&field)) {
    if (field.wire_type != kWireLengthDelimited) continue;
    const FieldDescriptor* descriptor = type.FindFieldByNumber(static_cast<int>(field.number));
    if (descriptor == nullptr) continue;
    if (descriptor->type() == FieldDescriptor::TYPE_STRING) {
      bad += IsValidUtf8(field.payload) ? 0 : 1;
    } else if (descriptor->type() == FieldDescriptor::TYPE_MESSAGE) {
      bad += CountInvalid(*descriptor->message_type(), field.payload);
    }
  }
  return bad;
}

}  // namespace

int64_t RepairUtf8Strings(const google::protobuf::Descriptor& type, absl::string_view message,
                          std::string* repaired) {
  using google::protobuf::FieldDescriptor;
  // Counted first: a message that is fine (the common case) is not copied.
  const int64_t bad = CountInvalid(type, message);
  if (bad == 0) return 0;
  // Then copied, re-encoding the fields that change.
  std::string out;
  out.reserve(message.size() + 16);
  WireReader reader(message);
  WireField field;
  size_t copied = 0;  // Bytes of `message` already accounted for.
  while (reader.Next(&field)) {
    const size_t end = static_cast<size_t>(reader.position());
    const FieldDescriptor* descriptor = field.wire_type == kWireLengthDelimited
                                            ? type.FindFieldByNumber(static_cast<int>(field.number))
                                            : nullptr;
    std::string replacement;
    bool changed = false;
    if (descriptor != nullptr && descriptor->type() == FieldDescriptor::TYPE_STRING &&
        !IsValidUtf8(field.payload)) {
      replacement = ReplaceInvalidUtf8(field.payload);
      changed = true;
    } else if (descriptor != nullptr && descriptor->type() == FieldDescriptor::TYPE_MESSAGE) {
      changed = RepairUtf8Strings(*descriptor->message_type(), field.payload, &replacement) > 0;
    }
    if (changed) {
      out.append(message.data() + copied, end - field.encoded.size() - copied);
      AppendField(field.number, replacement, &out);
      copied = end;
    }
  }
  out.append(message.data() + copied, message.size() - copied);
  *repaired = std::move(out);
  return bad;
}

}  // namespace internal
}  // namespace xdl_trace
