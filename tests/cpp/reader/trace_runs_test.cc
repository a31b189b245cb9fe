// Tests of TraceReader::Runs and OfRun: files grouped by run id, run info from the Header, the
// order of runs, selection by id or prefix, and XDL files as one run without an id.
#include <catch2/catch.hpp>
#include <string>
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

}  // namespace
}  // namespace xdl_trace
