// File naming: the names every file of a writer takes, and the index a name holds.
#include "io/file_set.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace xdl_trace {
namespace internal {

std::string FileStem(const TraceConfig& config) {
  return absl::StrCat(config.Prefix(), ".", config.output_file_name, ".", config.rank);
}

std::string DataFilePath(absl::string_view output_dir, absl::string_view stem, int64_t index) {
  const absl::string_view slash = output_dir.empty() || output_dir.back() == '/' ? "" : "/";
  return absl::StrCat(output_dir, slash, stem, ".", index);
}

std::string DataFilePath(const TraceConfig& config, int64_t index) {
  return DataFilePath(config.output_dir, FileStem(config), index);
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

AtPath At(int dir_fd, const std::string& path) {
  if (dir_fd < 0) return {AT_FDCWD, path.c_str()};
  const size_t slash = path.rfind('/');
  return {dir_fd, path.c_str() + (slash == std::string::npos ? 0 : slash + 1)};
}

}  // namespace internal
}  // namespace xdl_trace
