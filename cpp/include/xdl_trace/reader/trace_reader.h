// A trace on disk (a file or a directory of ranks): its files, keys, reads, stacks and runs.
#ifndef XDL_TRACE_READER_TRACE_READER_H_
#define XDL_TRACE_READER_TRACE_READER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/dtype.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/runs.h"
#include "xdl_trace/reader/stack.h"
#include "xdl_trace/reader/trace_cursor.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {

// The dtype and shape of a key in a trace's first record, and what the
// column holds when that record's file has column descriptors.
struct KeySchema {
  std::string key;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::optional<ColumnInfo> column;
};

// A trace on disk: one data file, or a directory of ranks and rolled-over
// files. Copies share the files, which are mapped at first use; thread-safe.
class TraceReader {
 public:
  // `path` is a data file or a directory. For a directory, files are grouped
  // by `prefix` ("train"/"test") and `name`; NotFound when none match.
  // `options` applies to every file it opens.
  static absl::StatusOr<TraceReader> Open(const std::string& path,
                                          absl::string_view prefix = "train",
                                          absl::string_view name = "trace",
                                          const FileOptions& options = {});

  // Every file, sorted by rank, then index.
  const std::vector<TraceFileInfo>& files() const;
  std::vector<int32_t> ranks() const;
  // The files of one rank in index order.
  std::vector<TraceFileInfo> files_of_rank(int32_t rank) const;

  // files()[index], mapped at the first call; later calls and cursors share it.
  absl::StatusOr<std::shared_ptr<TraceFile>> File(size_t index) const;
  // Maps a file on its own (not shared with the reader).
  static absl::StatusOr<std::shared_ptr<TraceFile>> OpenFile(const TraceFileInfo& info) {
    return TraceFile::Open(info.path);
  }

  // The keys of the first file whose Header is complete (empty when none is).
  absl::StatusOr<std::vector<std::string>> Keys() const;
  // Each key's dtype and shape in the first record of the trace that holds a
  // value of it (a key empty at the first steps: a value handed at some
  // steps only, a gradient before the first backward), looking at most
  // kSchemaRecords records or kSchemaBytes into the files of the first
  // record's columns; an empty column where none holds one. Empty when the
  // trace holds no record.
  absl::StatusOr<std::vector<KeySchema>> Schema() const;
  static constexpr int64_t kSchemaRecords = 4096;
  static constexpr uint64_t kSchemaBytes = uint64_t{64} << 20;

  // The selected records, merged across ranks (see TraceCursor).
  TraceCursor Read(ReadOptions options) const;

  // Copies nothing yet: gathers each of `keys` (nullopt: Keys()) over the
  // selected steps of one rank (nullopt: the only rank; InvalidArgument when
  // there are several), in file order, leaving out empty (trace_once) columns.
  // A key whose dtype or shape changes is InvalidArgument naming the file,
  // key, gstep and offset; with `ragged`, a key whose shape changes but not
  // its dtype or number of dimensions is gathered with each row's shape
  // (StackedKey::row_shapes).
  absl::StatusOr<StackResult> Stack(std::optional<std::vector<std::string>> keys,
                                    const StepSelection& steps,
                                    std::optional<int32_t> rank = std::nullopt,
                                    bool ragged = false) const;

  // The runs among files(), oldest first (by start time, then first file
  // index). A file's run is its Meta's run_id, else its Header's RunInfo; a
  // file that names neither (a writer that died before both, a stray entry)
  // goes with the same rank's closest earlier file that names a run (else
  // its closest later one), else in the run "" (XDL's files). Reads every
  // Meta and maps each run's first file per rank (for its Header). A file
  // that cannot be mapped or whose RunInfo does not parse gives no run info:
  // reading or verifying it names the problem.
  absl::StatusOr<std::vector<RunSummary>> Runs() const;
  // A reader over the files of one run (an id from Runs(), or a prefix of
  // exactly one). NotFound naming the runs there are when none matches,
  // InvalidArgument when a prefix matches several.
  absl::StatusOr<TraceReader> OfRun(absl::string_view run_id) const;
  // A reader over the files of several runs read together (a run's eval
  // hooks, each a run of its own), in files() order; errors as OfRun's.
  absl::StatusOr<TraceReader> OfRuns(const std::vector<std::string>& run_ids) const;
  // A reader over the same files that leaves out what a restarted job wrote
  // twice: in each run written by several attempts of a rank (a restart under
  // the same run id, RunSummary::attempts), an attempt's records at or after
  // the first gstep of a later attempt are superseded (TraceFileInfo::
  // superseded_from), as TensorBoard purges a restarted job's orphaned steps.
  // Reads (Read, Stack) then give each gstep once, from the latest attempt.
  absl::StatusOr<TraceReader> LatestAttempts() const;
  // A reader over files() less those whose path is one of `paths` (as in
  // files()): the files a reader sets aside, such as a copy whose Meta names
  // another rank or file index. A path that is not one of files() is ignored.
  TraceReader Without(const std::vector<std::string>& paths) const;

 private:
  struct Shared;
  explicit TraceReader(std::shared_ptr<Shared> shared);
  // A reader over `files`, sharing whichever of them this one has mapped;
  // `superseded_from` (by index into files()) sets their cut.
  TraceReader Subset(const std::vector<size_t>& files,
                     const std::map<size_t, int64_t>& superseded_from = {}) const;
  std::shared_ptr<Shared> shared_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_TRACE_READER_H_
