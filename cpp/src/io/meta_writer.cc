// Writes Meta sidecars atomically (write temp, fsync, rename, fsync dir).
#include "io/meta_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "io/file_set.h"

namespace xdl_trace {
namespace internal {

absl::Status WriteFully(int fd, const char* data, size_t n, const std::string& path,
                        int64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = write(fd, data + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("xdl_trace: write to '", path, "' at offset ",
                                                     offset + done, " failed"));
    }
    if (w == 0) {
      return absl::DataLossError(absl::StrCat("xdl_trace: write to '", path, "' at offset ",
                                              offset + done, " wrote nothing"));
    }
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status ReplaceMeta(const std::string& data_path, const xdl::proto::Meta& meta, bool fsync,
                         int dir_fd) {
  const std::string tmp = MetaTempPath(data_path);
  const std::string final_path = MetaPath(data_path);
  std::string bytes;
  if (!meta.SerializeToString(&bytes)) {
    return absl::InternalError(
        absl::StrCat("xdl_trace: cannot serialize Meta for '", final_path, "'"));
  }
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("xdl_trace: open of meta temp file '", tmp, "' failed"));
  }
  absl::Status status = WriteFully(fd, bytes.data(), bytes.size(), tmp, 0);
  if (status.ok() && fsync && ::fsync(fd) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("xdl_trace: fsync of '", tmp, "' failed"));
  }
  if (close(fd) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("xdl_trace: close of '", tmp, "' failed"));
  }
  if (status.ok() && std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    status = absl::ErrnoToStatus(
        errno, absl::StrCat("xdl_trace: rename of '", tmp, "' to '", final_path, "' failed"));
  }
  if (!status.ok()) {
    unlink(tmp.c_str());  // Best effort: leave no temp file behind.
    return status;
  }
  if (fsync && dir_fd >= 0 && ::fsync(dir_fd) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("xdl_trace: fsync of the directory of '", final_path, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace xdl_trace
