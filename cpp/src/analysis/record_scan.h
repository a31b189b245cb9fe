// One columnar pass over a trace's records for the report and find-nan: per record its steps,
// rank and time; per selected key the stats row and log-bucket counts, computed in place from the
// mapping; the STEP host spans the records carry, and their device traces parsed into a table.
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
#include "analysis/device_event_table.h"
#include "core/mutex.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/trace_cursor.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"
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
  // Where the device traces (Record field 5) of every record read go, the
  // device-only one included: appended in record order by Next(), each with
  // its record's rank, as their records are taken. Null: they are not read.
  // Owned by the caller; it must outlive the scan.
  DeviceEventTable* device_events = nullptr;
  // A scan of one file: where it starts (ReadOptions::start_offset: an earlier
  // scan's RecordScanChunk::end_offset, to read only what the file gained).
  std::optional<uint64_t> start_offset;
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
  std::vector<TornTail> torn_tails;
  // (file path, wire dtype) of dtypes newer than this reader, met for the first
  // time (their columns are summarized as raw bytes, uint8).
  std::vector<std::pair<std::string, int32_t>> unknown_dtypes;
  // The last chunk of a scan of one file: the offset past its last complete
  // frame (TraceCursor::end_offset), where a scan of it after it grew starts.
  uint64_t end_offset = 0;

  size_t records() const { return gstep.size(); }
  void Clear();
};

// Walks the selected records of a TraceReader once (TraceReader::Read: ranks
// merged by gstep, Meta-based skipping, torn tails), the device-only records
// included for their fields. Value columns are summarized in place, as views
// of the mapping (no copy).
//
// Threads: with max_threads > 1 the walk runs on walker threads, started by
// the constructor, which read ahead into bounded queues of batches; the
// caller's thread takes batches in order. A read of one rank (a data file, as
// the report reads) is split into lanes (up to max_threads, at most
// kMaxLanes): each walker decodes every lanes-th block of frames and hops over
// the others by their length prefixes (ReadOptions::interleave), so decoding
// runs on several cores, and the caller takes the lanes' batches in turn. A
// read of several ranks has one walker. A batch's stats are computed by
// whichever thread claims it first: the caller when the batch is next, its
// walker (newest first) once a few batches wait unclaimed, its queue is full
// or its walk is over. So decoding, the stats and the caller's own work
// between Next() calls (the report's Python code) share the cores. The
// histogram rows, which add up in record order, are counted by the caller as
// it takes records. When the caller has taken a lane's last batch, its walker
// drops the files (their unmapping is off the caller's path). With
// max_threads 1 the caller walks a batch whenever it needs one; the results
// are the same.
//
// Not thread-safe (one caller). The destructor stops and joins the walkers.
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
  // lost with the chunk. So is a device trace that does not parse
  // (DeviceEventTable::Append's InvalidArgument).
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

  // A walker's own state: touched only by its thread (or the caller's, with
  // max_threads 1).
  struct Lane {
    // Released by the walker once the caller took the lane's last batch
    // (ReleaseFiles), so the mappings go with them.
    std::optional<TraceReader> reader;
    std::optional<TraceCursor> cursor;
    std::set<std::pair<size_t, int32_t>> unknown_seen;  // (file, dtype) already reported.
    // The file of the last record read and, per key, whether its column there
    // is a stats summary.
    std::shared_ptr<TraceFile> file;
    size_t file_index = 0;
    std::vector<bool> stats_summary;
    std::thread thread;  // Its walker, when max_threads > 1.
  };

  // Walker side.
  // Reads `lane`'s next batch: its next block of frames (when interleaved),
  // or records up to the batch limits, up to the end or an error. Null at the
  // end of an interleaved read that ends in another lane's block.
  std::unique_ptr<Batch> Walk(Lane& lane, size_t index);
  absl::Status AddFields(const Lane& lane, const TraceRecord& record, Batch* batch);
  absl::Status AddRecord(Lane& lane, const TraceRecord& record, Batch* batch);
  void WalkerLoop(size_t index);
  // A walker's end: waits until the caller popped its every batch, then drops
  // the lane's references to the files.
  void ReleaseFiles(Lane& lane, size_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
  std::vector<Lane> lanes_;  // One per walker; one with max_threads 1.
  const bool threads_;       // The lanes have walker threads.

  // Shared between the caller and the walker threads.
  mutable Mutex mu_;
  mutable CondVar changed_;  // A batch was queued, popped or computed; or stop_.
  std::vector<std::deque<std::unique_ptr<Batch>>> queues_ ABSL_GUARDED_BY(mu_);  // Per lane.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  // Caller state.
  uint64_t next_batch_ = 0;        // Batches taken; the next is lane next_batch_ % lanes'.
  size_t taken_ = 0;               // Records of the front batch already in a chunk.
  size_t taken_view_ = 0;          // Its views already counted into histogram rows.
  std::vector<OpenGroup> groups_;  // One per key.
  std::set<std::pair<std::string, int32_t>> unknown_reported_;  // Across the lanes.
  absl::Status error_;                                          // Sticky: the read failed.
  bool done_ = false;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_RECORD_SCAN_H_
