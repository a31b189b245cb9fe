// The dtype table: name, size and numpy type of each wire dtype, checked against the proto.
#include "xdl_trace/dtype.h"

#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace {

using xdl::proto::Type;
using K = DTypeKind;

struct Row {
  Type wire;
  DTypeInfo info;
};

// Index == wire value; the static_asserts below keep it equal to xdl.proto.Type.
constexpr Row kRows[] = {
    {xdl::proto::Int8, {DType::kInt8, "int8", 1, "int8", K::kInt}},
    {xdl::proto::Int16, {DType::kInt16, "int16", 2, "int16", K::kInt}},
    {xdl::proto::Int32, {DType::kInt32, "int32", 4, "int32", K::kInt}},
    {xdl::proto::Int64, {DType::kInt64, "int64", 8, "int64", K::kInt}},
    {xdl::proto::Float, {DType::kFloat32, "float32", 4, "float32", K::kFloat}},
    {xdl::proto::Double, {DType::kFloat64, "float64", 8, "float64", K::kFloat}},
    {xdl::proto::Bool, {DType::kBool, "bool", 1, "bool", K::kBool}},
    {xdl::proto::Byte, {DType::kByte, "byte", 1, "uint8", K::kUInt}},
    {xdl::proto::UInt8, {DType::kUInt8, "uint8", 1, "uint8", K::kUInt}},
    {xdl::proto::UInt16, {DType::kUInt16, "uint16", 2, "uint16", K::kUInt}},
    {xdl::proto::UInt32, {DType::kUInt32, "uint32", 4, "uint32", K::kUInt}},
    {xdl::proto::UInt64, {DType::kUInt64, "uint64", 8, "uint64", K::kUInt}},
    {xdl::proto::Float16, {DType::kFloat16, "float16", 2, "float16", K::kFloat}},
    {xdl::proto::BFloat16, {DType::kBFloat16, "bfloat16", 2, "uint16", K::kBFloat16}},
};

constexpr bool RowsMatchWire() {
  for (size_t i = 0; i < sizeof(kRows) / sizeof(kRows[0]); ++i) {
    if (static_cast<size_t>(kRows[i].wire) != i) return false;
    if (static_cast<size_t>(kRows[i].info.dtype) != i) return false;
  }
  return true;
}
static_assert(sizeof(kRows) / sizeof(kRows[0]) == kNumDTypes, "one row per DType");
static_assert(kNumDTypes == xdl::proto::Type_ARRAYSIZE, "DType and xdl.proto.Type differ");
static_assert(RowsMatchWire(), "the dtype table is out of wire order");

}  // namespace

const DTypeInfo& GetDTypeInfo(DType dtype) { return kRows[static_cast<size_t>(dtype)].info; }

size_t DTypeSize(DType dtype) {
  return IsValidDType(static_cast<int32_t>(dtype)) ? GetDTypeInfo(dtype).size : 0;
}

absl::string_view DTypeName(DType dtype) {
  return IsValidDType(static_cast<int32_t>(dtype)) ? GetDTypeInfo(dtype).name : "invalid";
}

}  // namespace xdl_trace
