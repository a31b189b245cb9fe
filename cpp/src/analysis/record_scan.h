// One columnar pass over a trace's records for the report and find-nan: per record its steps,
// rank and time; per selected key the stats row and log-bucket counts, computed in place from the
// mapping; the STEP host spans and device traces the records carry.
#ifndef XDL_TRACE_ANALYSIS_RECORD_SCAN_H_
#define XDL_TRACE_ANALYSIS_RECORD_SCAN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "xdl_trace/reader.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace internal {

struct RecordScanOptions {
  std::vector<std::string> keys;  // The keys to summarize, in this order (may be empty).
  StepSelection steps;
  std::optional<std::vector<int32_t>> ranks;  // nullopt: every rank.
  // Per key: whether its value columns of more than one element get log-bucket
  // counts (empty: none does). A stats summary column never does.
  std::vector<bool> histogram;
  // Consecutive records of a key whose log-bucket counts add up into one
  // histogram row (>= 1): a chart draws a few hundred points, so a long run
  // needs no row per record.
  int64_t histogram_group = 1;
  int max_threads = 1;  // For the stats kernel (ComputeColumnStats).
};

// A host span of one step the hook saw (docs/format.md "Host spans"): STEP
// (traced) or STEP_NOT_TRACED, in nanoseconds of CLOCK_REALTIME.
struct StepSpan {
  int32_t rank = 0;
  int64_t gstep = 0;
  int64_t lstep = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  bool traced = true;
};

// What one RecordScan::Next call found, as columns. Record i's column of key k
// is cell i * keys + k.
struct RecordScanChunk {
  std::vector<int64_t> gstep, lstep, timestamp_ms;
  std::vector<int32_t> rank;
  // cells x kStatsSize (internal::StatsField order). A stats summary column's
  // own row; NaN for a column that holds no value: empty (trace_once after its
  // first step, a watch(every=) gap), or a stats summary of count 0.
  std::vector<double> stats;
  // Histogram rows, each the summed log-bucket counts of `histogram_group`
  // consecutive records of a key (fewer in a key's last row): the key's index,
  // the first record's gstep, the records, the min and max of their finite
  // values (NaN: none), and the counts (rows x kNumLogBuckets). A key's rows
  // come in record order; a row is emitted in the chunk its last record is in.
  std::vector<int32_t> histogram_key;
  std::vector<int64_t> histogram_gstep, histogram_records;
  std::vector<double> histogram_min, histogram_max;
  std::vector<double> buckets;
  std::vector<StepSpan> step_spans;  // In record order.
  // Serialized xdl.proto.DeviceTrace (Record field 5) in record order, from
  // every record read, the device-only one included.
  std::vector<std::string> device_traces;
  std::vector<TornTail> torn_tails;
  // (file path, wire dtype) of dtypes newer than this reader, met for the first
  // time (their columns are summarized as raw bytes, uint8).
  std::vector<std::pair<std::string, int32_t>> unknown_dtypes;

  size_t records() const { return gstep.size(); }
  void Clear();
};

// Walks the selected records of a TraceReader once (TraceReader::Read: ranks
// merged by gstep, Meta-based skipping, torn tails), the device-only records
// included for their fields. Value columns go to ComputeColumnStats in batches
// of up to 64 MB of column bytes, views of the mapping (no copy). Not
// thread-safe; keeps its reader's files alive.
class RecordScan {
 public:
  RecordScan(const TraceReader& reader, RecordScanOptions options);

  // Clears *chunk and fills it with the next records: at most `max_records`,
  // and fewer once `max_histogram_rows` histogram rows are reached (bounds the
  // chunk's memory). Returns false once the read is over (the chunk may still
  // hold records). Corruption (DataLoss naming the file and offset, also for a
  // host span that does not parse) and a missing key (IsMissingKeyError) are
  // errors; the records before them are lost with the chunk.
  absl::StatusOr<bool> Next(size_t max_records, size_t max_histogram_rows, RecordScanChunk* chunk);

 private:
  // A value column waiting for the stats kernel, and the cell it fills.
  struct Pending {
    std::vector<TensorView> views;
    std::vector<bool> histogram;
    std::vector<size_t> cells;
    size_t bytes = 0;
    size_t cached_bytes = 0;  // Of small histogram columns (see kCacheBatchBytes).
    size_t flagged = 0;

    void Clear() {  // Keeps the capacity.
      views.clear();
      histogram.clear();
      cells.clear();
      bytes = cached_bytes = flagged = 0;
    }
  };

  absl::Status AddRecord(const TraceRecord& record, RecordScanChunk* chunk);
  absl::Status AddFields(const TraceRecord& record, RecordScanChunk* chunk);
  // A key's histogram row being summed.
  struct OpenGroup {
    int64_t gstep = 0;
    int64_t records = 0;
    double min = 0, max = 0;
    bool finite = false;  // min and max hold values.
    std::vector<double> counts;
    // A group of many records counts into integer tables first (summed into
    // `counts` when emitted): AccumulateLogBucketTables.
    std::vector<uint64_t> tables;
  };

  // Runs the stats kernel over `pending_` into the chunk's cells and adds the
  // flagged columns to their keys' open histogram rows.
  void Flush(RecordScanChunk* chunk);
  // Appends `key`'s open row to the chunk and starts a new one.
  void EmitGroup(size_t key, RecordScanChunk* chunk);

  TraceReader reader_;
  RecordScanOptions options_;
  TraceCursor cursor_;
  Pending pending_;
  std::vector<double> scratch_stats_;
  std::vector<OpenGroup> groups_;                      // One per key.
  std::set<std::pair<size_t, int32_t>> unknown_seen_;  // (file, dtype) already reported.
  // The file of the last record read and, per key, whether its column there is a stats summary.
  std::shared_ptr<TraceFile> file_;
  size_t file_index_ = 0;
  std::vector<bool> stats_summary_;
  bool done_ = false;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_RECORD_SCAN_H_
