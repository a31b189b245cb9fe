// File naming and index continuation: a new run continues after the highest index already on disk.
#include "io/file_set.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

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

std::string MetaTempPath(absl::string_view data_path) {
  return absl::StrCat(data_path, ".meta.tmp");
}

std::optional<int64_t> ParseFileIndex(absl::string_view stem, absl::string_view file_name) {
  if (!absl::ConsumePrefix(&file_name, stem) || !absl::ConsumePrefix(&file_name, ".")) {
    return std::nullopt;
  }
  if (!absl::ConsumeSuffix(&file_name, ".meta.tmp")) absl::ConsumeSuffix(&file_name, ".meta");
  if (file_name.empty() || file_name.size() > 18) return std::nullopt;
  for (char c : file_name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int64_t index = 0;
  if (!absl::SimpleAtoi(file_name, &index)) return std::nullopt;
  return index;
}

absl::StatusOr<int64_t> HighestExistingIndex(const TraceConfig& config) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(config.output_dir.c_str()), &closedir);
  if (dir == nullptr) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("xdl_trace: cannot list '", config.output_dir, "'"));
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

absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("xdl_trace: empty directory path");
  // Create each prefix ending at a '/', then the whole path.
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("xdl_trace: cannot create directory '", part, "'"));
    }
    if (pos == std::string::npos) break;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("xdl_trace: output_dir '", dir, "' is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace xdl_trace
