// One columnar pass over a trace's records for the report and find-nan: per record its steps,
// rank and time; per selected key the stats row and log-bucket counts, computed in place from the
// mapping; the STEP host spans and device traces the records carry.
#ifndef XDL_TRACE_ANALYSIS_RECORD_SCAN_H_
#define XDL_TRACE_ANALYSIS_RECORD_SCAN_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/mutex.h"
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
  // 1: everything on the caller's thread; more: a walker thread reads ahead
  // and shares the stats (see RecordScan), and a batch of large columns is
  // split further across max_threads / 2 threads (ComputeColumnStats).
  int max_threads = 1;
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
// included for their fields. Value columns are summarized in place, as views
// of the mapping (no copy).
//
// Threads: with max_threads > 1 the walk runs on a walker thread, started by
// the constructor, which reads ahead into a bounded queue of batches (up to
// kMaxQueuedBatches of at most kBatchRecords records, record_scan.cc); the
// caller's thread takes batches from the front. A batch's stats are computed
// by whichever thread claims it first: the caller when the batch reaches the
// front, the walker (newest first) once a few batches wait unclaimed, the
// queue is full or the walk is over. So the walk and the stats share the
// cores, and the walker keeps reading and computing while the caller is away
// between Next() calls (the report's Python code), or before the first one.
// The histogram rows, which add up in record order, are counted by the caller
// as it takes records. When the caller has taken the last batch, the walker
// drops the files (their unmapping is off the caller's path). With
// max_threads 1 the caller walks a batch whenever the queue is empty; the
// results are the same.
//
// Not thread-safe (one caller). The destructor stops and joins the walker.
class RecordScan {
 public:
  RecordScan(const TraceReader& reader, RecordScanOptions options);
  ~RecordScan();
  RecordScan(const RecordScan&) = delete;
  RecordScan& operator=(const RecordScan&) = delete;

  // Clears *chunk and fills it with the next records: at most `max_records`,
  // and fewer once `max_histogram_rows` histogram rows are reached (bounds the
  // chunk's memory). Returns false once the read is over (the chunk may still
  // hold records). Corruption (DataLoss naming the file and offset, also for a
  // host span that does not parse) and a missing key (IsMissingKeyError) are
  // errors, returned again by every later call; the records before them are
  // lost with the chunk.
  absl::StatusOr<bool> Next(size_t max_records, size_t max_histogram_rows, RecordScanChunk* chunk);

 private:
  struct Batch;

  // A key's histogram row being summed.
  struct OpenGroup {
    int64_t gstep = 0;
    int64_t records = 0;
    // Every `every`-th record of the row is counted (1: each; see kRowSamples
    // in record_scan.cc), fixed by the row's first record.
    int64_t every = 1;
    double min = 0, max = 0;
    bool finite = false;  // min and max hold values.
    std::vector<double> counts;
    // A group of many records counts into integer tables first (summed into
    // `counts` when emitted): AccumulateLogBucketTables.
    std::vector<uint64_t> tables;
  };

  // Walker side (the walker thread, or the caller with max_threads 1).
  // Reads the next batch: records up to the batch limits, the end, or an error.
  std::unique_ptr<Batch> Walk();
  absl::Status AddFields(const TraceRecord& record, Batch* batch);
  absl::Status AddRecord(const TraceRecord& record, Batch* batch);
  void WalkerLoop();
  // The walker's end: waits until the caller popped every batch, then drops
  // the walk's references to the files.
  void ReleaseFiles() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Either thread: the stats of the batch's value columns into its rows.
  void Compute(Batch* batch) const;
  // Claims an unclaimed queued batch and computes it with mu_ released.
  void ClaimAndCompute(Batch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Caller side.
  // The front batch, computed (waits for the walker; claims and computes it
  // when nobody has).
  Batch* Front();
  // Pops the front batch (frees a queue slot for the walker).
  void PopFront();
  // Adds record `r` of `batch`'s histogram columns (views from *view on) to
  // their keys' open rows; advances *view past the record's views.
  void CountHistograms(const Batch& batch, size_t r, size_t* view, RecordScanChunk* chunk);
  // Appends `key`'s open row to the chunk and starts a new one.
  void EmitGroup(size_t key, RecordScanChunk* chunk);

  const RecordScanOptions options_;

  // Walker state: touched by the walk only.
  // Released by the walker thread once the caller is done with its batches
  // (ReleaseFiles), so the mappings go with them.
  std::optional<TraceReader> reader_;
  std::optional<TraceCursor> cursor_;
  std::set<std::pair<size_t, int32_t>> unknown_seen_;  // (file, dtype) already reported.
  // The file of the last record read and, per key, whether its column there is a stats summary.
  std::shared_ptr<TraceFile> file_;
  size_t file_index_ = 0;
  std::vector<bool> stats_summary_;

  // Shared between the caller and the walker thread.
  mutable Mutex mu_;
  mutable CondVar changed_;  // A batch was queued, popped or computed; or stop_.
  std::deque<std::unique_ptr<Batch>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread walker_;  // Started by the constructor when max_threads > 1.

  // Caller state.
  size_t taken_ = 0;               // Records of the front batch already in a chunk.
  size_t taken_view_ = 0;          // Its views already counted into histogram rows.
  std::vector<OpenGroup> groups_;  // One per key.
  absl::Status error_;             // Sticky: the read failed.
  bool done_ = false;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_RECORD_SCAN_H_
