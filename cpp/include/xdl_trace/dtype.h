// Element types a traced column can hold; values match xdl.proto.Type on the wire.
#ifndef XDL_TRACE_DTYPE_H_
#define XDL_TRACE_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace xdl_trace {

// Numbering is the wire format: 0..7 are XDL's, 8.. are additive.
enum class DType : int32_t {
  kInt8 = 0,
  kInt16 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat32 = 4,
  kFloat64 = 5,
  kBool = 6,
  kByte = 7,
  kUInt8 = 8,
  kUInt16 = 9,
  kUInt32 = 10,
  kUInt64 = 11,
  kFloat16 = 12,
  kBFloat16 = 13,
};

inline constexpr int32_t kNumDTypes = 14;

// True when `value` names one of the enumerators above.
constexpr bool IsValidDType(int32_t value) { return value >= 0 && value < kNumDTypes; }

// How a dtype's elements are read as numbers (the built-in summaries): with its size, this is
// all the summaries need, so a dtype of a known kind needs no code of its own. kOpaque: no
// built-in summary (a stats or histogram of it is refused, naming the dtype).
enum class DTypeKind { kInt, kUInt, kFloat, kBool, kBFloat16, kOpaque };

// One row of the dtype table: the only place a dtype's properties are written
// down (cpp/src/core/dtype.cc, checked against xdl.proto.Type at compile time).
// The Python binding exports it as xdl_trace._core.dtype_table().
struct DTypeInfo {
  DType dtype;
  const char* name;        // Wire name, lower case: "float32", "byte", "bfloat16".
  size_t size;             // Bytes per element.
  const char* numpy_name;  // numpy dtype the reader returns ("uint16" for bfloat16 bits).
  DTypeKind kind;          // With size, how a summary reads an element (float16: kFloat, 2).
};

// The row of a valid dtype (IsValidDType); iterate 0..kNumDTypes-1 for all.
const DTypeInfo& GetDTypeInfo(DType dtype);

// Bytes per element; 0 for an invalid value.
size_t DTypeSize(DType dtype);

// Lower-case name as numpy spells it ("float32", "bool", "bfloat16"; "byte"
// for kByte, which numpy reads as uint8). "invalid" for an invalid value.
absl::string_view DTypeName(DType dtype);

}  // namespace xdl_trace

#endif  // XDL_TRACE_DTYPE_H_
