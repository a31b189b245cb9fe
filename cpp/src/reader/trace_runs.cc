// The runs of a trace: files grouped by Meta.run_id (Header RunInfo as fallback), and a reader
// restricted to one run.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/runs.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {
namespace {

// The Header's RunInfo (field 3) of files()[index]; nullopt when it has none
// or cannot be read. Listing runs never fails on a bad file: reading or
// verifying it reports what is wrong, naming it.
std::optional<xdl::proto::RunInfo> HeaderRunInfo(const TraceReader& reader, size_t index) {
  auto file = reader.File(index);
  if (!file.ok() || (*file)->header_torn() || (*file)->first_record_offset() < 4) {
    return std::nullopt;
  }
  const absl::string_view body = (*file)->bytes().substr(4, (*file)->first_record_offset() - 4);
  xdl::proto::Header header;
  if (!header.ParseFromArray(body.data(), static_cast<int>(body.size())) || !header.has_run()) {
    return std::nullopt;
  }
  return header.run();
}

// What a file's Meta says, parsed once.
struct FileFacts {
  bool has_meta = false;
  xdl::proto::Meta meta;
};

// "a1b2c3 (ranks 0,1; 2 files)" for error messages.
std::string DescribeRuns(const std::vector<RunSummary>& runs) {
  std::vector<std::string> parts;
  for (const RunSummary& run : runs) {
    parts.push_back(absl::StrCat(run.run_id.empty() ? "\"\" (no run id: XDL)" : run.run_id,
                                 " (ranks ", absl::StrJoin(run.ranks, ","), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

// The run of each file: its own id, else (a file that names no run: XDL's, or
// one whose writer died before its first Meta and Header, or a stray entry)
// the run of the same rank's closest earlier file that names one, else of its
// closest later one, else "" (XDL's files, where no file names a run).
std::vector<std::string> AttributeUnnamedFiles(
    const std::vector<TraceFileInfo>& infos,
    const std::vector<std::optional<std::string>>& identity) {
  std::vector<std::string> run_of(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    if (identity[i]) {
      run_of[i] = *identity[i];
      continue;
    }
    const std::optional<std::string>* before = nullptr;
    const std::optional<std::string>* after = nullptr;
    int64_t before_index = 0, after_index = 0;
    for (size_t j = 0; j < infos.size(); ++j) {
      if (!identity[j] || infos[j].rank != infos[i].rank) continue;
      if (infos[j].index < infos[i].index && (before == nullptr || infos[j].index > before_index)) {
        before = &identity[j];
        before_index = infos[j].index;
      }
      if (infos[j].index > infos[i].index && (after == nullptr || infos[j].index < after_index)) {
        after = &identity[j];
        after_index = infos[j].index;
      }
    }
    if (before != nullptr) {
      run_of[i] = **before;
    } else if (after != nullptr) {
      run_of[i] = **after;
    }
  }
  return run_of;
}

// The gstep of the first record (not device-only) of `files`, in order;
// nullopt when they hold none or cannot be read (reading them says why).
std::optional<int64_t> FirstGstep(const TraceReader& reader, const std::vector<size_t>& files) {
  for (size_t i : files) {
    auto file = reader.File(i);
    if (!file.ok()) continue;
    RecordCursor cursor = (*file)->Records();
    RecordView record;
    while (cursor.Next(&record)) {
      if (!IsDeviceOnlyRecord(record, (*file)->keys().size())) return record.gstep;
    }
  }
  return std::nullopt;
}

// Fills run->attempts, ->resumes and ->superseded_from for `rank`. Every file's
// Header names its writer (RunInfo pid and start time): a restart under the
// same run id is a second writer of the rank. A file whose Header names none
// (torn) goes with the writer of the rank's file before it.
void AddAttempts(const TraceReader& reader, int32_t rank, RunSummary* run) {
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>>
      by_writer;                            // (start, pid): oldest first.
  std::vector<size_t>* previous = nullptr;  // The attempt of the rank's file before.
  for (size_t i : run->files) {
    if (reader.files()[i].rank != rank) continue;
    const auto info = HeaderRunInfo(reader, i);
    if (info && (info->pid() != 0 || info->start_time_ms() != 0)) {
      previous = &(by_writer[{info->start_time_ms(), info->pid()}]);
    }
    if (previous != nullptr) previous->push_back(i);
  }
  run->attempts = std::max<int32_t>(run->attempts, static_cast<int32_t>(by_writer.size()));
  if (by_writer.size() < 2) return;
  std::vector<std::vector<size_t>> attempts;
  for (auto& [writer, files] : by_writer) attempts.push_back(std::move(files));
  // Each attempt is superseded from the earliest first gstep of those after it.
  std::optional<int64_t> later_first;
  std::vector<RunSummary::Resume> resumes;
  for (size_t a = attempts.size(); a-- > 0;) {
    if (later_first) {
      for (size_t i : attempts[a]) run->superseded_from.emplace_back(i, *later_first);
    }
    if (a == 0) break;
    if (const std::optional<int64_t> first = FirstGstep(reader, attempts[a])) {
      resumes.push_back({rank, static_cast<int32_t>(a + 1), *first});
      later_first = later_first ? std::min(*later_first, *first) : *first;
    }
  }
  run->resumes.insert(run->resumes.end(), resumes.rbegin(), resumes.rend());
  std::sort(run->superseded_from.begin(), run->superseded_from.end());
}

}  // namespace

absl::StatusOr<std::vector<RunSummary>> TraceReader::Runs() const {
  const std::vector<TraceFileInfo>& infos = files();
  std::vector<FileFacts> facts(infos.size());
  std::vector<std::optional<std::string>> identity(infos.size());  // Run id, when a file says.
  for (size_t i = 0; i < infos.size(); ++i) {
    auto meta = ReadFileMeta(infos[i].path + ".meta");
    if (meta.ok() && facts[i].meta.ParseFromString(meta->serialized)) {
      facts[i].has_meta = true;
      if (!facts[i].meta.run_id().empty()) identity[i] = facts[i].meta.run_id();
    }
    if (!identity[i] && !(facts[i].has_meta && facts[i].meta.format_version() == 0)) {
      // No Meta of ours (a crash before the first one): the Header may say.
      if (const auto run = HeaderRunInfo(*this, i)) identity[i] = run->run_id();
    }
  }
  std::vector<std::string> run_of = AttributeUnnamedFiles(infos, identity);

  std::map<std::string, RunSummary> by_id;
  std::map<std::string, int64_t> first_index;  // Run id -> its lowest file index (tie-break).
  std::map<std::string, std::optional<int64_t>> gstep_begin, gstep_end;  // Known ends, by run id.
  for (size_t i = 0; i < infos.size(); ++i) {
    RunSummary& run = by_id[run_of[i]];
    if (run.files.empty()) {
      run.run_id = run_of[i];
      run.closed_cleanly = true;
    }
    auto [it, inserted] = first_index.emplace(run_of[i], infos[i].index);
    if (!inserted) it->second = std::min(it->second, infos[i].index);
    run.files.push_back(i);
    if (std::find(run.ranks.begin(), run.ranks.end(), infos[i].rank) == run.ranks.end()) {
      run.ranks.push_back(infos[i].rank);
    }
    if (!facts[i].has_meta) {
      run.closed_cleanly = false;
      run.records = -1;
      continue;
    }
    const xdl::proto::Meta& meta = facts[i].meta;
    const bool counted = meta.format_version() >= 1;
    if (!counted || run.records < 0) {
      run.records = -1;
    } else {
      run.records += meta.record_count();
    }
    run.closed_cleanly = run.closed_cleanly && meta.closed_cleanly();
    // A file of ours with no record has meaningless step and time ranges.
    if (counted && meta.record_count() == 0) continue;
    // XDL leaves -1 where it never learnt an end of a range (and an empty
    // Meta when its writer died): each known end counts on its own.
    if (counted || meta.gstep_begin() >= 0) {
      auto& begin = gstep_begin[run.run_id];
      begin = begin ? std::min(*begin, meta.gstep_begin()) : meta.gstep_begin();
    }
    if (counted || meta.gstep_end() >= 0) {
      auto& end = gstep_end[run.run_id];
      end = end ? std::max(*end, meta.gstep_end()) : meta.gstep_end();
    }
    if (meta.timestamp_begin() > 0 &&
        (run.start_time_ms == 0 || meta.timestamp_begin() < run.start_time_ms)) {
      run.start_time_ms = meta.timestamp_begin();
    }
    run.end_time_ms = std::max(run.end_time_ms, meta.timestamp_end());
  }

  std::vector<RunSummary> runs;
  for (auto& [id, run] : by_id) {
    const std::optional<int64_t> begin = gstep_begin[id], end = gstep_end[id];
    if (begin && end) {
      run.has_steps = true;
      run.gstep_begin = *begin;
      run.gstep_end = *end;
    }
    std::sort(run.ranks.begin(), run.ranks.end());
    // Each rank's first file carries the run info in its Header.
    for (int32_t rank : run.ranks) {
      std::string serialized;
      for (size_t i : run.files) {
        if (infos[i].rank != rank) continue;
        if (const auto info = HeaderRunInfo(*this, i)) {
          serialized = info->SerializeAsString();
          if (info->start_time_ms() > 0 &&
              (run.start_time_ms == 0 || info->start_time_ms() < run.start_time_ms)) {
            run.start_time_ms = info->start_time_ms();
          }
        }
        break;
      }
      run.run_infos.push_back(std::move(serialized));
      AddAttempts(*this, rank, &run);
    }
    for (size_t i : run.files) {
      if (facts[i].has_meta) {
        run.end_time_ms = std::max(run.end_time_ms, facts[i].meta.end_time_ms());
      }
    }
    runs.push_back(std::move(run));
  }
  std::stable_sort(runs.begin(), runs.end(), [&](const RunSummary& a, const RunSummary& b) {
    if (a.start_time_ms != b.start_time_ms) return a.start_time_ms < b.start_time_ms;
    return first_index[a.run_id] < first_index[b.run_id];
  });
  return runs;
}

namespace {

// The run of `runs` named `run_id` (its id, or a prefix of exactly one).
absl::StatusOr<const RunSummary*> MatchRun(const std::vector<RunSummary>& runs,
                                           absl::string_view run_id) {
  const RunSummary* match = nullptr;
  std::vector<const RunSummary*> prefixed;
  for (const RunSummary& run : runs) {
    if (run.run_id == run_id) match = &run;
    if (!run_id.empty() && absl::StartsWith(run.run_id, run_id)) prefixed.push_back(&run);
  }
  if (match == nullptr && prefixed.size() == 1) match = prefixed[0];
  if (match == nullptr && prefixed.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("run '", run_id, "' is the prefix of ",
                                                   prefixed.size(), " runs: ", DescribeRuns(runs)));
  }
  if (match == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no run '", run_id, "' in this trace; its runs: ", DescribeRuns(runs)));
  }
  return match;
}

}  // namespace

absl::StatusOr<TraceReader> TraceReader::OfRun(absl::string_view run_id) const {
  return OfRuns({std::string(run_id)});
}

absl::StatusOr<TraceReader> TraceReader::OfRuns(const std::vector<std::string>& run_ids) const {
  XDL_ASSIGN_OR_RETURN(const std::vector<RunSummary> runs, Runs());
  std::set<size_t> kept;
  for (const std::string& run_id : run_ids) {
    XDL_ASSIGN_OR_RETURN(const RunSummary* run, MatchRun(runs, run_id));
    kept.insert(run->files.begin(), run->files.end());
  }
  return Subset(std::vector<size_t>(kept.begin(), kept.end()));
}

absl::StatusOr<TraceReader> TraceReader::LatestAttempts() const {
  XDL_ASSIGN_OR_RETURN(const std::vector<RunSummary> runs, Runs());
  std::map<size_t, int64_t> superseded_from;
  for (const RunSummary& run : runs) {
    superseded_from.insert(run.superseded_from.begin(), run.superseded_from.end());
  }
  std::vector<size_t> all(files().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return Subset(all, superseded_from);
}

TraceReader TraceReader::Without(const std::vector<std::string>& paths) const {
  const std::set<std::string> excluded(paths.begin(), paths.end());
  std::vector<size_t> kept;
  for (size_t i = 0; i < files().size(); ++i) {
    if (excluded.count(files()[i].path) == 0) kept.push_back(i);
  }
  return Subset(kept);
}

}  // namespace xdl_trace
