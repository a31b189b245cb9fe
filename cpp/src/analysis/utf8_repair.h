// Strings of a protobuf message that are not UTF-8, replaced before the message is parsed: a
// proto3 `string` field holding other bytes makes protobuf refuse the whole message, and a device
// tracer plugin may send such a name (a kernel name is whatever bytes the compiler emitted).
#ifndef XDL_TRACE_ANALYSIS_UTF8_REPAIR_H_
#define XDL_TRACE_ANALYSIS_UTF8_REPAIR_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace google {
namespace protobuf {
class Descriptor;
}  // namespace protobuf
}  // namespace google

namespace xdl_trace {
namespace internal {

// Whether `text` is well-formed UTF-8 (no overlong form, surrogate or code point past U+10FFFF):
// what protobuf checks in a proto3 string.
bool IsValidUtf8(absl::string_view text);

// `text` with every byte that does not start a well-formed UTF-8 sequence replaced by U+FFFD.
std::string ReplaceInvalidUtf8(absl::string_view text);

// Walks the serialized `message` of `type` (nested messages included, by the descriptor: no
// field number is spelled here) and counts its string fields that are not UTF-8. With none,
// returns 0 and leaves *repaired alone; otherwise writes into *repaired the message with those
// strings passed through ReplaceInvalidUtf8 (every other byte as it was) and returns their count.
// Bytes that do not decode as fields are left for the parser to refuse.
int64_t RepairUtf8Strings(const google::protobuf::Descriptor& type, absl::string_view message,
                          std::string* repaired);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_UTF8_REPAIR_H_
