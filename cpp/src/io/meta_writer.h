// Atomic replacement of a Meta sidecar: temp file, fsync, rename, fsync dir.
#ifndef XDL_TRACE_IO_META_WRITER_H_
#define XDL_TRACE_IO_META_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {

// Format version written in Meta.format_version by this library.
inline constexpr int32_t kFormatVersion = 1;

// Replaces "{data_path}.meta" with `meta` so that readers see either the old
// or the new Meta, never a mix. With `fsync`, the temp file is fsynced before
// the rename and `dir_fd` (the directory, may be -1 to skip) after it. Errors
// name the file and the failed operation.
absl::Status ReplaceMeta(const std::string& data_path, const xdl::proto::Meta& meta, bool fsync,
                         int dir_fd);

// write(2) all of [data, data + n) to `fd`, retrying on EINTR and short writes.
// Error names `path` and the offset reached.
absl::Status WriteFully(int fd, const char* data, size_t n, const std::string& path,
                        int64_t offset);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_META_WRITER_H_
