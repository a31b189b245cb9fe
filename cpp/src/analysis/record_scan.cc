// RecordScan: walks records once in batches (on a walker thread when allowed), computing the stats
// of their value columns, counting histogram rows, and picking the step spans and device traces out
// of the fields above 4.
#include "analysis/record_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/numeric.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "core/wire_reader.h"
#include "device_trace.pb.h"
#include "summary/column_stats.h"
#include "summary/summary.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

// Field numbers from the generated code: the .proto is their one source.
using xdl::proto::HostSpan;
using xdl::proto::Record;

// A batch ends at whichever limit comes first. Small batches keep the two
// threads' shares even; a batch of large columns can be split across threads
// by ComputeColumnStats (a few million elements per thread).
constexpr size_t kBatchRecords = 1024;
constexpr size_t kBatchCells = 8192;              // Record x key cells.
constexpr size_t kBatchBytes = size_t{64} << 20;  // Column bytes.
// The walkers' read-ahead, two chunks of the caller's (131,072 cells each), so
// they keep reading while the caller is away between Next() calls. A queued
// cell holds its stats row (64 bytes) and, for a value column, a view (about
// 90 bytes): 40 MB at most.
constexpr size_t kMaxQueuedBatches = 32;
// Walkers of a read of one rank: decoding lanes (ReadOptions::interleave).
constexpr size_t kMaxLanes = 4;
// A walker computes batches too once this many are waiting unclaimed.
constexpr size_t kComputeWhenUnclaimed = 2;
// A histogram row counts about this many values of columns small enough to be
// counted whole (at most kMaxHistogramSamples elements): every `every`-th
// record of the row, `every` = max(1, histogram_group x elements / kRowSamples),
// as a large column is sampled within itself (AccumulateLogBuckets). The min
// and max of a row come from every record's stats.
constexpr int64_t kRowSamples = kMaxHistogramSamples;
// Histogram groups of at least this many records count into integer tables
// (clearing them costs about as much as counting a few records).
constexpr int64_t kTablesGroup = 8;

// Records per batch for `keys` keys (kBatchRecords, fewer when the cells would
// pass kBatchCells): also an interleaved read's frames per block, so that a
// lane's block fits one batch.
size_t BatchRecords(size_t keys) {
  return std::max<size_t>(std::min(kBatchRecords, kBatchCells / std::max<size_t>(keys, 1)), 1);
}

bool IsStepKind(int64_t kind) {
  return kind == static_cast<int64_t>(HostSpan::STEP) ||
         kind == static_cast<int64_t>(HostSpan::STEP_NOT_TRACED);
}

// Whether a HostSpan message is a RANGE (the writer puts its kind first).
bool IsRangeSpan(absl::string_view message) {
  WireReader reader(message);
  WireField field;
  return reader.Next(&field) && field.number == HostSpan::kKindFieldNumber &&
         field.wire_type == kWireVarint && field.varint == HostSpan::RANGE;
}

// A STEP or STEP_NOT_TRACED span parsed from a HostSpan message; false for
// other kinds, as soon as the kind is read (the writer puts it first: most
// spans are of other kinds, and their rest goes unread). DataLoss naming the
// record for a span that does not parse up to there.
absl::StatusOr<bool> ParseStepSpan(absl::string_view message, const TraceRecord& record,
                                   const std::string& path, StepSpan* span) {
  WireReader reader(message);
  WireField field;
  int64_t kind = 0;
  *span = StepSpan{};
  span->rank = record.rank;
  while (reader.Next(&field)) {
    if (field.wire_type != kWireVarint) continue;
    const auto value = static_cast<int64_t>(field.varint);
    switch (field.number) {
      case HostSpan::kKindFieldNumber:
        kind = value;
        if (!IsStepKind(kind)) return false;
        break;
      case HostSpan::kStartNsFieldNumber:
        span->start_ns = value;
        break;
      case HostSpan::kEndNsFieldNumber:
        span->end_ns = value;
        break;
      case HostSpan::kGstepFieldNumber:
        span->gstep = value;
        break;
      case HostSpan::kLstepFieldNumber:
        span->lstep = value;
        break;
      default:
        break;
    }
  }
  if (reader.error() != nullptr) {
    return absl::DataLossError(absl::StrCat(path, ": record at byte offset ", record.view.offset,
                                            ": a host span does not parse: ", reader.error()));
  }
  span->traced = kind == static_cast<int64_t>(HostSpan::STEP);
  return IsStepKind(kind);
}

// Per key of `keys`: whether `file`'s column of it is a stats summary of a
// layout this reader knows (its float64[8] is the stats row itself).
std::vector<bool> StatsSummaries(const TraceFile& file, const std::vector<std::string>& keys) {
  std::vector<bool> out(keys.size(), false);
  if (file.columns().empty()) return out;
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::optional<size_t> index = file.KeyIndex(keys[k]);
    if (!index) continue;
    const ColumnInfo& info = file.columns()[*index];
    out[k] = info.content == ColumnInfo::Content::kStats &&
             info.layout_version <= xdl_trace::kSummaryLayoutVersion;
  }
  return out;
}

RecordScanOptions Normalized(RecordScanOptions options) {
  options.histogram.resize(options.keys.size(), false);
  options.histogram_group = std::max<int64_t>(options.histogram_group, 1);
  options.max_threads = std::max(options.max_threads, 1);
  return options;
}

}  // namespace

void RecordScanChunk::Clear() {
  gstep.clear();
  lstep.clear();
  timestamp_ms.clear();
  rank.clear();
  stats.clear();
  histogram_key.clear();
  histogram_gstep.clear();
  histogram_records.clear();
  histogram_min.clear();
  histogram_max.clear();
  buckets.clear();
  step_spans.clear();
  end_offset = 0;
  torn_tails.clear();
  unknown_dtypes.clear();
}

// Records the walk read, in order, with the value columns whose stats are still
// to compute. Written by the walk before it is queued; then `rows` by the one
// thread that claimed it; read by the caller once `computed`. The views point
// into mappings the reader keeps (it caches every file it opened) until the
// walker releases it, after the caller popped the last batch.
struct RecordScan::Batch {
  std::vector<int64_t> gstep, lstep, timestamp_ms;
  std::vector<int32_t> rank;
  // records x keys x kStatsSize: NaN where a column holds no value, a stats
  // summary's own row (copied by the walk), the rest filled by Compute().
  std::vector<double> rows;
  // Value columns to summarize, in record order, with their cells (record *
  // keys + key) and whether they get log-bucket counts.
  std::vector<TensorView> views;
  std::vector<size_t> cells;
  std::vector<uint8_t> histogram;
  std::vector<StepSpan> step_spans;
  // (rank, serialized DeviceTrace) of each Record field 5 (when the options
  // have a table), in record order: views of the mapping, like `views`.
  std::vector<std::pair<int32_t, absl::string_view>> device_traces;
  // (rank, serialized HostSpan) of each RANGE span, likewise.
  std::vector<std::pair<int32_t, absl::string_view>> range_spans;
  std::vector<TornTail> torn_tails;
  std::vector<std::pair<std::string, int32_t>> unknown_dtypes;
  size_t bytes = 0;         // Column bytes of `views`.
  absl::Status status;      // The walk failed after these records.
  bool last = false;        // No batch follows.
  uint64_t end_offset = 0;  // The last batch's: TraceCursor::end_offset.
  // Guarded by RecordScan::mu_ once queued.
  bool claimed = false;   // A thread computes (or computed) it.
  bool computed = false;  // `rows` are final.

  size_t records() const { return gstep.size(); }
};

RecordScan::RecordScan(const TraceReader& reader, RecordScanOptions options)
    : options_(Normalized(std::move(options))),
      threads_(options_.max_threads > 1),
      groups_(options_.keys.size()) {
  // Lanes for a read of one rank (the walkers decode in turn, block by block).
  size_t ranks = 0;
  for (int32_t rank : reader.ranks()) {
    const auto& wanted = options_.ranks;
    ranks += !wanted || std::find(wanted->begin(), wanted->end(), rank) != wanted->end();
  }
  const size_t lanes = threads_ && ranks == 1
                           ? std::min<size_t>(static_cast<size_t>(options_.max_threads), kMaxLanes)
                           : 1;
  lanes_.resize(lanes);
  for (size_t i = 0; i < lanes; ++i) {
    ReadOptions read;
    read.keys = options_.keys;
    read.steps = options_.steps;
    read.ranks = options_.ranks;
    read.device_only_records = true;
    read.start_offset = options_.start_offset;
    if (lanes > 1) {
      read.interleave = ReadOptions::Interleave{static_cast<int>(lanes), static_cast<int>(i),
                                                BatchRecords(options_.keys.size()), kBatchBytes};
    }
    lanes_[i].reader = reader;
    lanes_[i].cursor = lanes_[i].reader->Read(std::move(read));
  }
  {
    MutexLock lock(&mu_);
    queues_.resize(lanes);
  }
  if (!threads_) return;
  for (size_t i = 0; i < lanes; ++i) {
    lanes_[i].thread = std::thread([this, i] { WalkerLoop(i); });
  }
}

RecordScan::~RecordScan() {
  if (!threads_) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  for (Lane& lane : lanes_) lane.thread.join();
}

absl::StatusOr<bool> RecordScan::Next(size_t max_records, size_t max_histogram_rows,
                                      RecordScanChunk* chunk) {
  chunk->Clear();
  XDL_RETURN_IF_ERROR(error_);
  if (done_) return false;
  max_records = std::max<size_t>(max_records, 1);
  max_histogram_rows = std::max<size_t>(max_histogram_rows, 1);
  const size_t keys = options_.keys.size();
  const size_t row = keys * kStatsSize;
  for (auto* column : {&chunk->gstep, &chunk->lstep, &chunk->timestamp_ms}) {
    column->reserve(max_records);
  }
  chunk->rank.reserve(max_records);
  chunk->stats.reserve(max_records * row);
  while (chunk->records() < max_records && chunk->histogram_key.size() < max_histogram_rows) {
    Batch* batch = Front();
    if (taken_ == batch->records() && !batch->status.ok()) {  // The walk failed here.
      error_ = batch->status;
      return error_;
    }
    if (taken_ == 0) {  // The batch's fields go with its first records.
      auto append = [](auto& to, auto& from) {
        to.insert(to.end(), std::make_move_iterator(from.begin()),
                  std::make_move_iterator(from.end()));
      };
      append(chunk->step_spans, batch->step_spans);
      for (const auto& [rank, payload] : batch->device_traces) {
        error_ = options_.device_events->Append(payload, rank);
        if (!error_.ok()) return error_;
      }
      for (const auto& [rank, payload] : batch->range_spans) {
        error_ = options_.device_events->AppendRange(payload, rank);
        if (!error_.ok()) return error_;
      }
      append(chunk->torn_tails, batch->torn_tails);
      for (auto& unknown : batch->unknown_dtypes) {  // Once, whichever lane met it.
        if (unknown_reported_.insert(unknown).second) chunk->unknown_dtypes.push_back(unknown);
      }
    }
    // Records [taken_, end): up to the chunk's size, and with the histogram
    // rows counted record by record up to their limit.
    const size_t begin = taken_;
    size_t end = std::min(batch->records(), begin + (max_records - chunk->records()));
    for (size_t r = begin; r < end; ++r) {
      CountHistograms(*batch, r, &taken_view_, chunk);
      if (chunk->histogram_key.size() >= max_histogram_rows) end = r + 1;
    }
    auto copy = [&](auto& to, const auto& from, size_t width) {
      to.insert(to.end(), from.begin() + begin * width, from.begin() + end * width);
    };
    copy(chunk->gstep, batch->gstep, 1);
    copy(chunk->lstep, batch->lstep, 1);
    copy(chunk->timestamp_ms, batch->timestamp_ms, 1);
    copy(chunk->rank, batch->rank, 1);
    copy(chunk->stats, batch->rows, row);
    taken_ = end;
    if (taken_ == batch->records() && batch->status.ok()) {
      const bool last = batch->last;
      const uint64_t end_offset = batch->end_offset;
      PopFront();
      if (last) {
        chunk->end_offset = end_offset;
        done_ = true;
        break;
      }
    }
  }
  if (done_) {
    for (size_t k = 0; k < groups_.size(); ++k) {
      if (groups_[k].records > 0) EmitGroup(k, chunk);
    }
  }
  return !done_;
}

RecordScan::Batch* RecordScan::Front() {
  const size_t index = next_batch_ % lanes_.size();
  MutexLock lock(&mu_);
  std::deque<std::unique_ptr<Batch>>& queue = queues_[index];
  if (queue.empty() && !threads_) {  // No walker thread: the caller walks.
    mu_.Unlock();
    std::unique_ptr<Batch> batch = Walk(lanes_[index], index);
    mu_.Lock();
    queue.push_back(std::move(batch));
  }
  // The lane always ends with a last batch, or its read with one in another lane.
  while (queue.empty()) changed_.Wait(&mu_);
  Batch* batch = queue.front().get();
  if (!batch->claimed) ClaimAndCompute(batch);
  while (!batch->computed) changed_.Wait(&mu_);  // Its walker is computing it.
  return batch;
}

void RecordScan::ClaimAndCompute(Batch* batch) {
  batch->claimed = true;
  mu_.Unlock();
  Compute(batch);
  mu_.Lock();
  batch->computed = true;
  changed_.SignalAll();
}

void RecordScan::PopFront() {
  std::unique_ptr<Batch> done;  // Freed outside the lock.
  {
    MutexLock lock(&mu_);
    std::deque<std::unique_ptr<Batch>>& queue = queues_[next_batch_ % lanes_.size()];
    done = std::move(queue.front());
    queue.pop_front();
    changed_.SignalAll();
  }
  ++next_batch_;
  taken_ = taken_view_ = 0;
}

void RecordScan::WalkerLoop(size_t index) {
  Lane& lane = lanes_[index];
  const size_t max_queued = std::max<size_t>(kMaxQueuedBatches / lanes_.size(), 2);
  while (true) {
    std::unique_ptr<Batch> batch = Walk(lane, index);
    const bool last = batch == nullptr || batch->last;
    MutexLock lock(&mu_);
    std::deque<std::unique_ptr<Batch>>& queue = queues_[index];
    if (batch != nullptr) queue.push_back(std::move(batch));
    changed_.SignalAll();
    // Compute while the caller is behind (batches of a few walks wait
    // unclaimed: it is computing, or away between Next() calls), while the
    // queue is full, and once the walk is over; newest first (the caller takes
    // the oldest).
    while (!stop_) {
      Batch* newest = nullptr;
      size_t unclaimed = 0;
      for (auto it = queue.rbegin(); it != queue.rend(); ++it) {
        if ((*it)->claimed) continue;
        if (newest == nullptr) newest = it->get();
        ++unclaimed;
      }
      const bool full = queue.size() >= max_queued;
      if (newest != nullptr && (unclaimed >= kComputeWhenUnclaimed || full || last)) {
        ClaimAndCompute(newest);
      } else if (last) {
        return ReleaseFiles(lane, index);
      } else if (full) {
        changed_.Wait(&mu_);
      } else {
        break;  // Walk on.
      }
    }
    if (stop_) return;
  }
}

void RecordScan::ReleaseFiles(Lane& lane, size_t index) {
  // Once the caller holds none of the lane's batches, the walk's references
  // are the mappings' last (with the other lanes'): unmapping (milliseconds
  // per 100 MB) happens here, not in the caller.
  while (!stop_ && !queues_[index].empty()) changed_.Wait(&mu_);
  mu_.Unlock();
  lane.file.reset();
  lane.cursor.reset();
  lane.reader.reset();
  mu_.Lock();
}

std::unique_ptr<RecordScan::Batch> RecordScan::Walk(Lane& lane, size_t index) {
  auto batch = std::make_unique<Batch>();
  const size_t keys = options_.keys.size();
  const size_t max_records = BatchRecords(keys);
  for (auto* column : {&batch->gstep, &batch->lstep, &batch->timestamp_ms}) {
    column->reserve(max_records);
  }
  batch->rank.reserve(max_records);
  batch->rows.assign(max_records * keys * kStatsSize, kNaN);  // Cut to the records at the end.
  batch->views.reserve(max_records * keys);
  batch->cells.reserve(max_records * keys);
  // Interleaved, a batch is one block of the lane (the read says where it
  // ends); otherwise the limits above end it.
  const size_t lanes = lanes_.size();
  auto mine = [&] { return lane.cursor->block() % lanes == index; };
  TraceCursor& cursor = *lane.cursor;
  while (lanes > 1 || (batch->records() < max_records && batch->bytes < kBatchBytes)) {
    absl::StatusOr<TraceCursor::Event> event = cursor.Next();
    // The end, a torn tail or an error of the read belongs to the block it is
    // met in: another lane's is that lane's to report, and this lane is done.
    if (!event.ok() || *event == TraceCursor::Event::kEnd) {
      if (lanes > 1 && !mine()) return nullptr;
      batch->status = event.status();
      batch->last = true;
      batch->end_offset = cursor.end_offset();
      break;
    }
    if (*event == TraceCursor::Event::kBlockEnd) break;
    if (*event == TraceCursor::Event::kTornTail) {
      if (lanes == 1 || mine()) batch->torn_tails.push_back(cursor.torn_tail());
      continue;
    }
    const TraceRecord& record = cursor.record();  // Of this lane's block.
    absl::Status status = AddFields(lane, record, batch.get());
    // A device-only record gives its fields only: it is no step of the run.
    if (status.ok() && !record.device_only) status = AddRecord(lane, record, batch.get());
    if (!status.ok()) {
      batch->status = std::move(status);
      batch->last = true;
      break;
    }
  }
  batch->rows.resize(batch->records() * keys * kStatsSize);
  return batch;
}

void RecordScan::Compute(Batch* batch) const {
  const size_t n = batch->views.size();
  const int threads = std::max(options_.max_threads / 2, 1);  // The walker and the caller share.
  if (threads == 1) {
    for (size_t i = 0; i < n; ++i) {
      ComputeStats(batch->views[i], batch->rows.data() + batch->cells[i] * kStatsSize);
    }
    return;
  }
  std::vector<double> stats(n * kStatsSize);
  ComputeColumnStats(batch->views, std::vector<bool>(n, false), stats.data(), nullptr, threads);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(batch->rows.data() + batch->cells[i] * kStatsSize, stats.data() + i * kStatsSize,
                kStatsSize * sizeof(double));
  }
}

absl::Status RecordScan::AddFields(const Lane& lane, const TraceRecord& record, Batch* batch) {
  const std::vector<RawField>& extra = record.view.extra_fields;
  if (extra.empty()) return absl::OkStatus();
  const std::string& path = lane.reader->files()[record.file].path;
  for (const RawField& field : extra) {
    if (field.wire_type != kWireLengthDelimited) continue;
    if (field.number == Record::kDeviceTraceFieldNumber) {
      if (options_.device_events != nullptr) {
        batch->device_traces.emplace_back(record.rank, field.payload);
      }
    } else if (field.number == Record::kHostSpanFieldNumber) {
      StepSpan span;
      XDL_ASSIGN_OR_RETURN(const bool step, ParseStepSpan(field.payload, record, path, &span));
      if (step) {
        batch->step_spans.push_back(span);
      } else if (options_.device_events != nullptr && IsRangeSpan(field.payload)) {
        batch->range_spans.emplace_back(record.rank, field.payload);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RecordScan::AddRecord(Lane& lane, const TraceRecord& record, Batch* batch) {
  const size_t keys = options_.keys.size();
  const size_t index = batch->records();
  batch->gstep.push_back(record.view.gstep);
  batch->lstep.push_back(record.view.lstep);
  batch->timestamp_ms.push_back(record.view.timestamp_ms);
  batch->rank.push_back(record.rank);
  if (keys == 0) return absl::OkStatus();
  if (lane.file == nullptr || lane.file_index != record.file) {
    XDL_ASSIGN_OR_RETURN(lane.file, lane.reader->File(record.file));
    lane.file_index = record.file;
    lane.stats_summary = StatsSummaries(*lane.file, options_.keys);
  }
  for (size_t k = 0; k < keys; ++k) {
    const ColumnView& column = record.view.columns[k];
    const size_t cell = index * keys + k;
    if (column.empty()) continue;  // No value at this step.
    if (lane.stats_summary[k]) {
      // Its own row, when it summarizes something (count 0: a watch(every=) gap).
      if (column.dtype != DType::kFloat64 || column.NumElements() != kStatsSize) continue;
      double* row = batch->rows.data() + cell * kStatsSize;
      std::memcpy(row, column.data.data(), kStatsSize * sizeof(double));
      if (!(row[kStatsCount] > 0)) std::fill(row, row + kStatsSize, kNaN);
      continue;
    }
    TensorView view;
    if (column.known_dtype()) {
      view = TensorView{column.dtype, column.shape, column.data.data()};
    } else {
      // Newer than this reader: summarized as its raw bytes, as the reader hands them out.
      view =
          TensorView{DType::kUInt8, {static_cast<int64_t>(column.data.size())}, column.data.data()};
      if (lane.unknown_seen.emplace(record.file, static_cast<int32_t>(column.dtype)).second) {
        batch->unknown_dtypes.emplace_back(lane.file->path(), static_cast<int32_t>(column.dtype));
      }
    }
    const int64_t elements = view.NumElements();
    if (elements <= 0) continue;  // A shape with a zero dimension: no value either.
    batch->bytes += view.NumBytes();
    batch->histogram.push_back(options_.histogram[k] && elements > 1);
    batch->views.push_back(std::move(view));
    batch->cells.push_back(cell);
  }
  return absl::OkStatus();
}

void RecordScan::CountHistograms(const Batch& batch, size_t r, size_t* view,
                                 RecordScanChunk* chunk) {
  const size_t keys = options_.keys.size();
  const bool tables = options_.histogram_group >= kTablesGroup;
  for (; *view < batch.views.size() && batch.cells[*view] / keys == r; ++*view) {
    if (!batch.histogram[*view]) continue;
    const size_t key = batch.cells[*view] % keys;
    const TensorView& tensor = batch.views[*view];
    const double* row = batch.rows.data() + batch.cells[*view] * kStatsSize;
    OpenGroup& group = groups_[key];
    if (group.records == 0) {
      group.gstep = batch.gstep[r];
      group.counts.assign(kNumLogBuckets, 0.0);
      if (tables) group.tables.assign(kLogBucketTables * kNumLogBuckets, 0);
      group.finite = false;
      const int64_t elements = tensor.NumElements();
      group.every = elements > kMaxHistogramSamples
                        ? 1
                        : std::max<int64_t>(1, options_.histogram_group * elements / kRowSamples);
    }
    if (group.records % group.every == 0) {
      if (tables) {
        AccumulateLogBucketTables(tensor, group.tables.data(), kMaxHistogramSamples);
      } else {
        AccumulateLogBuckets(tensor, group.counts.data(), kMaxHistogramSamples);
      }
    }
    if (!std::isnan(row[kStatsMin])) {
      group.min = group.finite ? std::min(group.min, row[kStatsMin]) : row[kStatsMin];
      group.max = group.finite ? std::max(group.max, row[kStatsMax]) : row[kStatsMax];
      group.finite = true;
    }
    if (++group.records == options_.histogram_group) EmitGroup(key, chunk);
  }
}

void RecordScan::EmitGroup(size_t key, RecordScanChunk* chunk) {
  OpenGroup& group = groups_[key];
  if (options_.histogram_group >= kTablesGroup) {
    AddLogBucketTables(group.tables.data(), group.counts.data());
  }
  chunk->histogram_key.push_back(static_cast<int32_t>(key));
  chunk->histogram_gstep.push_back(group.gstep);
  chunk->histogram_records.push_back(group.records);
  chunk->histogram_min.push_back(group.finite ? group.min : kNaN);
  chunk->histogram_max.push_back(group.finite ? group.max : kNaN);
  chunk->buckets.insert(chunk->buckets.end(), group.counts.begin(), group.counts.end());
  group.records = 0;
}

}  // namespace internal
}  // namespace xdl_trace
