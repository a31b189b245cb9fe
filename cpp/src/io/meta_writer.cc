// Writes Meta sidecars atomically (exclusive temp file, fsync, rename, fsync dir), never through a
// link.
#include "io/meta_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/crc32c.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "io/file_set.h"
#include "io/io_error.h"

namespace xdl_trace {
namespace internal {
namespace {

// Serials of Meta temp names, shared by every writer of the process.
std::atomic<uint64_t> next_temp_serial{0};

// Temp names tried before giving up (each taken name is someone else's file).
constexpr int kMaxTempAttempts = 100;

// Creates a fresh Meta temp file for `data_path`: its fd, and its path in `tmp`.
absl::StatusOr<int> CreateMetaTemp(const std::string& data_path, int dir_fd, std::string* tmp) {
  for (int attempt = 0;; ++attempt) {
    *tmp = MetaTempPath(data_path, next_temp_serial.fetch_add(1, std::memory_order_relaxed));
    const AtPath at = At(dir_fd, *tmp);
    const int fd =
        openat(at.dir_fd, at.name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno == EEXIST && attempt + 1 < kMaxTempAttempts) continue;
    return IoError(errno, absl::StrCat("xdl_trace: open of meta temp file '", *tmp, "' failed"));
  }
}

// An error naming `path` when it is a symbolic link.
absl::Status RefuseSymlink(int dir_fd, const std::string& path) {
  const AtPath at = At(dir_fd, path);
  struct stat st;
  if (fstatat(at.dir_fd, at.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    return MarkIoError(absl::PermissionDeniedError(
        absl::StrCat("xdl_trace: '", path,
                     "' is a symbolic link; the writer never writes through one (remove it)")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFully(int fd, const char* data, size_t n, const std::string& path,
                        int64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = write(fd, data + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError(errno, absl::StrCat("xdl_trace: write to '", path, "' at offset ",
                                         offset + done, " failed"));
    }
    if (w == 0) {
      return MarkIoError(absl::DataLossError(absl::StrCat(
          "xdl_trace: write to '", path, "' at offset ", offset + done, " wrote nothing")));
    }
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status ReplaceMeta(const std::string& data_path, const xdl::proto::Meta& meta, bool fsync,
                         int dir_fd) {
  const std::string final_path = MetaPath(data_path);
  std::string bytes;
  xdl::proto::Meta unsealed = meta;
  unsealed.clear_meta_crc32c();
  if (!unsealed.SerializeToString(&bytes)) {
    return absl::InternalError(
        absl::StrCat("xdl_trace: cannot serialize Meta for '", final_path, "'"));
  }
  // Meta.meta_crc32c, last: the CRC-32C of the bytes before it (docs/format.md).
  const uint32_t crc = crc32c::Value(bytes.data(), bytes.size());
  AppendTag(xdl::proto::Meta::kMetaCrc32CFieldNumber, kWireFixed32, &bytes);
  AppendFixed32(crc, &bytes);
  XDL_RETURN_IF_ERROR(RefuseSymlink(dir_fd, final_path));
  std::string tmp;
  XDL_ASSIGN_OR_RETURN(const int fd, CreateMetaTemp(data_path, dir_fd, &tmp));
  absl::Status status = WriteFully(fd, bytes.data(), bytes.size(), tmp, 0);
  if (status.ok() && fsync && ::fsync(fd) != 0) {
    status = IoError(errno, absl::StrCat("xdl_trace: fsync of '", tmp, "' failed"));
  }
  if (close(fd) != 0 && status.ok()) {
    status = IoError(errno, absl::StrCat("xdl_trace: close of '", tmp, "' failed"));
  }
  const AtPath from = At(dir_fd, tmp);
  const AtPath to = At(dir_fd, final_path);
  if (status.ok() && renameat(from.dir_fd, from.name, to.dir_fd, to.name) != 0) {
    status = IoError(errno,
                     absl::StrCat("xdl_trace: rename of '", tmp, "' to '", final_path, "' failed"));
  }
  if (!status.ok()) {
    unlinkat(from.dir_fd, from.name, 0);  // Best effort: leave no temp file behind.
    return status;
  }
  if (fsync && dir_fd >= 0 && ::fsync(dir_fd) != 0) {
    return IoError(errno,
                   absl::StrCat("xdl_trace: fsync of the directory of '", final_path, "' failed"));
  }
  return absl::OkStatus();
}

uint64_t PeekMetaTempSerial() { return next_temp_serial.load(std::memory_order_relaxed); }

}  // namespace internal
}  // namespace xdl_trace
