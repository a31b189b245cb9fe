// What a path that is not a regular file is, for errors that name it (readers, the plugin loader).
#ifndef XDL_TRACE_CORE_FILE_KIND_H_
#define XDL_TRACE_CORE_FILE_KIND_H_

#include <sys/stat.h>

#include <string>

#include "absl/strings/str_format.h"

namespace xdl_trace {
namespace internal {

// "a FIFO", "a directory", ...; "mode 0NNNNNN" for a kind without a name.
inline std::string FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return absl::StrFormat("mode %o", mode & S_IFMT);
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_FILE_KIND_H_
