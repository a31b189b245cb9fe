// One writer's output directory: mkdir, one open, the rank's lock by openat, one listing.
#include "io/output_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "io/file_set.h"
#include "io/io_error.h"

namespace xdl_trace {
namespace internal {
namespace {

// mkdir -p. Error naming the path that could not be created.
absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("xdl_trace: empty directory path");
  // Create each prefix ending at a '/', then the whole path.
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError(errno, absl::StrCat("xdl_trace: cannot create directory '", part, "'"));
    }
    if (pos == std::string::npos) break;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MarkIoError(absl::FailedPreconditionError(
        absl::StrCat("xdl_trace: output_dir '", dir, "' is not a directory")));
  }
  return absl::OkStatus();
}

// What one listing of the directory says about a stem's files.
struct StemListing {
  int64_t highest_index = 0;  // Of any file of the stem; 0 if none.
  // Meta temp files ("{stem}.{index}.meta.tmp[-...]") left by writers that
  // died between creating and renaming one.
  std::vector<std::string> meta_temps;
};

// Lists `dir_fd` (output_dir `path`) once. Error naming the directory when it
// cannot be listed.
absl::StatusOr<StemListing> ListStem(int dir_fd, const std::string& path, const std::string& stem) {
  // fdopendir takes ownership of its fd: give it its own.
  const int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(fd >= 0 ? fdopendir(fd) : nullptr, &closedir);
  if (dir == nullptr) {
    const int error = errno;
    if (fd >= 0) close(fd);
    return IoError(error, absl::StrCat("xdl_trace: cannot list '", path, "'"));
  }
  StemListing listing;
  while (const dirent* entry = readdir(dir.get())) {
    const absl::string_view name = entry->d_name;
    const std::optional<int64_t> index = ParseFileIndex(stem, name);
    if (!index.has_value()) continue;
    if (*index > listing.highest_index) listing.highest_index = *index;
    if (absl::StrContains(name, ".meta.tmp")) listing.meta_temps.emplace_back(name);
  }
  return listing;
}

}  // namespace

OutputDir::OutputDir(OutputDir&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      lock_(std::move(other.lock_)),
      next_index_(other.next_index_) {
  other.fd_ = -1;
}

OutputDir& OutputDir::operator=(OutputDir&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    lock_ = std::move(other.lock_);
    next_index_ = other.next_index_;
    other.fd_ = -1;
  }
  return *this;
}

OutputDir::~OutputDir() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<OutputDir> OutputDir::Open(const TraceConfig& config) {
  XDL_RETURN_IF_ERROR(MakeDirectories(config.output_dir));
  const int fd = open(config.output_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return IoError(errno,
                   absl::StrCat("xdl_trace: open of directory '", config.output_dir, "' failed"));
  }
  OutputDir dir(config.output_dir, fd);  // Closes fd on every return below.
  XDL_ASSIGN_OR_RETURN(dir.lock_, WriterLock::Acquire(config, dir.fd_));
  // Listed under the lock: no live writer of the stem adds files meanwhile or
  // owns the temp files, whose indexes count before they go, so stay unused.
  XDL_ASSIGN_OR_RETURN(const StemListing listing, ListStem(dir.fd_, dir.path_, FileStem(config)));
  dir.next_index_ = listing.highest_index + 1;
  // Best effort: a name that cannot be removed stays, as readers skip it
  // anyway. unlinkat removes a planted link itself, never what it points to.
  for (const std::string& name : listing.meta_temps) unlinkat(dir.fd_, name.c_str(), 0);
  return dir;
}

}  // namespace internal
}  // namespace xdl_trace
