// Element sizes and names of the wire dtypes.
#include "xdl_trace/dtype.h"

namespace xdl_trace {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
    case DType::kBool:
    case DType::kByte:
    case DType::kUInt8:
      return 1;
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt32:
    case DType::kUInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kUInt64:
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kBool:
      return "bool";
    case DType::kByte:
      return "byte";
    case DType::kUInt8:
      return "uint8";
    case DType::kUInt16:
      return "uint16";
    case DType::kUInt32:
      return "uint32";
    case DType::kUInt64:
      return "uint64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "invalid";
}

}  // namespace xdl_trace
