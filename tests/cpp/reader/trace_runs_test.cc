// Tests of TraceReader::Runs and OfRun: files grouped by run id, run info from the Header, the
// order of runs, selection by id or prefix, and XDL files as one run without an id.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/trace_writer.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/runs.h"
#include "xdl_trace/reader/trace_cursor.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {
namespace {

using test::TempDir;

internal::EncodedRecord Record(int64_t gstep) {
  xdl::proto::Record record;
  record.set_gstep(gstep);
  record.set_timestamp(1'700'000'000'000 + gstep);
  xdl::proto::Column* column = record.add_column();
  column->set_dtype(xdl::proto::Float);
  column->add_shape(1);
  column->set_data(std::string(4, '\0'));
  internal::EncodedRecord r;
  r.gstep = gstep;
  r.timestamp_ms = 1'700'000'000'000 + gstep;
  r.frame = test::Sealed(test::Frame(record.SerializeAsString()));  // As the encoder seals it.
  return r;
}

// One rank of a run: `gsteps` records, RunInfo started at `start_ms`.
void WriteRank(const std::string& dir, const std::string& run_id, int32_t rank, int64_t start_ms,
               const std::vector<int64_t>& gsteps) {
  TraceConfig config;
  config.output_dir = dir;
  config.rank = rank;
  config.fsync = false;
  config.run_id = run_id;
  config.run.world_size = 2;
  config.run.hostname = "node-" + std::to_string(rank);
  config.run.start_time_ms = start_ms;
  config.run.metadata_json = "{\"run\": \"" + run_id + "\"}";
  auto writer = internal::TraceWriter::Open(config, {"x"});
  REQUIRE(writer.ok());
  for (int64_t g : gsteps) REQUIRE((*writer)->Submit(Record(g)).ok());
  REQUIRE((*writer)->Close().ok());
}

TEST_CASE("Runs groups files by run id, oldest first, with each rank's RunInfo", "[runs]") {
  TempDir dir;
  // The newer run is written first: order comes from start times, not files.
  WriteRank(dir.path(), "bbbb-new", 0, 2'000, {10, 11});
  WriteRank(dir.path(), "bbbb-new", 1, 2'001, {10, 11});
  WriteRank(dir.path(), "aaaa-old", 0, 1'000, {0, 1, 2});
  WriteRank(dir.path(), "aaaa-old", 1, 1'001, {0, 1, 2});
  auto reader = TraceReader::Open(dir.path());
  REQUIRE(reader.ok());
  auto runs = reader->Runs();
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 2);
  const RunSummary& old_run = (*runs)[0];
  CHECK(old_run.run_id == "aaaa-old");
  CHECK(old_run.ranks == std::vector<int32_t>{0, 1});
  CHECK(old_run.records == 6);
  CHECK(old_run.has_steps);
  CHECK(old_run.gstep_begin == 0);
  CHECK(old_run.gstep_end == 2);
  CHECK(old_run.start_time_ms == 1'000);
  CHECK(old_run.end_time_ms > 1'700'000'000'000);  // Meta.end_time_ms: the close.
  CHECK(old_run.closed_cleanly);
  REQUIRE(old_run.run_infos.size() == 2);
  xdl::proto::RunInfo info;
  REQUIRE(info.ParseFromString(old_run.run_infos[1]));
  CHECK(info.run_id() == "aaaa-old");
  CHECK(info.rank() == 1);
  CHECK(info.hostname() == "node-1");
  CHECK(info.world_size() == 2);
  CHECK((*runs)[1].run_id == "bbbb-new");
  CHECK((*runs)[1].records == 4);

  auto newer = reader->OfRun("bbbb");  // A unique prefix.
  REQUIRE(newer.ok());
  REQUIRE(newer->files().size() == 2);
  for (const TraceFileInfo& f : newer->files()) CHECK(f.index == 1);
  auto older = reader->OfRun("aaaa-old");
  REQUIRE(older.ok());
  for (const TraceFileInfo& f : older->files()) CHECK(f.index == 2);
  TraceCursor cursor = older->Read({});
  int records = 0;
  while (true) {
    auto event = cursor.Next();
    REQUIRE(event.ok());
    if (*event == TraceCursor::Event::kEnd) break;
    if (*event == TraceCursor::Event::kRecord) {
      CHECK(cursor.record().view.gstep <= 2);
      ++records;
    }
  }
  CHECK(records == 6);

  auto missing = reader->OfRun("cccc");
  REQUIRE(!missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find("aaaa-old") != std::string::npos);

  auto both = reader->OfRuns({"bbbb", "aaaa-old"});  // Read together, in files() order.
  REQUIRE(both.ok());
  REQUIRE(both->files().size() == reader->files().size());
  for (size_t i = 0; i < both->files().size(); ++i) {
    CHECK(both->files()[i].path == reader->files()[i].path);
  }
  auto one_missing = reader->OfRuns({"bbbb", "cccc"});
  CHECK(one_missing.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("a data file without Meta or RunInfo is in the run without an id", "[runs]") {
  TempDir dir;
  test::WriteFile(dir / "train.trace.0.1", test::Frame(""));  // XDL-like: a bare Header.
  auto reader = TraceReader::Open(dir.path());
  REQUIRE(reader.ok());
  auto runs = reader->Runs();
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 1);
  CHECK((*runs)[0].run_id.empty());
  CHECK((*runs)[0].records == -1);
  CHECK(!(*runs)[0].has_steps);
  CHECK((*runs)[0].run_infos == std::vector<std::string>{""});
  CHECK(!(*runs)[0].closed_cleanly);
}

TEST_CASE("Without leaves the files at the given paths out", "[runs]") {
  TempDir dir;
  WriteRank(dir.path(), "aaaa", 0, 1'000, {0, 1});
  WriteRank(dir.path(), "aaaa", 1, 1'001, {0, 1});
  auto reader = TraceReader::Open(dir.path());
  REQUIRE(reader.ok());
  REQUIRE(reader->files().size() == 2);
  const std::string rank1 = reader->files()[1].path;
  const TraceReader without = reader->Without({rank1, "/no/such/file"});
  REQUIRE(without.files().size() == 1);
  CHECK(without.files()[0].rank == 0);
  CHECK(without.ranks() == std::vector<int32_t>{0});
  CHECK(reader->Without({}).files().size() == 2);
}

// (gstep, file index) of every record a read of `reader` yields.
std::vector<std::pair<int64_t, size_t>> Steps(const TraceReader& reader, ReadOptions options = {}) {
  std::vector<std::pair<int64_t, size_t>> out;
  TraceCursor cursor = reader.Read(std::move(options));
  while (true) {
    auto event = cursor.Next();
    REQUIRE(event.ok());
    if (*event == TraceCursor::Event::kEnd) return out;
    if (*event == TraceCursor::Event::kRecord) {
      out.emplace_back(cursor.record().view.gstep, cursor.record().file);
    }
  }
}

TEST_CASE("LatestAttempts reads each gstep once, from the attempt that wrote it last", "[runs]") {
  TempDir dir;
  // A job restarted twice under one run id: killed after gstep 5, resumed from a checkpoint at 3;
  // killed after 8, resumed at 7. Files #1, #2, #3.
  WriteRank(dir.path(), "job", 0, 1'000, {0, 1, 2, 3, 4, 5});
  WriteRank(dir.path(), "job", 0, 2'000, {3, 4, 5, 6, 7, 8});
  WriteRank(dir.path(), "job", 0, 3'000, {7, 8, 9});
  auto reader = TraceReader::Open(dir.path());
  REQUIRE(reader.ok());
  REQUIRE(reader->files().size() == 3);
  auto runs = reader->Runs();
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 1);
  const RunSummary& run = (*runs)[0];
  CHECK(run.attempts == 3);
  REQUIRE(run.resumes.size() == 2);
  CHECK((run.resumes[0].attempt == 2 && run.resumes[0].gstep == 3));
  CHECK((run.resumes[1].attempt == 3 && run.resumes[1].gstep == 7));
  // Attempt 1 is superseded from the first later gstep (3), attempt 2 from 7.
  CHECK(run.superseded_from == std::vector<std::pair<size_t, int64_t>>{{0, 3}, {1, 7}});

  // A plain reader merges every attempt: resumed steps twice.
  CHECK(Steps(*reader).size() == 15);
  auto latest = reader->LatestAttempts();
  REQUIRE(latest.ok());
  CHECK(latest->files()[0].superseded_from == 3);
  CHECK(latest->files()[1].superseded_from == 7);
  CHECK(!latest->files()[2].superseded_from);
  const std::vector<std::pair<int64_t, size_t>> expected = {{0, 0}, {1, 0}, {2, 0}, {3, 1}, {4, 1},
                                                            {5, 1}, {6, 1}, {7, 2}, {8, 2}, {9, 2}};
  CHECK(Steps(*latest) == expected);
  // A selection meets the cut: step 4 is attempt 2's; a range inside attempt 1's superseded part
  // reads nothing of it.
  ReadOptions four;
  four.steps.steps = std::vector<int64_t>{4};
  CHECK(Steps(*latest, four) == std::vector<std::pair<int64_t, size_t>>{{4, 1}});
  ReadOptions window;
  window.steps.begin = 4;
  window.steps.end = 7;
  CHECK(Steps(*latest, window) ==
        std::vector<std::pair<int64_t, size_t>>{{4, 1}, {5, 1}, {6, 1}, {7, 2}});
  // Stack gives the same steps.
  auto stacked = latest->Stack(std::vector<std::string>{"x"}, {});
  REQUIRE(stacked.ok());
  CHECK(stacked->keys[0].gsteps == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // OfRun keeps the cut.
  auto of_run = latest->OfRun("job");
  REQUIRE(of_run.ok());
  CHECK(Steps(*of_run) == expected);
}

TEST_CASE("LatestAttempts leaves a run of one attempt per rank as it is", "[runs]") {
  TempDir dir;
  WriteRank(dir.path(), "aaaa", 0, 1'000, {0, 1, 2});
  WriteRank(dir.path(), "aaaa", 1, 1'001, {0, 1, 2});
  auto reader = TraceReader::Open(dir.path());
  REQUIRE(reader.ok());
  auto runs = reader->Runs();
  REQUIRE(runs.ok());
  CHECK((*runs)[0].attempts == 1);
  CHECK((*runs)[0].resumes.empty());
  auto latest = reader->LatestAttempts();
  REQUIRE(latest.ok());
  CHECK(Steps(*latest) == Steps(*reader));
  for (const TraceFileInfo& f : latest->files()) CHECK(!f.superseded_from);
}

}  // namespace
}  // namespace xdl_trace
