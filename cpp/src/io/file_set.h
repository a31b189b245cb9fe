// Data/meta file names: what each file of a writer is called and which index a name holds.
#ifndef XDL_TRACE_IO_FILE_SET_H_
#define XDL_TRACE_IO_FILE_SET_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// "{train|test}.{output_file_name}.{rank}": the part every file of one tracer shares.
std::string FileStem(const TraceConfig& config);

// "{output_dir}/{stem}.{index}": where a data file lives ("/" added only
// when output_dir does not end in one).
std::string DataFilePath(absl::string_view output_dir, absl::string_view stem, int64_t index);
// The same for a data file of `config`.
std::string DataFilePath(const TraceConfig& config, int64_t index);
// "{data_path}.meta": the data file's Meta.
std::string MetaPath(absl::string_view data_path);
// Where a new Meta is written before it is renamed over MetaPath():
// "{data_path}.meta.tmp-{pid}-{serial}", unique per process and serial, so it
// is created with O_EXCL and never reused. The name does not end in digits,
// so readers (ParseTraceFileName, read_trace.py) never take it for a data file.
std::string MetaTempPath(absl::string_view data_path, uint64_t serial);

// The index of `file_name` when it is "{stem}.{index}", "{stem}.{index}.meta"
// or a leftover Meta temp file ("{stem}.{index}.meta.tmp-{...}", or
// "{stem}.{index}.meta.tmp" from earlier versions); nullopt for anything else.
std::optional<int64_t> ParseFileIndex(absl::string_view stem, absl::string_view file_name);

// How the writer's system calls (openat, renameat, ...) reach `path`, a file
// directly inside output_dir: by its base name relative to `dir_fd` (output_dir
// opened once, by OutputDir::Open, so a directory renamed or replaced afterwards
// cannot redirect them), or by `path` itself relative to AT_FDCWD when dir_fd is -1.
struct AtPath {
  int dir_fd;
  const char* name;
};
AtPath At(int dir_fd, const std::string& path);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_FILE_SET_H_
