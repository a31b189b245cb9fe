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
// Where a new Meta is written before it is renamed over MetaPath():
// "{data_path}.meta.tmp-{pid}-{serial}", unique per process and serial, so it
// is created with O_EXCL and never reused. The name does not end in digits,
// so readers (ParseTraceFileName, read_trace.py) never take it for a data file.
std::string MetaTempPath(absl::string_view data_path, uint64_t serial);

// The index of `file_name` when it is "{stem}.{index}", "{stem}.{index}.meta"
// or a leftover Meta temp file ("{stem}.{index}.meta.tmp-{...}", or
// "{stem}.{index}.meta.tmp" from earlier versions); nullopt for anything else.
std::optional<int64_t> ParseFileIndex(absl::string_view stem, absl::string_view file_name);

// Largest index of any file of `config`'s stem (links and leftover temp files
// included: their index is never reused) in the directory `dir_fd` (an open
// config.output_dir), 0 if none. Error naming the directory when it cannot be listed.
absl::StatusOr<int64_t> HighestExistingIndex(const TraceConfig& config, int dir_fd);

// Removes the Meta temp files of `config`'s stem left in `dir_fd` by writers
// that died between creating and renaming one. Call only while holding the
// rank's WriterLock (so no live writer owns them) and after
// HighestExistingIndex (so their indexes stay reserved for this run). Best
// effort: a name that cannot be removed stays, as readers skip it anyway.
void RemoveStaleMetaTemps(const TraceConfig& config, int dir_fd);

// mkdir -p. Error naming the path that could not be created.
absl::Status MakeDirectories(const std::string& dir);

// How the writer's system calls (openat, renameat, ...) reach `path`, a file
// directly inside output_dir: by its base name relative to `dir_fd` (output_dir
// opened once at Start, so a directory renamed or replaced afterwards cannot
// redirect them), or by `path` itself relative to AT_FDCWD when dir_fd is -1.
struct AtPath {
  int dir_fd;
  const char* name;
};
AtPath At(int dir_fd, const std::string& path);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_FILE_SET_H_
