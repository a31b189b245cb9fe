// The record and column views a read hands out: zero-copy views into a file's mapping.
#ifndef XDL_TRACE_READER_RECORD_VIEW_H_
#define XDL_TRACE_READER_RECORD_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "xdl_trace/dtype.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {

// One column of a record. `data` points into the file's mapping: it stays
// valid as long as the TraceFile that produced it is alive.
struct ColumnView {
  // The wire value as written. A value newer than this reader (not
  // IsValidDType) is kept as is: docs/format.md makes such a column opaque
  // bytes, so `data` is any length and `shape` only what the writer said.
  DType dtype = DType::kFloat32;
  Shape shape;             // Empty for a scalar (and for an empty column).
  absl::string_view data;  // Raw C-order little-endian bytes.

  // A column without values: what a trace_once key holds at every step after
  // the first (XDL writes no shape; xdl_trace writes shape [0]).
  bool empty() const {
    return data.empty() && (shape.empty() || (shape.size() == 1 && shape[0] == 0));
  }
  // False for a dtype newer than this reader (read it as raw bytes).
  bool known_dtype() const { return IsValidDType(static_cast<int32_t>(dtype)); }
  // The product of the dimensions (0 for an empty column); -1 when it does not
  // fit an int64 or a dimension is negative (the reader never hands out such a
  // column: it is corruption).
  int64_t NumElements() const;
};

// What a column holds: one of the Header's column descriptors (field 2,
// docs/format.md "Column descriptors"). The enums carry the wire values of
// xdl.proto.ColumnDescriptor (checked against the generated code); a value
// newer than this reader is kept as is.
struct ColumnInfo {
  enum class Content : int32_t {
    kUnknown = 0,      // Unspecified, or newer than this reader: read the column as a value.
    kValue = 1,        // The tensor itself.
    kStats = 2,        // Built-in stats summary, float64[8].
    kHistogram = 3,    // Built-in histogram summary, float64[2 + 2 * histogram_bins].
    kUserSummary = 4,  // A user summary function's output (summary_name).
    kDigest = 5,       // Built-in tensor digest, float64[2] (high, low 32 bits).
  };
  enum class Source : int32_t {
    kUnknown = 0,
    kTensor = 1,
    kVariable = 2,
    kGradient = 3,
    kCallback = 4,
    kOnce = 5,
  };
  Content content = Content::kUnknown;
  Source source = Source::kUnknown;
  int32_t layout_version = 0;  // Of a stats or histogram layout; 0 otherwise.
  int32_t histogram_bins = 0;
  std::string summary_name;
  // The tensor the column is computed from, when the writer knew it at Start
  // (an entry reading registered memory in place).
  bool has_input = false;
  DType input_dtype = DType::kFloat32;  // The wire value (may be newer than this reader).
  Shape input_shape;
};

// The newest summary layout this reader can name the fields of.
inline constexpr int32_t kSummaryLayoutVersion = 1;

// A field of a Record this reader does not interpret (numbers above 4 are
// reserved for device tracing). Both views point into the mapping.
struct RawField {
  uint32_t number = 0;
  uint32_t wire_type = 0;     // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
  absl::string_view payload;  // The value: varint bytes, fixed bytes or the LEN body.
  absl::string_view encoded;  // Tag + value exactly as in the file (re-parseable).
};

struct RecordView {
  int64_t gstep = 0;
  int64_t lstep = 0;
  int64_t timestamp_ms = 0;
  std::vector<ColumnView> columns;  // One per header key, same order.
  std::vector<RawField> extra_fields;
  uint64_t offset = 0;      // Byte offset of the frame's 4-byte length prefix.
  uint64_t frame_size = 0;  // Prefix + body.
};

// A device-only record (docs/format.md, "Device events"): no column while the
// header has keys, and fields above 4 (what device tracing collected after
// the last step, written at close). Readers hand it out only to a read that
// selects no key (the timeline's); records() of any key and stack skip it.
inline bool IsDeviceOnlyRecord(const RecordView& record, size_t header_keys) {
  return record.columns.empty() && header_keys > 0 && !record.extra_fields.empty();
}

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_RECORD_VIEW_H_
