// Tests of the report's columnar record scan (analysis/record_scan.h) and TraceFile::CountFrames,
// against files written with protobuf's own serialization.
#include "analysis/record_scan.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "analysis/device_event_table.h"
#include "device_trace.pb.h"
#include "summary/column_stats.h"
#include "summary/summary.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {
namespace {

using test::AddColumn;
using test::Bytes;
using test::Frame;
using test::TempDir;
using test::WriteFile;

void AddSpan(xdl::proto::Record* record, xdl::proto::HostSpan::Kind kind, int64_t gstep,
             int64_t lstep, int64_t start_ns, int64_t end_ns) {
  xdl::proto::HostSpan* span = record->add_host_span();
  span->set_kind(kind);
  span->set_gstep(gstep);
  span->set_lstep(lstep);
  span->set_start_ns(start_ns);
  span->set_end_ns(end_ns);
}

// Keys "v" (float32[4], empty at odd gsteps), "s" (a stats summary: the
// Header says so), "loss" (a scalar). Traced every other step: each record
// carries its STEP span and the STEP_NOT_TRACED span of the step before, plus
// a CAPTURE_ENCODE span the scan ignores. The file ends in a device-only
// record carrying a DeviceTrace.
std::string WriteRun(const std::string& path, int records) {
  xdl::proto::Header header;
  for (const char* key : {"v", "s", "loss"}) header.add_key(key);
  header.add_column()->set_content(xdl::proto::ColumnDescriptor::VALUE);
  xdl::proto::ColumnDescriptor* stats = header.add_column();
  stats->set_content(xdl::proto::ColumnDescriptor::STATS);
  stats->set_layout_version(1);
  header.add_column()->set_content(xdl::proto::ColumnDescriptor::VALUE);
  std::string data = Frame(header.SerializeAsString());
  for (int i = 0; i < records; ++i) {
    const int64_t gstep = 2 * i;
    xdl::proto::Record record;
    record.set_gstep(gstep);
    record.set_lstep(gstep);
    record.set_timestamp(1700000000000 + gstep);
    const float g = static_cast<float>(gstep);
    if (i % 2 == 0) {
      AddColumn(&record, xdl::proto::Float, {4}, Bytes<float>({g, g + 1, g + 2, -g}));
    } else {
      AddColumn(&record, xdl::proto::Float, {0}, "");
    }
    // A stats summary: count 0 (nothing summarized) at i == 1.
    const double count = i == 1 ? 0 : 10;
    AddColumn(&record, xdl::proto::Double, {8}, Bytes<double>({count, -1, 1, 0.5, 0.25, 3, 0, 0}));
    AddColumn(&record, xdl::proto::Float, {}, Bytes<float>({g * 0.5f}));
    if (i > 0) {
      AddSpan(&record, xdl::proto::HostSpan::STEP_NOT_TRACED, gstep - 1, gstep - 1,
              1000 * (gstep - 1), 1000 * gstep - 1);
    }
    AddSpan(&record, xdl::proto::HostSpan::STEP, gstep, gstep, 1000 * gstep, 1000 * gstep + 900);
    AddSpan(&record, xdl::proto::HostSpan::CAPTURE_ENCODE, gstep, gstep, 0, 1);
    data += Frame(record.SerializeAsString());
  }
  xdl::proto::Record device_only;
  device_only.set_gstep(2 * (records - 1));
  device_only.set_timestamp(1700000000999);
  xdl::proto::DeviceTrace* trace = device_only.add_device_trace();
  trace->set_tracer("fake");
  trace->add_name("");
  trace->add_name("kernel");
  trace->set_dropped_events(3);
  xdl::proto::DeviceLine* line = trace->add_device()->add_line();
  line->set_id(7);
  xdl::proto::DeviceEvent* event = line->add_event();
  event->set_name_index(1);
  event->set_kind(xdl::proto::DEVICE_EVENT_KERNEL);
  event->set_start_ns(100);
  event->set_end_ns(200);
  data += Frame(device_only.SerializeAsString());
  WriteFile(path, data);
  return data;
}

// Every chunk of a scan, until it ends.
std::vector<internal::RecordScanChunk> ScanAll(const std::string& path,
                                               internal::RecordScanOptions options,
                                               size_t max_records, size_t max_histogram_rows) {
  auto reader = TraceReader::Open(path);
  REQUIRE(reader.ok());
  internal::RecordScan scan(*reader, std::move(options));
  std::vector<internal::RecordScanChunk> chunks;
  while (true) {
    chunks.emplace_back();
    absl::StatusOr<bool> more = scan.Next(max_records, max_histogram_rows, &chunks.back());
    INFO(more.status().ToString());
    REQUIRE(more.ok());
    if (!*more) return chunks;
  }
}

TEST_CASE("record scan: stats rows, summary rows, step spans and the device-only record",
          "[analysis]") {
  TempDir dir("record_scan");
  const std::string path = dir.path() + "/train.trace.0.0";
  WriteRun(path, 6);
  internal::DeviceEventTable device_events;
  internal::RecordScanOptions options;
  options.keys = {"loss", "v", "s"};
  options.device_events = &device_events;
  options.max_threads = GENERATE(1, 2);  // The caller alone, or with the walker thread.
  const auto chunks = ScanAll(path, options, /*max_records=*/4, /*max_histogram_rows=*/100);
  REQUIRE(chunks.size() == 2);  // 4 + 2 records: the device-only record is no record.
  std::vector<int64_t> gsteps;
  std::vector<double> stats;
  std::vector<internal::StepSpan> spans;
  for (const auto& c : chunks) {
    gsteps.insert(gsteps.end(), c.gstep.begin(), c.gstep.end());
    stats.insert(stats.end(), c.stats.begin(), c.stats.end());
    spans.insert(spans.end(), c.step_spans.begin(), c.step_spans.end());
    CHECK(c.rank == std::vector<int32_t>(c.records(), 0));
  }
  CHECK(gsteps == std::vector<int64_t>{0, 2, 4, 6, 8, 10});
  // The device-only record's trace, parsed into the table: its one event, rank 0.
  REQUIRE(device_events.size() == 1);
  CHECK(device_events.names()[device_events.name()[0]] == "kernel");
  CHECK(device_events.rank()[0] == 0);
  CHECK(device_events.line()[0] == 7);
  CHECK(device_events.end_ns()[0] == 200);
  CHECK(device_events.dropped_events() == 3);
  constexpr size_t kRow = internal::kStatsSize;
  auto cell = [&](size_t record, size_t key) { return stats.data() + (record * 3 + key) * kRow; };
  // loss: a scalar's stats, computed.
  CHECK(cell(2, 0)[internal::kStatsCount] == 1);
  CHECK(cell(2, 0)[internal::kStatsMean] == 2.0);
  // v: computed at even records, NaN where the column is empty.
  CHECK(cell(2, 1)[internal::kStatsCount] == 4);
  CHECK(cell(2, 1)[internal::kStatsMax] == 6.0);
  CHECK(cell(2, 1)[internal::kStatsMin] == -4.0);
  CHECK(std::isnan(cell(1, 1)[internal::kStatsCount]));
  // s: the summary's own row; NaN where it summarized nothing.
  CHECK(cell(0, 2)[internal::kStatsCount] == 10);
  CHECK(cell(0, 2)[internal::kStatsL2] == 3);
  CHECK(std::isnan(cell(1, 2)[internal::kStatsCount]));
  // Step spans: 6 traced, 5 not traced; CAPTURE_ENCODE left out.
  REQUIRE(spans.size() == 11);
  CHECK(std::count_if(spans.begin(), spans.end(), [](auto& s) { return s.traced; }) == 6);
  CHECK(spans[0].traced);
  CHECK(spans[0].end_ns == 900);
  CHECK_FALSE(spans[1].traced);
  CHECK(spans[1].gstep == 1);
  CHECK(spans[1].end_ns == 1999);
}

TEST_CASE("record scan: histogram rows sum groups of a key's records", "[analysis]") {
  TempDir dir("record_scan");
  const std::string path = dir.path() + "/train.trace.0.0";
  WriteRun(path, 12);  // "v" holds values at 6 records.
  internal::RecordScanOptions options;
  options.keys = {"v", "s", "loss"};
  options.histogram = {true, true, true};
  options.histogram_group = 4;
  options.max_threads = GENERATE(1, 2);
  const auto chunks = ScanAll(path, options, 5, 100);
  std::vector<int64_t> gsteps, records;
  std::vector<double> mins, maxs, total;
  for (const auto& c : chunks) {
    // Only "v": a stats summary and a scalar get no histogram.
    CHECK(c.histogram_key == std::vector<int32_t>(c.histogram_key.size(), 0));
    gsteps.insert(gsteps.end(), c.histogram_gstep.begin(), c.histogram_gstep.end());
    records.insert(records.end(), c.histogram_records.begin(), c.histogram_records.end());
    mins.insert(mins.end(), c.histogram_min.begin(), c.histogram_min.end());
    maxs.insert(maxs.end(), c.histogram_max.begin(), c.histogram_max.end());
    for (size_t r = 0; r < c.histogram_key.size(); ++r) {
      const double* row = c.buckets.data() + r * internal::kNumLogBuckets;
      total.push_back(std::accumulate(row, row + internal::kNumLogBuckets, 0.0));
    }
  }
  // v at gsteps 0, 4, 8, 12, 16, 20: a row of 4 records, then the last 2.
  CHECK(gsteps == std::vector<int64_t>{0, 16});
  CHECK(records == std::vector<int64_t>{4, 2});
  CHECK(total == std::vector<double>{16, 8});
  CHECK(mins == std::vector<double>{-12, -20});
  CHECK(maxs == std::vector<double>{14, 22});
}

TEST_CASE("record scan: a missing key is the reader's missing-key error", "[analysis]") {
  TempDir dir("record_scan");
  const std::string path = dir.path() + "/train.trace.0.0";
  WriteRun(path, 2);
  auto reader = TraceReader::Open(path);
  REQUIRE(reader.ok());
  internal::RecordScanOptions options;
  options.keys = {"nope"};
  options.max_threads = GENERATE(1, 2);
  internal::RecordScan scan(*reader, options);
  internal::RecordScanChunk chunk;
  const absl::StatusOr<bool> more = scan.Next(10, 10, &chunk);
  CHECK(IsMissingKeyError(more.status()));
  CHECK(more.status().message().find("nope") != absl::string_view::npos);
}

// Keys "w" (float32[64], NaN now and then), "x" (float32[300], empty at
// every 5th record), "s" (a stats summary), "loss": `records` records with
// their step spans, then a record that does not parse when `corrupt`.
std::string WriteLongRun(const std::string& path, int records, bool corrupt) {
  xdl::proto::Header header;
  for (const char* key : {"w", "x", "s", "loss"}) header.add_key(key);
  for (const auto content :
       {xdl::proto::ColumnDescriptor::VALUE, xdl::proto::ColumnDescriptor::VALUE,
        xdl::proto::ColumnDescriptor::STATS, xdl::proto::ColumnDescriptor::VALUE}) {
    xdl::proto::ColumnDescriptor* column = header.add_column();
    column->set_content(content);
    column->set_layout_version(1);
  }
  std::string data = Frame(header.SerializeAsString());
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  for (int i = 0; i < records; ++i) {
    xdl::proto::Record record;
    record.set_gstep(i);
    record.set_lstep(i);
    record.set_timestamp(1700000000000 + i);
    std::vector<float> w(64), x(i % 5 == 0 ? 0 : 300);
    for (float& v : w) v = normal(random) * static_cast<float>(1 + i % 13);
    for (float& v : x) v = normal(random) + static_cast<float>(i);
    if (i % 97 == 3) w[i % 64] = std::nanf("");
    AddColumn(&record, xdl::proto::Float, {64}, Bytes<float>(w));
    AddColumn(&record, xdl::proto::Float, {static_cast<int>(x.size())}, Bytes<float>(x));
    AddColumn(&record, xdl::proto::Double, {8}, Bytes<double>({3, -1, 1, 0, 1, 2, 0, 0}));
    AddColumn(&record, xdl::proto::Float, {}, Bytes<float>({1.0f / (1 + i)}));
    AddSpan(&record, xdl::proto::HostSpan::STEP, i, i, 1000 * i, 1000 * i + 900);
    data += Frame(record.SerializeAsString());
  }
  if (corrupt) data += Frame(std::string("\x0a\xff\xff\xff", 4));  // A key field cut short.
  WriteFile(path, data);
  return data;
}

// A scan's chunks, concatenated.
struct Scanned {
  std::vector<int64_t> gstep, histogram_gstep, histogram_records;
  std::vector<int32_t> histogram_key;
  std::vector<double> stats, buckets, histogram_min, histogram_max;
  std::vector<int64_t> span_ends;
  size_t chunks = 0;

  void Add(const internal::RecordScanChunk& c) {
    auto append = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
    append(gstep, c.gstep);
    append(stats, c.stats);
    append(histogram_key, c.histogram_key);
    append(histogram_gstep, c.histogram_gstep);
    append(histogram_records, c.histogram_records);
    append(histogram_min, c.histogram_min);
    append(histogram_max, c.histogram_max);
    append(buckets, c.buckets);
    for (const auto& span : c.step_spans) span_ends.push_back(span.end_ns);
    ++chunks;
  }
};

// Equal element by element, NaN equal to NaN.
bool SameValues(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) {
           return x == y || (std::isnan(x) && std::isnan(y));
         });
}

TEST_CASE("record scan: the walker thread gives what the caller alone gives", "[analysis]") {
  constexpr int kRecords = 5000;  // Several batches, and a read-ahead queue that fills.
  // Catch2 runs the case once per combination of the GENERATEs below (8): the file is
  // written once, and the caller-alone scan made once per group (a sanitizer build is ~10x
  // slower; under TSan twelve writes and 24 scans took over 400 s).
  static TempDir dir("record_scan");
  static const std::string path = dir.path() + "/train.trace.0.0";
  static const bool written = (WriteLongRun(path, kRecords, /*corrupt=*/false), true);
  REQUIRE(written);
  internal::RecordScanOptions options;
  options.keys = {"w", "x", "s", "loss"};
  options.histogram = {true, true, true, true};
  options.histogram_group = GENERATE(1, 16);
  auto scan = [&](int threads, size_t max_records, size_t max_rows) {
    options.max_threads = threads;
    Scanned out;
    for (const auto& chunk : ScanAll(path, options, max_records, max_rows)) out.Add(chunk);
    return out;
  };
  static std::map<int, Scanned> alone_by_group;
  if (!alone_by_group.count(options.histogram_group)) {
    alone_by_group[options.histogram_group] = scan(1, 100000, 100000);
  }
  const Scanned& alone = alone_by_group[options.histogram_group];
  REQUIRE(alone.gstep.size() == kRecords);
  REQUIRE(alone.span_ends.size() == kRecords);
  CHECK(alone.chunks == 1);
  CHECK_FALSE(alone.histogram_key.empty());
  // With the walker, in chunks smaller than a batch, of several batches and whole, histogram
  // rows cut or not.
  const auto [max_records, max_rows] =
      GENERATE(table<size_t, size_t>({{7, 3}, {1500, 100000}, {100000, 3}, {100000, 100000}}));
  INFO("group " << options.histogram_group << ", chunks of " << max_records << " records, "
                << max_rows << " histogram rows");
  const Scanned walker = scan(2, max_records, max_rows);
  CHECK(walker.gstep == alone.gstep);
  CHECK(SameValues(walker.stats, alone.stats));
  CHECK(walker.span_ends == alone.span_ends);
  CHECK(walker.histogram_key == alone.histogram_key);
  CHECK(walker.histogram_gstep == alone.histogram_gstep);
  CHECK(walker.histogram_records == alone.histogram_records);
  CHECK(SameValues(walker.histogram_min, alone.histogram_min));
  CHECK(SameValues(walker.histogram_max, alone.histogram_max));
  CHECK(walker.buckets == alone.buckets);
  CHECK(walker.chunks >= kRecords / max_records);
}

TEST_CASE("record scan: corruption ends the scan with the error, every call after too",
          "[analysis]") {
  TempDir dir("record_scan");
  const std::string path = dir.path() + "/train.trace.0.0";
  const std::string data = WriteLongRun(path, 3000, /*corrupt=*/true);
  auto reader = TraceReader::Open(path);
  REQUIRE(reader.ok());
  internal::RecordScanOptions options;
  options.keys = {"w", "loss"};
  options.max_threads = GENERATE(1, 2);
  internal::RecordScan scan(*reader, options);
  internal::RecordScanChunk chunk;
  size_t records = 0;
  absl::StatusOr<bool> more = true;
  while (more.ok() && *more) {
    more = scan.Next(1000, 100, &chunk);
    if (more.ok()) records += chunk.records();
  }
  INFO(more.status().ToString());
  CHECK(absl::IsDataLoss(more.status()));
  CHECK(more.status().message().find(path) != absl::string_view::npos);
  CHECK(records == 3000);  // Every record before the corrupt one, in the chunks before the error.
  CHECK(scan.Next(1000, 100, &chunk).status() == more.status());
  CHECK(chunk.records() == 0);
}

TEST_CASE("record scan: a scan dropped while its walker reads ahead stops", "[analysis]") {
  TempDir dir("record_scan");
  const std::string path = dir.path() + "/train.trace.0.0";
  WriteLongRun(path, 5000, /*corrupt=*/false);
  auto reader = TraceReader::Open(path);
  REQUIRE(reader.ok());
  internal::RecordScanOptions options;
  options.keys = {"w", "x"};
  options.max_threads = 2;
  for (size_t first : {size_t{1}, size_t{64}, size_t{4000}}) {
    internal::RecordScan scan(*reader, options);
    internal::RecordScanChunk chunk;
    const absl::StatusOr<bool> more = scan.Next(first, 100000, &chunk);
    REQUIRE(more.ok());
    CHECK(*more);
    CHECK(chunk.records() == first);
  }  // Each scan's destructor joins its walker (a hang fails the test by timeout).
}

TEST_CASE("record scan: a histogram row of small columns counts every n-th record", "[analysis]") {
  TempDir dir("record_scan");
  const std::string path = dir.path() + "/train.trace.0.0";
  // "big": 4096 values, all i + 1 at record i: a group of 8 has 32768 values,
  // twice kMaxHistogramSamples, so every 2nd record is counted.
  static_assert(internal::kMaxHistogramSamples == 16384, "the row below holds 2 x the samples");
  xdl::proto::Header header;
  header.add_key("big");
  std::string data = Frame(header.SerializeAsString());
  for (int i = 0; i < 16; ++i) {
    xdl::proto::Record record;
    record.set_gstep(i);
    AddColumn(&record, xdl::proto::Float, {4096},
              Bytes<float>(std::vector<float>(4096, static_cast<float>(i + 1))));
    data += Frame(record.SerializeAsString());
  }
  WriteFile(path, data);
  internal::RecordScanOptions options;
  options.keys = {"big"};
  options.histogram = {true};
  options.histogram_group = 8;
  options.max_threads = GENERATE(1, 2);
  const auto chunks = ScanAll(path, options, 100, 100);
  REQUIRE(chunks.size() == 1);
  const internal::RecordScanChunk& c = chunks[0];
  REQUIRE(c.histogram_key.size() == 2);
  CHECK(c.histogram_records == std::vector<int64_t>{8, 8});
  // Min and max from every record's stats; the counts from records 0, 2, 4, 6 (values 1, 3, 5, 7).
  CHECK(c.histogram_min == std::vector<double>{1, 9});
  CHECK(c.histogram_max == std::vector<double>{8, 16});
  const std::vector<double> edges = internal::LogBucketEdges();
  auto count_of = [&](size_t row, double value) {
    const size_t bucket = static_cast<size_t>(std::upper_bound(edges.begin(), edges.end(), value) -
                                              edges.begin() - 1);
    return c.buckets[row * internal::kNumLogBuckets + bucket];
  };
  const double* row0 = c.buckets.data();
  CHECK(std::accumulate(row0, row0 + internal::kNumLogBuckets, 0.0) == 4 * 4096);
  CHECK(count_of(0, 1) == 4096);
  CHECK(count_of(0, 7) == 4096);
  CHECK(count_of(0, 8) == 0);  // Record 7 is not counted.
  CHECK(count_of(1, 9) == 4096);
}

TEST_CASE("CountFrames counts what Verify reads, torn tails included", "[reader]") {
  TempDir dir("count_frames");
  const std::string path = dir.path() + "/train.trace.0.0";
  const std::string data = WriteRun(path, 5);
  for (const std::string& tail : {std::string(), std::string("\x10\x00", 2),
                                  std::string("\x40\x00\x00\x00xyz", 7), std::string(600, '\0')}) {
    WriteFile(path, data + tail);
    auto file = TraceFile::Open(path);
    REQUIRE(file.ok());
    const TraceFile::FrameCount count = (*file)->CountFrames();
    const VerifyReport report = (*file)->Verify();
    INFO("tail of " << tail.size() << " bytes");
    CHECK(count.records == 6);
    CHECK(count.records == report.records_read);
    CHECK(count.torn_tail == report.torn_tail);
    CHECK(count.torn_tail == !tail.empty());
    CHECK(count.corruption.empty());
  }
}

}  // namespace
}  // namespace xdl_trace
