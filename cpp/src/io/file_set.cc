// File naming and index continuation: a new run continues after the highest index already on disk.
#include "io/file_set.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "io/io_error.h"

namespace xdl_trace {
namespace internal {

std::string FileStem(const TraceConfig& config) {
  return absl::StrCat(config.Prefix(), ".", config.output_file_name, ".", config.rank);
}

std::string DataFileName(const TraceConfig& config, int64_t index) {
  return absl::StrCat(FileStem(config), ".", index);
}

std::string DataFilePath(const TraceConfig& config, int64_t index) {
  std::string dir = config.output_dir;
  if (!dir.empty() && dir.back() != '/') dir.push_back('/');
  return absl::StrCat(dir, DataFileName(config, index));
}

std::string MetaPath(absl::string_view data_path) { return absl::StrCat(data_path, ".meta"); }

std::string MetaTempPath(absl::string_view data_path, uint64_t serial) {
  return absl::StrCat(data_path, ".meta.tmp-", getpid(), "-", serial);
}

std::optional<int64_t> ParseFileIndex(absl::string_view stem, absl::string_view file_name) {
  if (!absl::ConsumePrefix(&file_name, stem) || !absl::ConsumePrefix(&file_name, ".")) {
    return std::nullopt;
  }
  // Everything from ".meta" on: "", ".meta", ".meta.tmp" or ".meta.tmp-{...}".
  if (const size_t meta = file_name.find(".meta"); meta != absl::string_view::npos) {
    const absl::string_view rest = file_name.substr(meta);
    if (rest != ".meta" && rest != ".meta.tmp" && !absl::StartsWith(rest, ".meta.tmp-")) {
      return std::nullopt;
    }
    file_name = file_name.substr(0, meta);
  }
  if (file_name.empty() || file_name.size() > 18) return std::nullopt;
  for (char c : file_name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int64_t index = 0;
  if (!absl::SimpleAtoi(file_name, &index)) return std::nullopt;
  return index;
}

absl::StatusOr<int64_t> HighestExistingIndex(const TraceConfig& config, int dir_fd) {
  // fdopendir takes ownership of its fd: give it its own.
  const int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(fd >= 0 ? fdopendir(fd) : nullptr, &closedir);
  if (dir == nullptr) {
    const int error = errno;
    if (fd >= 0) close(fd);
    return IoError(error, absl::StrCat("xdl_trace: cannot list '", config.output_dir, "'"));
  }
  const std::string stem = FileStem(config);
  int64_t highest = 0;
  while (const dirent* entry = readdir(dir.get())) {
    if (auto index = ParseFileIndex(stem, entry->d_name); index && *index > highest) {
      highest = *index;
    }
  }
  return highest;
}

void RemoveStaleMetaTemps(const TraceConfig& config, int dir_fd) {
  const int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(fd >= 0 ? fdopendir(fd) : nullptr, &closedir);
  if (dir == nullptr) {
    if (fd >= 0) close(fd);
    return;
  }
  const std::string stem = FileStem(config);
  std::vector<std::string> stale;  // Not unlinked while readdir walks the directory.
  while (const dirent* entry = readdir(dir.get())) {
    const absl::string_view name = entry->d_name;
    if (absl::StrContains(name, ".meta.tmp") && ParseFileIndex(stem, name).has_value()) {
      stale.emplace_back(name);
    }
  }
  // unlinkat removes a planted link itself, never what it points to.
  for (const std::string& name : stale) unlinkat(dir_fd, name.c_str(), 0);
}

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

AtPath At(int dir_fd, const std::string& path) {
  if (dir_fd < 0) return {AT_FDCWD, path.c_str()};
  const size_t slash = path.rfind('/');
  return {dir_fd, path.c_str() + (slash == std::string::npos ? 0 : slash + 1)};
}

}  // namespace internal
}  // namespace xdl_trace
