// One key over many steps: the rows a TraceReader::Stack gathers, as views into the mappings.
#ifndef XDL_TRACE_READER_STACK_H_
#define XDL_TRACE_READER_STACK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "xdl_trace/dtype.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {

// One key stacked over steps: the non-empty columns in the selection, as
// views into the mappings (kept alive by StackResult::files).
struct StackedKey {
  std::string key;
  DType dtype = DType::kFloat32;  // Of every row (when there are rows).
  Shape shape;  // Of the first row; [row bytes] for a dtype newer than this reader (raw bytes).
  std::vector<int64_t> gsteps;
  std::vector<absl::string_view> rows;
  // Each row's shape, where a ragged Stack met a key whose shape changes (an
  // activation of a last, smaller batch); empty where every row has `shape`.
  std::vector<Shape> row_shapes;

  bool ragged() const { return !row_shapes.empty(); }
  size_t row_bytes() const { return rows.empty() ? 0 : rows[0].size(); }  // Of the first row.
  size_t bytes() const;                                                   // Of every row.
  // Copies the rows back to back into `out` (bytes() bytes).
  void CopyRowsTo(char* out) const;
};

struct StackResult {
  std::vector<StackedKey> keys;  // In the order asked for.
  std::vector<TornTail> torn_tails;
  std::vector<std::shared_ptr<const TraceFile>> files;  // Owners of the row views.
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_STACK_H_
