// The naming scheme of a trace's data files, "{prefix}.{name}.{rank}.{index}", and listing them.
#ifndef XDL_TRACE_READER_FILE_NAMES_H_
#define XDL_TRACE_READER_FILE_NAMES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xdl_trace {

// A data file named "{prefix}.{name}.{rank}.{index}".
struct TraceFileInfo {
  std::string path;
  std::string prefix;
  std::string name;
  int32_t rank = 0;
  int64_t index = 0;
  // Set by TraceReader::LatestAttempts on a file of a restarted job's earlier
  // attempt: its records at this gstep or later were written again by a later
  // attempt of the same rank and run, and reads leave them out.
  std::optional<int64_t> superseded_from;
};

// Splits a data file's base name into prefix, name, rank and index; false when
// it does not follow the naming scheme (or is a .meta / temporary file).
bool ParseTraceFileName(absl::string_view base_name, TraceFileInfo* info);

// Lists the data files of `dir` with the given prefix and name (empty name:
// any name), sorted by rank, then index. An entry named like a data file that
// is not a regular file (a planted FIFO or link to a device) is listed, so
// that reading it fails naming it; listing never opens an entry.
absl::StatusOr<std::vector<TraceFileInfo>> ListTraceFiles(const std::string& dir,
                                                          absl::string_view prefix,
                                                          absl::string_view name);

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_FILE_NAMES_H_
