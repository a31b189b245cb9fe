// TraceReader (cpp/src/reader/trace_reader.cc): a trace's files grouped by prefix, name and rank,
// and its schema.
#include "xdl_trace/reader/trace_reader.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "reader/reader_test_util.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/trace_file.h"

namespace xdl_trace {
namespace {

using test::Frame;
using test::TempDir;
using test::WriteFile;

TEST_CASE("reader groups a directory by prefix, name and rank in index order", "[reader]") {
  TempDir dir;
  WriteSimpleFile(dir / "train.trace.1.2", 120, 2);
  WriteSimpleFile(dir / "train.trace.1.10", 140, 2);
  WriteSimpleFile(dir / "train.trace.1.1", 100, 2);
  WriteSimpleFile(dir / "train.trace.0.1", 100, 2);
  WriteSimpleFile(dir / "test.trace.0.1", 7, 1);
  WriteSimpleFile(dir / "train.other.name.0.1", 1, 1);
  WriteFile(dir / "train.trace.0.1.meta.tmp", "junk");
  WriteFile(dir / "notes.txt", "junk");

  auto reader = TraceReader::Open(dir.path(), "train", "trace");
  REQUIRE(reader.ok());
  const auto& files = reader->files();
  REQUIRE(files.size() == 4);
  CHECK(files[0].path == dir / "train.trace.0.1");
  CHECK(files[1].path == dir / "train.trace.1.1");
  CHECK(files[2].path == dir / "train.trace.1.2");
  CHECK(files[3].path == dir / "train.trace.1.10");
  CHECK(reader->ranks() == std::vector<int32_t>{0, 1});
  CHECK(reader->files_of_rank(1).size() == 3);
  CHECK(reader->files_of_rank(1)[2].index == 10);

  auto test = TraceReader::Open(dir.path(), "test", "trace");
  REQUIRE(test.ok());
  REQUIRE(test->files().size() == 1);
  CHECK(test->files()[0].prefix == "test");

  auto dotted = TraceReader::Open(dir.path(), "train", "other.name");
  REQUIRE(dotted.ok());
  REQUIRE(dotted->files().size() == 1);
  CHECK(dotted->files()[0].name == "other.name");

  auto missing = TraceReader::Open(dir.path(), "train", "nope");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find("train.trace") != std::string::npos);

  auto single = TraceReader::Open(dir / "train.trace.1.10");
  REQUIRE(single.ok());
  REQUIRE(single->files().size() == 1);
  CHECK(single->files()[0].rank == 1);
  CHECK(single->files()[0].index == 10);

  TraceFileInfo info;
  CHECK_FALSE(ParseTraceFileName("train.trace.0.1.meta", &info));
  CHECK_FALSE(ParseTraceFileName("train.0.1", &info));
  CHECK(ParseTraceFileName("test.t.3.12", &info));
  CHECK(info.rank == 3);
  CHECK(info.index == 12);

  // Meta of a listed file is read and mirrors the proto.
  auto file = TraceReader::OpenFile(files[2]);
  REQUIRE(file.ok());
  REQUIRE((*file)->meta().has_value());
  CHECK((*file)->meta()->gstep_begin == 120);
  CHECK((*file)->meta()->gstep_end == 121);
  CHECK((*file)->meta()->record_count == 2);
  CHECK((*file)->meta()->closed_cleanly);
}

TEST_CASE("the Header's column descriptors reach TraceFile and Schema", "[reader]") {
  TempDir dir;
  using Column = xdl::proto::ColumnDescriptor;
  xdl::proto::Header header;
  header.add_key("w");
  header.add_key("loss");
  Column* stats = header.add_column();
  stats->set_content(Column::STATS);
  stats->set_source(Column::VARIABLE);
  stats->set_layout_version(1);
  stats->mutable_input()->set_dtype(xdl::proto::BFloat16);
  stats->mutable_input()->add_shape(2);
  stats->mutable_input()->add_shape(3);
  Column* user = header.add_column();
  user->set_content(static_cast<Column::Content>(42));  // A newer writer's content.
  user->set_source(Column::CALLBACK);
  user->set_summary_name("m.f");
  const std::string path = dir / "train.trace.0.1";
  WriteFile(path, Frame(header.SerializeAsString()) + Frame(SimpleRecord(1).SerializeAsString()));

  std::shared_ptr<TraceFile> file = MustOpen(path);
  CHECK(file->keys() == std::vector<std::string>{"w", "loss"});
  REQUIRE(file->columns().size() == 2);
  const ColumnInfo& s = file->columns()[0];
  CHECK(s.content == ColumnInfo::Content::kStats);
  CHECK(s.source == ColumnInfo::Source::kVariable);
  CHECK(s.layout_version == 1);
  CHECK(s.histogram_bins == 0);
  CHECK(s.has_input);
  CHECK(s.input_dtype == DType::kBFloat16);
  CHECK(s.input_shape == Shape{2, 3});
  const ColumnInfo& u = file->columns()[1];
  CHECK(static_cast<int32_t>(u.content) == 42);  // Kept, not refused.
  CHECK(u.source == ColumnInfo::Source::kCallback);
  CHECK(u.summary_name == "m.f");
  CHECK_FALSE(u.has_input);
  CHECK(ReadAllOk(file).size() == 1);  // The records read as before.

  absl::StatusOr<TraceReader> reader = TraceReader::Open(dir.path());
  REQUIRE(reader.ok());
  absl::StatusOr<std::vector<KeySchema>> schema = reader->Schema();
  REQUIRE(schema.ok());
  REQUIRE(schema->size() == 2);
  REQUIRE((*schema)[0].column.has_value());
  CHECK((*schema)[0].column->content == ColumnInfo::Content::kStats);
  CHECK((*schema)[0].dtype == DType::kFloat32);  // The record's column, not the input.

  // Without descriptors (XDL's Header): no columns, the schema says nothing more.
  TempDir xdl_dir;
  WriteSimpleFile(xdl_dir / "train.trace.0.1", 1, 2);
  CHECK(MustOpen(xdl_dir / "train.trace.0.1")->columns().empty());
  absl::StatusOr<TraceReader> xdl_reader = TraceReader::Open(xdl_dir.path());
  REQUIRE(xdl_reader.ok());
  absl::StatusOr<std::vector<KeySchema>> xdl_schema = xdl_reader->Schema();
  REQUIRE(xdl_schema.ok());
  REQUIRE(xdl_schema->size() == 2);
  CHECK_FALSE((*xdl_schema)[0].column.has_value());
}

}  // namespace
}  // namespace xdl_trace
