// The runs and ranks in a trace: the files one tracer wrote, as TraceReader::Runs finds them.
#ifndef XDL_TRACE_READER_RUNS_H_
#define XDL_TRACE_READER_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xdl_trace {

// One run in a trace: the files one tracer wrote, which share a Meta.run_id
// (docs/format.md "Runs"). Files without a run id (XDL's) are one run with id "".
struct RunSummary {
  std::string run_id;
  std::vector<size_t> files;   // Into TraceReader::files(), in its order.
  std::vector<int32_t> ranks;  // Sorted.
  int64_t records = 0;         // Meta record counts; -1 when a file's is unknown (XDL Meta).
  bool has_steps = false;      // gstep_begin/end hold the range of the run's records.
  int64_t gstep_begin = 0;
  int64_t gstep_end = 0;
  int64_t start_time_ms = 0;    // Earliest RunInfo start, else earliest record; 0: unknown.
  int64_t end_time_ms = 0;      // Latest Meta end_time_ms, else latest record; 0: unknown.
  bool closed_cleanly = false;  // Every file's Meta says its writer closed it.
  // The serialized xdl.proto.RunInfo of each rank (Header field 3 of the
  // rank's first file), in `ranks` order; "" for a rank whose Header has none.
  std::vector<std::string> run_infos;
  // Writers of one rank under this run id, told apart by their Header's
  // RunInfo (pid, start time): more than 1 when a job restarted with the same
  // run id (TORCHELASTIC_RUN_ID, XDL_TRACE_RUN_ID).
  int32_t attempts = 1;
  // Where each later attempt of a rank took over: the gstep of its first
  // record. An earlier attempt's records from the smallest such gstep of the
  // attempts after it on are superseded: a reader from LatestAttempts() leaves
  // them out (docs/format.md "Restarted attempts"); any other reader merges
  // every attempt's records, so resumed gsteps appear more than once.
  struct Resume {
    int32_t rank = 0;
    int32_t attempt = 0;  // 2 for the rank's second writer, oldest first.
    int64_t gstep = 0;
  };
  std::vector<Resume> resumes;  // By rank, then attempt.
  // The files of `files` whose later records are superseded: (index into
  // TraceReader::files(), the first gstep superseded).
  std::vector<std::pair<size_t, int64_t>> superseded_from;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_RUNS_H_
