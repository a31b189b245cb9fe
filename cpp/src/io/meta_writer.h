// Atomic replacement of a Meta sidecar: exclusive temp file, fsync, rename, fsync dir.
#ifndef XDL_TRACE_IO_META_WRITER_H_
#define XDL_TRACE_IO_META_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {

// Format version written in Meta.format_version by this library.
inline constexpr int32_t kFormatVersion = 1;

// Replaces "{data_path}.meta" with `meta` so that readers see either the old
// or the new Meta, never a mix. Files are reached through `dir_fd` (the open
// output_dir; -1: by path, and no directory fsync), see At(). The temp file
// (MetaTempPath) is created with O_EXCL|O_NOFOLLOW under a fresh serial: a
// name that exists (a link planted there, a leftover) is never opened, the
// next serial is tried. A symbolic link at "{data_path}.meta" is an error
// naming it (the rename would replace the link, never its target, even when
// planted after that check). With `fsync`, the temp file is fsynced before
// the rename and the directory after it. Errors name the file and the
// failed operation and are marked IoError.
absl::Status ReplaceMeta(const std::string& data_path, const xdl::proto::Meta& meta, bool fsync,
                         int dir_fd);

// The serial the next ReplaceMeta of this process tries first (tests plant
// files at the names it will try).
uint64_t PeekMetaTempSerial();

// write(2) all of [data, data + n) to `fd`, retrying on EINTR and short writes.
// Error names `path` and the offset reached.
absl::Status WriteFully(int fd, const char* data, size_t n, const std::string& path,
                        int64_t offset);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_META_WRITER_H_
