// A trace's data files: "{prefix}.{name}.{rank}.{index}" grouped by rank, each rank in index order,
// mapped once and shared; its keys and schema.
#include "xdl_trace/reader/trace_reader.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/trace_file.h"

namespace xdl_trace {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

}  // namespace

// What copies of a TraceReader share: the file list (fixed at Open) and the
// files mapped so far.
struct TraceReader::Shared {
  Shared(std::vector<TraceFileInfo> infos, const FileOptions& file_options)
      : files(std::move(infos)), options(file_options), opened(files.size()) {}

  const std::vector<TraceFileInfo> files;
  const FileOptions options;
  internal::Mutex mu;
  std::vector<std::shared_ptr<TraceFile>> opened ABSL_GUARDED_BY(mu);
};

TraceReader::TraceReader(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

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
                                              absl::string_view name, const FileOptions& options) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  std::vector<TraceFileInfo> files;
  if (std::filesystem::is_directory(status)) {
    XDL_ASSIGN_OR_RETURN(files, ListTraceFiles(path, prefix, name));
    if (files.empty()) {
      // Say what is there and how to ask for it, so a wrong prefix or name is easy to mend.
      std::set<std::string> seen;
      for (const char* any_prefix : {"train", "test"}) {
        auto listed = ListTraceFiles(path, any_prefix, "");
        if (!listed.ok()) continue;
        for (const auto& f : *listed) {
          seen.insert(absl::StrCat(f.prefix, ".", f.name, " (prefix \"", f.prefix, "\", name \"",
                                   f.name, "\")"));
        }
      }
      return absl::NotFoundError(absl::StrCat(
          path, ": no data files named ", prefix, ".", name.empty() ? "*" : name, ".<rank>.<index>",
          seen.empty() ? "" : " (found: ", absl::StrJoin(seen, ", "), seen.empty() ? "" : ")"));
    }
    // Ranks, then indices, even across names (an empty `name` lists them all).
    std::stable_sort(files.begin(), files.end(),
                     [](const TraceFileInfo& a, const TraceFileInfo& b) {
                       return a.rank != b.rank ? a.rank < b.rank : a.index < b.index;
                     });
  } else {
    TraceFileInfo info;
    const std::string base = std::filesystem::path(path).filename().string();
    if (!ParseTraceFileName(base, &info)) info = TraceFileInfo{};
    info.path = path;
    files.push_back(std::move(info));
  }
  return TraceReader(std::make_shared<Shared>(std::move(files), options));
}

TraceReader TraceReader::Subset(const std::vector<size_t>& files,
                                const std::map<size_t, int64_t>& superseded_from) const {
  std::vector<TraceFileInfo> infos;
  for (size_t i : files) {
    infos.push_back(shared_->files[i]);
    if (const auto cut = superseded_from.find(i); cut != superseded_from.end()) {
      infos.back().superseded_from = cut->second;
    }
  }
  auto subset = std::make_shared<Shared>(std::move(infos), shared_->options);
  internal::MutexLock lock(&shared_->mu);
  internal::MutexLock subset_lock(&subset->mu);
  for (size_t k = 0; k < files.size(); ++k) subset->opened[k] = shared_->opened[files[k]];
  return TraceReader(std::move(subset));
}

const std::vector<TraceFileInfo>& TraceReader::files() const { return shared_->files; }

std::vector<int32_t> TraceReader::ranks() const {
  std::vector<int32_t> ranks;
  for (const auto& f : files()) ranks.push_back(f.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::vector<TraceFileInfo> TraceReader::files_of_rank(int32_t rank) const {
  std::vector<TraceFileInfo> out;
  for (const auto& f : files()) {
    if (f.rank == rank) out.push_back(f);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<TraceFile>> TraceReader::File(size_t index) const {
  if (index >= files().size()) {
    return absl::OutOfRangeError(
        absl::StrCat("file index ", index, " out of range for ", files().size(), " files"));
  }
  internal::MutexLock lock(&shared_->mu);
  std::shared_ptr<TraceFile>& file = shared_->opened[index];
  if (file == nullptr) {
    XDL_ASSIGN_OR_RETURN(file, TraceFile::Open(files()[index].path, shared_->options));
  }
  return file;
}

absl::StatusOr<std::vector<std::string>> TraceReader::Keys() const {
  for (size_t i = 0; i < files().size(); ++i) {
    XDL_ASSIGN_OR_RETURN(const std::shared_ptr<TraceFile> file, File(i));
    if (!file->keys().empty() || !file->header_torn()) return file->keys();
  }
  return std::vector<std::string>();
}

absl::StatusOr<std::vector<KeySchema>> TraceReader::Schema() const {
  std::vector<KeySchema> schema;
  std::vector<std::string> keys;  // The first record's file's keys: later files must match.
  std::vector<bool> empty;        // Per key: its column was empty in every record read so far.
  size_t unknown = 0;             // How many are.
  int64_t records = 0;
  uint64_t bytes = 0;  // Of the records read (each one's checksum is checked: a bound on cost).
  for (size_t i = 0; i < files().size(); ++i) {
    XDL_ASSIGN_OR_RETURN(const std::shared_ptr<TraceFile> file, File(i));
    if (!schema.empty() && file->keys() != keys) continue;  // Another run's columns.
    RecordCursor cursor = file->Records();
    RecordView record;
    while (cursor.Next(&record)) {
      bytes += record.frame_size;
      if (IsDeviceOnlyRecord(record, file->keys().size())) continue;
      const bool first = schema.empty();
      if (first) {
        keys = file->keys();
        schema.resize(record.columns.size());
        empty.assign(record.columns.size(), true);
        unknown = record.columns.size();
      }
      for (size_t k = 0; k < record.columns.size() && k < schema.size(); ++k) {
        const ColumnView& column = record.columns[k];
        if (!first && (!empty[k] || column.empty())) continue;
        schema[k] = KeySchema{keys[k], column.dtype, column.shape, {}};
        if (!file->columns().empty()) schema[k].column = file->columns()[k];
        if (!column.empty()) {
          empty[k] = false;
          --unknown;
        }
      }
      if (unknown == 0 || ++records >= kSchemaRecords || bytes >= kSchemaBytes) return schema;
    }
    // Damage past the first record ends the search, not the schema (reading says where).
    if (!cursor.status().ok()) {
      if (schema.empty()) return cursor.status();
      return schema;
    }
  }
  return schema;
}

}  // namespace xdl_trace
