// Data/meta file names and discovery of indices earlier runs left in the directory.
#ifndef XDL_TRACE_IO_FILE_SET_H_
#define XDL_TRACE_IO_FILE_SET_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// "{train|test}.{output_file_name}.{rank}": the part every file of one tracer shares.
std::string FileStem(const TraceConfig& config);

// "{stem}.{index}" (data) and "{stem}.{index}.meta" (meta), without directory.
std::string DataFileName(const TraceConfig& config, int64_t index);
// "{output_dir}/{stem}.{index}": where a data file of `config` lives.
std::string DataFilePath(const TraceConfig& config, int64_t index);
std::string MetaPath(absl::string_view data_path);
// Where a new Meta is written before it is renamed over MetaPath().
std::string MetaTempPath(absl::string_view data_path);

// The index of `file_name` when it is "{stem}.{index}", "{stem}.{index}.meta"
// or a leftover "{stem}.{index}.meta.tmp"; nullopt for anything else.
std::optional<int64_t> ParseFileIndex(absl::string_view stem, absl::string_view file_name);

// Largest index of any file of `config`'s stem in config.output_dir, 0 if none.
// Error naming the directory when it cannot be listed.
absl::StatusOr<int64_t> HighestExistingIndex(const TraceConfig& config);

// mkdir -p. Error naming the path that could not be created.
absl::Status MakeDirectories(const std::string& dir);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_FILE_SET_H_
