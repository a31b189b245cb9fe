// RecordScan: walks records once, batching value columns into the stats kernel and picking the
// step spans and device traces out of the fields above 4.
#include "analysis/record_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/device_trace_fields.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "reader/wire_decoder.h"
#include "summary/column_stats.h"
#include "summary/summary.h"

namespace xdl_trace {
namespace internal {
namespace {

namespace fields = device_trace_fields;

constexpr uint32_t kRecordDeviceTrace = 5;        // xdl.proto.Record.device_trace
constexpr size_t kBatchBytes = size_t{64} << 20;  // Column bytes per stats-kernel call.
// A batch with histogram columns is flushed sooner, once it holds this many bytes of them in
// columns of at most kCacheColumnBytes: the log-bucket pass then re-reads them from the cache
// the stats pass just filled (per core L2 here: 4 MiB), not from memory. Larger columns keep
// the large batches that split the stats across cores.
constexpr size_t kCacheBatchBytes = size_t{2} << 20;
constexpr size_t kCacheColumnBytes = size_t{64} << 10;
// Histogram groups of at least this many records count into integer tables
// (clearing them costs about as much as counting a few records).
constexpr int64_t kTablesGroup = 8;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A STEP or STEP_NOT_TRACED span parsed from a HostSpan message; false for
// other kinds. DataLoss naming the record for a span that does not parse.
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
      case fields::kSpanKind:
        kind = value;
        break;
      case fields::kSpanStartNs:
        span->start_ns = value;
        break;
      case fields::kSpanEndNs:
        span->end_ns = value;
        break;
      case fields::kSpanGstep:
        span->gstep = value;
        break;
      case fields::kSpanLstep:
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
  span->traced = kind == static_cast<int64_t>(HostSpanKind::kStep);
  return span->traced || kind == static_cast<int64_t>(HostSpanKind::kStepNotTraced);
}

// Per key of `keys`: whether `file`'s column of it is a stats summary of a
// layout this reader knows (its float64[8] is the stats row itself).
std::vector<bool> StatsSummaries(const TraceFile& file, const std::vector<std::string>& keys) {
  std::vector<bool> out(keys.size(), false);
  if (file.columns().empty()) return out;
  const std::vector<std::string>& file_keys = file.keys();
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto it = std::find(file_keys.begin(), file_keys.end(), keys[k]);
    if (it == file_keys.end()) continue;
    const ColumnInfo& info = file.columns()[static_cast<size_t>(it - file_keys.begin())];
    out[k] = info.content == ColumnInfo::Content::kStats &&
             info.layout_version <= xdl_trace::kSummaryLayoutVersion;
  }
  return out;
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
  device_traces.clear();
  torn_tails.clear();
  unknown_dtypes.clear();
}

RecordScan::RecordScan(const TraceReader& reader, RecordScanOptions options)
    : reader_(reader),
      options_(std::move(options)),
      cursor_(reader_.Read(ReadOptions{options_.keys, options_.steps, options_.ranks,
                                       /*device_only_records=*/true})) {
  options_.histogram.resize(options_.keys.size(), false);
  options_.histogram_group = std::max<int64_t>(options_.histogram_group, 1);
  groups_.resize(options_.keys.size());
}

absl::StatusOr<bool> RecordScan::Next(size_t max_records, size_t max_histogram_rows,
                                      RecordScanChunk* chunk) {
  chunk->Clear();
  pending_.Clear();
  if (done_) return false;
  max_records = std::max<size_t>(max_records, 1);
  max_histogram_rows = std::max<size_t>(max_histogram_rows, 1);
  const size_t keys = options_.keys.size();
  for (auto* column : {&chunk->gstep, &chunk->lstep, &chunk->timestamp_ms}) {
    column->reserve(max_records);
  }
  chunk->rank.reserve(max_records);
  chunk->stats.reserve(max_records * keys * kStatsSize);
  pending_.views.reserve(max_records * keys);
  pending_.histogram.reserve(max_records * keys);
  pending_.cells.reserve(max_records * keys);
  size_t histogram_rows = 0;
  while (chunk->records() < max_records && histogram_rows < max_histogram_rows) {
    XDL_ASSIGN_OR_RETURN(const TraceCursor::Event event, cursor_.Next());
    if (event == TraceCursor::Event::kEnd) {
      done_ = true;
      break;
    }
    if (event == TraceCursor::Event::kTornTail) {
      chunk->torn_tails.push_back(cursor_.torn_tail());
      continue;
    }
    const TraceRecord& record = cursor_.record();
    XDL_RETURN_IF_ERROR(AddFields(record, chunk));
    if (record.device_only) continue;  // Its fields only: it is no step of the run.
    XDL_RETURN_IF_ERROR(AddRecord(record, chunk));
    histogram_rows = chunk->histogram_key.size() +
                     pending_.flagged / static_cast<size_t>(options_.histogram_group);
    if (pending_.bytes >= kBatchBytes || pending_.cached_bytes >= kCacheBatchBytes) Flush(chunk);
  }
  Flush(chunk);
  if (done_) {
    for (size_t k = 0; k < groups_.size(); ++k) {
      if (groups_[k].records > 0) EmitGroup(k, chunk);
    }
  }
  return !done_;
}

absl::Status RecordScan::AddFields(const TraceRecord& record, RecordScanChunk* chunk) {
  const std::vector<RawField>& extra = record.view.extra_fields;
  if (extra.empty()) return absl::OkStatus();
  const std::string& path = reader_.files()[record.file].path;
  for (const RawField& field : extra) {
    if (field.wire_type != kWireLengthDelimited) continue;
    if (field.number == kRecordDeviceTrace) {
      chunk->device_traces.emplace_back(field.payload);
    } else if (field.number == fields::kRecordHostSpan) {
      StepSpan span;
      XDL_ASSIGN_OR_RETURN(const bool step, ParseStepSpan(field.payload, record, path, &span));
      if (step) chunk->step_spans.push_back(span);
    }
  }
  return absl::OkStatus();
}

absl::Status RecordScan::AddRecord(const TraceRecord& record, RecordScanChunk* chunk) {
  const size_t keys = options_.keys.size();
  const size_t index = chunk->records();
  chunk->gstep.push_back(record.view.gstep);
  chunk->lstep.push_back(record.view.lstep);
  chunk->timestamp_ms.push_back(record.view.timestamp_ms);
  chunk->rank.push_back(record.rank);
  chunk->stats.resize((index + 1) * keys * kStatsSize, kNaN);
  if (keys == 0) return absl::OkStatus();
  if (file_ == nullptr || file_index_ != record.file) {
    XDL_ASSIGN_OR_RETURN(file_, reader_.File(record.file));
    file_index_ = record.file;
    stats_summary_ = StatsSummaries(*file_, options_.keys);
  }
  for (size_t k = 0; k < keys; ++k) {
    const ColumnView& column = record.view.columns[k];
    const size_t cell = index * keys + k;
    if (column.empty()) continue;  // No value at this step.
    if (stats_summary_[k]) {
      // Its own row, when it summarizes something (count 0: a watch(every=) gap).
      if (column.dtype != DType::kFloat64 || column.NumElements() != kStatsSize) continue;
      double* row = chunk->stats.data() + cell * kStatsSize;
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
      if (unknown_seen_.emplace(record.file, static_cast<int32_t>(column.dtype)).second) {
        chunk->unknown_dtypes.emplace_back(file_->path(), static_cast<int32_t>(column.dtype));
      }
    }
    const int64_t elements = view.NumElements();
    if (elements <= 0) continue;  // A shape with a zero dimension: no value either.
    const bool histogram = options_.histogram[k] && elements > 1;
    pending_.bytes += view.NumBytes();
    pending_.flagged += histogram ? 1 : 0;
    if (histogram && view.NumBytes() <= kCacheColumnBytes) pending_.cached_bytes += view.NumBytes();
    pending_.views.push_back(std::move(view));
    pending_.histogram.push_back(histogram);
    pending_.cells.push_back(cell);
  }
  return absl::OkStatus();
}

void RecordScan::Flush(RecordScanChunk* chunk) {
  const size_t n = pending_.views.size();
  if (n == 0) return;
  scratch_stats_.resize(n * kStatsSize);
  // Stats only (split across threads); the counts go straight into the keys'
  // open rows below, on this thread (a large tensor is sampled: cheap).
  ComputeColumnStats(pending_.views, std::vector<bool>(n, false), scratch_stats_.data(), nullptr,
                     options_.max_threads);
  const size_t keys = options_.keys.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t cell = pending_.cells[i];
    const double* row = scratch_stats_.data() + i * kStatsSize;
    std::memcpy(chunk->stats.data() + cell * kStatsSize, row, kStatsSize * sizeof(double));
    if (!pending_.histogram[i]) continue;
    OpenGroup& group = groups_[cell % keys];
    const bool tables = options_.histogram_group >= kTablesGroup;
    if (group.records == 0) {
      group.gstep = chunk->gstep[cell / keys];
      group.counts.assign(kNumLogBuckets, 0.0);
      if (tables) group.tables.assign(kLogBucketTables * kNumLogBuckets, 0);
      group.finite = false;
    }
    if (tables) {
      AccumulateLogBucketTables(pending_.views[i], group.tables.data(), kMaxHistogramSamples);
    } else {
      AccumulateLogBuckets(pending_.views[i], group.counts.data(), kMaxHistogramSamples);
    }
    if (!std::isnan(row[kStatsMin])) {
      group.min = group.finite ? std::min(group.min, row[kStatsMin]) : row[kStatsMin];
      group.max = group.finite ? std::max(group.max, row[kStatsMax]) : row[kStatsMax];
      group.finite = true;
    }
    if (++group.records == options_.histogram_group) EmitGroup(cell % keys, chunk);
  }
  pending_.Clear();
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
