// Finds a trace's data files: "{prefix}.{name}.{rank}.{index}" grouped by rank, each rank in index
// order.
#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "xdl_trace/reader.h"

namespace xdl_trace {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

}  // namespace

bool ParseTraceFileName(absl::string_view base_name, TraceFileInfo* info) {
  std::vector<absl::string_view> parts = absl::StrSplit(base_name, '.');
  if (parts.size() < 4) return false;
  const absl::string_view index = parts[parts.size() - 1];
  const absl::string_view rank = parts[parts.size() - 2];
  if (!AllDigits(index) || !AllDigits(rank) || parts[0].empty()) return false;
  int64_t index_value;
  int32_t rank_value;
  if (!absl::SimpleAtoi(index, &index_value) || !absl::SimpleAtoi(rank, &rank_value)) return false;
  info->prefix = std::string(parts[0]);
  info->name = absl::StrJoin(parts.begin() + 1, parts.end() - 2, ".");
  info->rank = rank_value;
  info->index = index_value;
  return !info->name.empty();
}

absl::StatusOr<std::vector<TraceFileInfo>> ListTraceFiles(const std::string& dir,
                                                          absl::string_view prefix,
                                                          absl::string_view name) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": ", ec.message()));
  std::vector<TraceFileInfo> files;
  for (const auto& entry : it) {
    if (!entry.is_regular_file(ec)) continue;
    TraceFileInfo info;
    if (!ParseTraceFileName(entry.path().filename().string(), &info)) continue;
    if (info.prefix != prefix || (!name.empty() && info.name != name)) continue;
    info.path = entry.path().string();
    files.push_back(std::move(info));
  }
  std::sort(files.begin(), files.end(), [](const TraceFileInfo& a, const TraceFileInfo& b) {
    if (a.name != b.name) return a.name < b.name;
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.index < b.index;
  });
  return files;
}

absl::StatusOr<TraceReader> TraceReader::Open(const std::string& path, absl::string_view prefix,
                                              absl::string_view name) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  TraceReader reader;
  if (std::filesystem::is_directory(status)) {
    auto files = ListTraceFiles(path, prefix, name);
    if (!files.ok()) return files.status();
    if (files->empty()) {
      // Say what is there, so a wrong prefix or name is easy to spot.
      auto any = ListTraceFiles(path, "train", "");
      auto tests = ListTraceFiles(path, "test", "");
      std::set<std::string> seen;
      for (const auto* list : {&any, &tests}) {
        if (!list->ok()) continue;
        for (const auto& f : **list) seen.insert(absl::StrCat(f.prefix, ".", f.name));
      }
      return absl::NotFoundError(absl::StrCat(
          path, ": no data files named ", prefix, ".", name.empty() ? "*" : name, ".<rank>.<index>",
          seen.empty() ? "" : " (found: ", absl::StrJoin(seen, ", "), seen.empty() ? "" : ")"));
    }
    reader.files_ = *std::move(files);
  } else {
    TraceFileInfo info;
    const std::string base = std::filesystem::path(path).filename().string();
    if (!ParseTraceFileName(base, &info)) info = TraceFileInfo{};
    info.path = path;
    reader.files_.push_back(std::move(info));
  }
  return reader;
}

std::vector<int32_t> TraceReader::ranks() const {
  std::vector<int32_t> ranks;
  for (const auto& f : files_) {
    if (ranks.empty() || ranks.back() != f.rank) ranks.push_back(f.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::vector<TraceFileInfo> TraceReader::files_of_rank(int32_t rank) const {
  std::vector<TraceFileInfo> out;
  for (const auto& f : files_) {
    if (f.rank == rank) out.push_back(f);
  }
  return out;
}

}  // namespace xdl_trace
