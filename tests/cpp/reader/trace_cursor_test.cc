// TraceCursor and TraceReader::Read/Stack (cpp/src/reader/trace_cursor.cc) against files written
// with protobuf's own serialization: ranks merged by gstep, key and gstep selection, Meta-based
// file skipping, interleaved lanes, torn-tail events, a read resumed at an offset, stacking.
#include "xdl_trace/reader/trace_cursor.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reader/reader_test_util.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/stack.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {
namespace {

using test::Bytes;
using test::Frame;
using test::TempDir;
using test::WriteFile;

TEST_CASE("the cursor merges ranks by gstep, each rank in file order", "[reader]") {
  TempDir dir;
  WriteSteps(dir / "train.trace.0.1", {0, 1, 2, 3});
  WriteSteps(dir / "train.trace.0.2", {4, 5, 6, 7});
  WriteSteps(dir / "train.trace.1.1", {0, 2, 4, 6, 8});
  WriteSteps(dir / "train.trace.2.1", {1, 1, 9});
  const TraceReader reader = MustOpenTrace(dir.path());

  Drained all = Drain(reader.Read({}));
  REQUIRE(all.status.ok());
  CHECK(all.torn_tails.empty());
  std::vector<std::pair<int64_t, int32_t>> expected;
  for (int64_t g : {0, 1, 2, 3, 4, 5, 6, 7}) expected.emplace_back(g, 0);
  for (int64_t g : {0, 2, 4, 6, 8}) expected.emplace_back(g, 1);
  for (int64_t g : {1, 1, 9}) expected.emplace_back(g, 2);
  std::sort(expected.begin(), expected.end());  // Ties in gstep: the lower rank first.
  CHECK(all.records == expected);

  ReadOptions some;
  some.ranks = std::vector<int32_t>{2, 1, 7};  // Order and unknown ranks do not matter.
  some.keys = std::vector<std::string>{"loss"};
  Drained selected = Drain(reader.Read(some));
  REQUIRE(selected.status.ok());
  CHECK(selected.records == std::vector<std::pair<int64_t, int32_t>>{
                                {0, 1}, {1, 2}, {1, 2}, {2, 1}, {4, 1}, {6, 1}, {8, 1}, {9, 2}});
  CHECK(selected.losses == std::vector<float>{0, 0.5f, 0.5f, 1, 2, 3, 4, 4.5f});

  // A rank whose steps go backwards is merged as heapq.merge does: by heads.
  TempDir odd;
  WriteSteps(odd / "train.trace.0.1", {5, 1});
  WriteSteps(odd / "train.trace.1.1", {3});
  Drained merged = Drain(MustOpenTrace(odd.path()).Read({}));
  CHECK(merged.records == std::vector<std::pair<int64_t, int32_t>>{{3, 1}, {5, 0}, {1, 0}});
}

TEST_CASE("the cursor selects keys, names them, and reports a missing key", "[reader]") {
  TempDir dir;
  WriteSteps(dir / "train.trace.0.1", {0, 1});
  const TraceReader reader = MustOpenTrace(dir.path());
  ReadOptions options;
  options.keys = std::vector<std::string>{"loss", "w"};
  TraceCursor cursor = reader.Read(options);
  auto event = cursor.Next();
  REQUIRE(event.ok());
  REQUIRE(*event == TraceCursor::Event::kRecord);
  const TraceRecord& r = cursor.record();
  CHECK(*r.keys == std::vector<std::string>{"loss", "w"});
  REQUIRE(r.view.columns.size() == 2);
  CHECK(r.view.columns[0].shape.empty());
  CHECK(r.view.columns[1].shape == Shape{2, 3});
  CHECK(r.file == 0);
  // The record views the same mapping the reader hands out.
  auto file = reader.File(0);
  REQUIRE(file.ok());
  CHECK(r.view.columns[1].data.data() >= (*file)->bytes().data());
  CHECK(r.view.columns[1].data.data() < (*file)->bytes().data() + (*file)->size());

  options.keys = std::vector<std::string>{"w", "nope"};
  TraceCursor missing = reader.Read(options);
  auto error = missing.Next();
  REQUIRE_FALSE(error.ok());
  CHECK(IsMissingKeyError(error.status()));
  const std::string message(error.status().message());
  CHECK(message.find(dir / "train.trace.0.1") != std::string::npos);
  CHECK(message.find("no key 'nope' (keys: w, loss)") != std::string::npos);
  CHECK(missing.Next().status() == error.status());  // Sticky.
  CHECK_FALSE(IsMissingKeyError(absl::NotFoundError("no key 'x'")));

  auto keys = reader.Keys();
  REQUIRE(keys.ok());
  CHECK(*keys == std::vector<std::string>{"w", "loss"});
  auto schema = reader.Schema();
  REQUIRE(schema.ok());
  REQUIRE(schema->size() == 2);
  CHECK((*schema)[0].key == "w");
  CHECK((*schema)[0].dtype == DType::kFloat32);
  CHECK((*schema)[0].shape == Shape{2, 3});
  CHECK((*schema)[1].shape.empty());
}

TEST_CASE("a gstep selection skips the files their Meta puts outside it", "[reader]") {
  TempDir dir;
  WriteSteps(dir / "train.trace.0.1", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::string second = WriteSteps(dir / "train.trace.0.2", {10, 11, 12, 13, 14});
  // Damage the second file behind its Meta's back: reading it is an error, so
  // a selection that succeeds proves the file was skipped.
  for (size_t i = second.size() - 20; i < second.size(); ++i) second[i] = '\xff';
  WriteFile(dir / "train.trace.0.2", second);
  const TraceReader reader = MustOpenTrace(dir.path());

  ReadOptions options;
  options.steps = StepSelection{2, 4, std::nullopt};
  TraceCursor cursor = reader.Read(options);
  Drained in_range = Drain(std::move(cursor));
  REQUIRE(in_range.status.ok());
  CHECK(in_range.records == std::vector<std::pair<int64_t, int32_t>>{{2, 0}, {3, 0}, {4, 0}});

  options.steps = StepSelection{std::nullopt, 9, std::vector<int64_t>{9, 3, 3}};
  TraceCursor members = reader.Read(options);
  Drained picked = Drain(std::move(members));
  REQUIRE(picked.status.ok());
  CHECK(picked.records == std::vector<std::pair<int64_t, int32_t>>{{3, 0}, {9, 0}});

  options.steps = StepSelection{12, 12, std::nullopt};
  TraceCursor damaged = reader.Read(options);
  Drained error = Drain(std::move(damaged));
  CHECK(error.status.code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(error.status.message()).find("train.trace.0.2") != std::string::npos);

  // bytes_read counts the frames walked: none of file 1 for steps 10 on.
  options.steps = StepSelection{10, std::nullopt, std::nullopt};
  TraceCursor skipping = reader.Read(options);
  uint64_t records = 0;
  absl::StatusOr<TraceCursor::Event> event;
  while ((event = skipping.Next()).ok() && *event == TraceCursor::Event::kRecord) ++records;
  CHECK(event.status().code() == absl::StatusCode::kDataLoss);  // The damaged tail.
  CHECK(records > 0);
  const uint64_t frame = Frame(SimpleRecord(10).SerializeAsString()).size();
  CHECK(skipping.bytes_read() == records * frame);  // Steps 10..13: equal frames.
}

TEST_CASE("ReadStartOffset follows the Meta: our prefix, XDL's whole file", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  // A crashed run: the Meta covers steps 0..4, steps 5..6 were appended after it.
  std::string data = HeaderFrame({"w", "loss"});
  for (int64_t g = 0; g < 5; ++g) data += Frame(SimpleRecord(g).SerializeAsString());
  const std::string covered = data;
  for (int64_t g = 5; g < 7; ++g) data += Frame(SimpleRecord(g).SerializeAsString());
  WriteFile(path, data);
  xdl::proto::Meta meta = MetaFor(covered, 5, 0, 4);
  meta.set_closed_cleanly(false);
  WriteFile(path + ".meta", meta.SerializeAsString());
  std::shared_ptr<TraceFile> file = MustOpen(path);
  const uint64_t first = file->first_record_offset();
  CHECK(ReadStartOffset(*file, {}) == first);
  CHECK(ReadStartOffset(*file, {3, 8, std::nullopt}) == first);
  CHECK(ReadStartOffset(*file, {5, 6, std::nullopt}) == covered.size());
  CHECK(ReadStartOffset(*file, {std::nullopt, -1, std::nullopt}) == covered.size());
  Drained tail = Drain(MustOpenTrace(path).Read({std::nullopt, {5, 6, std::nullopt}, {}}));
  CHECK(tail.records == std::vector<std::pair<int64_t, int32_t>>{{5, 0}, {6, 0}});

  // A Meta that covers the whole file proves a disjoint range absent.
  WriteFile(path + ".meta", MetaFor(data, 7, 0, 6).SerializeAsString());
  file = MustOpen(path);
  CHECK(ReadStartOffset(*file, {7, std::nullopt, std::nullopt}) == std::nullopt);
  CHECK(ReadStartOffset(*file, {3, 1, std::nullopt}) == std::nullopt);  // Empty range.

  // XDL's Meta (format_version 0): steps of the whole file, no counts.
  xdl::proto::Meta xdl;
  xdl.set_gstep_begin(10);
  xdl.set_gstep_end(16);
  WriteFile(path + ".meta", xdl.SerializeAsString());
  file = MustOpen(path);
  REQUIRE(file->meta().has_value());
  CHECK(file->meta()->format_version == 0);
  CHECK(ReadStartOffset(*file, {0, 9, std::nullopt}) == std::nullopt);
  CHECK(ReadStartOffset(*file, {17, std::nullopt, std::nullopt}) == std::nullopt);
  CHECK(ReadStartOffset(*file, {12, 12, std::nullopt}) == first);
  WriteFile(path + ".meta", xdl::proto::Meta().SerializeAsString());  // Knows no steps.
  file = MustOpen(path);
  CHECK(ReadStartOffset(*file, {100, 200, std::nullopt}) == first);
}

// One lane of an interleaved read: its blocks' gsteps in order (the last one
// partial), its torn tails with the block each was met in, where it ended.
struct LaneRead {
  std::vector<std::vector<int64_t>> blocks{{}};
  std::vector<std::pair<uint64_t, TornTail>> torn_tails;
  uint64_t end_block = 0;
  absl::Status status;
};

LaneRead DrainLane(TraceCursor cursor) {
  LaneRead out;
  while (true) {
    absl::StatusOr<TraceCursor::Event> event = cursor.Next();
    if (!event.ok()) {
      out.status = event.status();
      out.end_block = cursor.block();
      return out;
    }
    switch (*event) {
      case TraceCursor::Event::kEnd:
        out.end_block = cursor.block();
        return out;
      case TraceCursor::Event::kBlockEnd:
        out.blocks.emplace_back();
        break;
      case TraceCursor::Event::kTornTail:
        out.torn_tails.emplace_back(cursor.block(), cursor.torn_tail());
        break;
      case TraceCursor::Event::kRecord:
        out.blocks.back().push_back(cursor.record().view.gstep);
        break;
    }
  }
}

TEST_CASE("interleaved lanes, their blocks taken in turn, are the plain read", "[reader]") {
  TempDir dir;
  std::vector<int64_t> first(10), second(7);
  std::iota(first.begin(), first.end(), 0);
  std::iota(second.begin(), second.end(), 10);
  WriteSteps(dir / "train.trace.0.1", first);
  const std::string full = WriteSteps(dir / "train.trace.0.2", second, /*with_meta=*/false);
  const size_t last = full.size() - Frame(SimpleRecord(16).SerializeAsString()).size();
  WriteFile(dir / "train.trace.0.2", full.substr(0, last + 5));  // 10..15, then a torn tail.
  const TraceReader reader = MustOpenTrace(dir.path());

  for (const std::optional<int64_t> begin : {std::optional<int64_t>(), std::optional<int64_t>(3)}) {
    ReadOptions plain;
    plain.steps.begin = begin;
    const Drained expected = Drain(reader.Read(plain));
    REQUIRE(expected.status.ok());
    REQUIRE(expected.torn_tails.size() == 1);
    for (const int lanes : {1, 2, 3}) {
      for (const uint64_t block_frames : {1, 3, 4, 100}) {
        INFO(lanes << " lanes, blocks of " << block_frames << " frames, from gstep "
                   << begin.value_or(0));
        std::vector<LaneRead> read;
        for (int lane = 0; lane < lanes; ++lane) {
          ReadOptions options = plain;
          options.interleave = ReadOptions::Interleave{lanes, lane, block_frames, 1 << 20};
          read.push_back(DrainLane(reader.Read(options)));
          REQUIRE(read.back().status.ok());
        }
        const uint64_t end = read[0].end_block;
        std::vector<int64_t> gsteps;
        std::vector<TornTail> torn_tails;
        for (uint64_t block = 0; block <= end; ++block) {
          const LaneRead& owner = read[block % static_cast<uint64_t>(lanes)];
          CHECK(owner.end_block == end);
          const auto& records = owner.blocks.at(block / static_cast<uint64_t>(lanes));
          gsteps.insert(gsteps.end(), records.begin(), records.end());
          for (const auto& [at, torn] : owner.torn_tails) {
            if (at == block) torn_tails.push_back(torn);
          }
        }
        std::vector<int64_t> plain_gsteps;
        for (const auto& record : expected.records) plain_gsteps.push_back(record.first);
        CHECK(gsteps == plain_gsteps);
        REQUIRE(torn_tails.size() == 1);
        CHECK(torn_tails[0].offset == expected.torn_tails[0].offset);
      }
    }
  }

  // Lanes need one rank.
  WriteSteps(dir / "train.trace.1.1", {0, 1});
  ReadOptions two_ranks;
  two_ranks.interleave = ReadOptions::Interleave{2, 0, 4, 1 << 20};
  const Drained refused = Drain(MustOpenTrace(dir.path()).Read(two_ranks));
  CHECK(absl::IsInvalidArgument(refused.status));
  two_ranks.ranks = std::vector<int32_t>{1};
  const LaneRead one = DrainLane(MustOpenTrace(dir.path()).Read(two_ranks));
  CHECK(one.status.ok());
  CHECK(one.blocks.front() == std::vector<int64_t>{0, 1});
}

TEST_CASE("a torn tail is one event naming the file, rank and offset", "[reader]") {
  TempDir dir;
  WriteSteps(dir / "train.trace.0.1", {0, 1});
  const std::string full = WriteSteps(dir / "train.trace.0.2", {2, 3, 4}, /*with_meta=*/false);
  const size_t last = full.size() - Frame(SimpleRecord(4).SerializeAsString()).size();
  WriteFile(dir / "train.trace.0.2", full.substr(0, last + 5));
  WriteSteps(dir / "train.trace.1.1", {0, 1, 2, 3, 4, 5});
  WriteFile(dir / "train.trace.2.1", HeaderFrame({"w", "loss"}).substr(0, 3));  // Header cut.
  const TraceReader reader = MustOpenTrace(dir.path());

  Drained all = Drain(reader.Read({}));
  REQUIRE(all.status.ok());
  REQUIRE(all.torn_tails.size() == 2);
  CHECK(all.torn_tails[0].path == dir / "train.trace.2.1");  // Found when rank 2 starts.
  CHECK(all.torn_tails[0].rank == 2);
  CHECK(all.torn_tails[0].offset == 0);
  CHECK(all.torn_tails[1].path == dir / "train.trace.0.2");
  CHECK(all.torn_tails[1].rank == 0);
  CHECK(all.torn_tails[1].offset == last);
  CHECK(all.records.size() == 4 + 6);
  CHECK(all.records.back() == std::pair<int64_t, int32_t>{5, 1});  // Rank 1 goes on after it.

  auto stacked = reader.Stack(std::vector<std::string>{"loss"}, {}, 0);
  REQUIRE(stacked.ok());
  REQUIRE(stacked->torn_tails.size() == 1);
  CHECK(stacked->torn_tails[0].path == dir / "train.trace.0.2");
  CHECK(stacked->torn_tails[0].offset == last);
  CHECK(stacked->keys[0].gsteps == std::vector<int64_t>{0, 1, 2, 3});
}

// The gsteps a read of `path` from `start` yields, and its end_offset().
struct Resumed {
  std::vector<int64_t> gsteps;
  size_t torn_tails = 0;
  uint64_t end_offset = 0;
  absl::Status status;
};

Resumed ReadFrom(const std::string& path, std::optional<uint64_t> start) {
  Resumed out;
  ReadOptions options;
  options.start_offset = start;
  const TraceReader reader = MustOpenTrace(path);
  TraceCursor cursor = reader.Read(options);
  while (true) {
    absl::StatusOr<TraceCursor::Event> event = cursor.Next();
    if (!event.ok()) {
      out.status = event.status();
      return out;
    }
    if (*event == TraceCursor::Event::kEnd) break;
    if (*event == TraceCursor::Event::kTornTail) ++out.torn_tails;
    if (*event == TraceCursor::Event::kRecord) out.gsteps.push_back(cursor.record().view.gstep);
  }
  out.end_offset = cursor.end_offset();
  return out;
}

TEST_CASE("a read of a growing file resumes where the last read ended", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string full = WriteSteps(path, {0, 1, 2, 3, 4}, /*with_meta=*/false);
  std::string three = HeaderFrame({"w", "loss"});  // The bytes before record 3.
  for (int64_t g : {0, 1, 2}) three += Frame(SimpleRecord(g).SerializeAsString());
  WriteFile(path, full.substr(0, three.size() + 5));  // The writer is inside record 3.

  const Resumed first = ReadFrom(path, std::nullopt);
  REQUIRE(first.status.ok());
  CHECK(first.gsteps == std::vector<int64_t>{0, 1, 2});
  CHECK(first.torn_tails == 1);
  CHECK(first.end_offset == three.size());  // The torn frame's start: not walked past.

  WriteFile(path, full);  // Records 3 and 4 complete.
  const Resumed second = ReadFrom(path, first.end_offset);
  REQUIRE(second.status.ok());
  CHECK(second.gsteps == std::vector<int64_t>{3, 4});
  CHECK(second.torn_tails == 0);
  CHECK(second.end_offset == full.size());

  const Resumed nothing = ReadFrom(path, second.end_offset);  // Not grown: nothing, same end.
  REQUIRE(nothing.status.ok());
  CHECK(nothing.gsteps.empty());
  CHECK(nothing.end_offset == full.size());

  WriteSteps(dir / "train.trace.0.2", {5});
  const Resumed two_files = ReadFrom(dir.path(), 0);
  CHECK(two_files.status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(two_files.status.message()).find("one file") != std::string::npos);
}

TEST_CASE("Schema takes each key from the first record that holds a value of it", "[reader]") {
  TempDir dir;
  // "later" is empty until gstep 5 (a value handed at some steps only, a gradient before the
  // first backward: xdl_trace writes shape [0]), "never" at every step, "xdl" empty the XDL
  // way (no shape) at gstep 0 only.
  auto write = [&](const std::string& path, std::vector<int64_t> gsteps) {
    std::string data = HeaderFrame({"w", "loss", "later", "never", "xdl"});
    for (int64_t g : gsteps) {
      xdl::proto::Record record = SimpleRecord(g);
      auto* later = record.add_column();
      if (g >= 5) {
        later->set_dtype(xdl::proto::Double);
        later->set_data(Bytes<double>({0.5}));
      } else {
        later->set_dtype(xdl::proto::Float);
        later->add_shape(0);
      }
      auto* never = record.add_column();
      never->set_dtype(xdl::proto::Float);
      never->add_shape(0);
      auto* xdl_empty = record.add_column();
      xdl_empty->set_dtype(xdl::proto::Int64);
      if (g > 0) {
        xdl_empty->add_shape(2);
        xdl_empty->set_data(Bytes<int64_t>({1, 2}));
      }
      data += Frame(record.SerializeAsString());
    }
    WriteFile(path, data);
  };
  write(dir / "train.trace.0.1", {0, 1, 2, 3});
  write(dir / "train.trace.0.2", {4, 5, 6});
  auto schema = MustOpenTrace(dir.path()).Schema();
  REQUIRE(schema.ok());
  REQUIRE(schema->size() == 5);
  CHECK((*schema)[0].shape == Shape{2, 3});
  CHECK((*schema)[2].key == "later");  // Found in the second file. Before: float32 [0].
  CHECK((*schema)[2].dtype == DType::kFloat64);
  CHECK((*schema)[2].shape.empty());
  CHECK((*schema)[3].dtype == DType::kFloat32);  // Empty everywhere: the empty column.
  CHECK((*schema)[3].shape == Shape{0});
  CHECK((*schema)[4].dtype == DType::kInt64);
  CHECK((*schema)[4].shape == Shape{2});

  SECTION("damage met while looking ends the search, not the schema") {
    std::string second = test::ReadFile(dir / "train.trace.0.2");
    uint32_t header = 0;  // Its records, from the first one's body on.
    std::memcpy(&header, second.data(), 4);
    for (size_t i = 4 + header + 8; i < second.size(); ++i) second[i] = '\xff';
    WriteFile(dir / "train.trace.0.2", second);
    auto found = MustOpenTrace(dir.path()).Schema();
    REQUIRE(found.ok());
    CHECK((*found)[2].shape == Shape{0});  // Its value was in the damaged file.
    CHECK((*found)[4].shape == Shape{2});
  }
}

TEST_CASE("stack gathers keys over steps into one contiguous copy", "[reader]") {
  TempDir dir;
  // "once" holds a value at a file's first step only (XDL writes no shape after).
  auto write = [&](const std::string& path, std::vector<int64_t> gsteps, Shape once_shape) {
    std::string data = HeaderFrame({"w", "loss", "once"});
    for (int64_t g : gsteps) {
      xdl::proto::Record record = SimpleRecord(g);
      auto* once = record.add_column();
      once->set_dtype(xdl::proto::Float);
      if (g == gsteps.front()) {  // The first step of each file (a new run, say).
        for (int64_t d : once_shape) once->add_shape(static_cast<int>(d));
        once->set_data(Bytes<float>(std::vector<float>(once_shape[0], 7.0f)));
      }
      data += Frame(record.SerializeAsString());
    }
    WriteFile(path, data);
    WriteFile(path + ".meta",
              MetaFor(data, static_cast<int64_t>(gsteps.size()), gsteps.front(), gsteps.back())
                  .SerializeAsString());
  };
  write(dir / "train.trace.0.1", {0, 1, 2}, {3});
  write(dir / "train.trace.0.2", {3, 4}, {3});
  const TraceReader reader = MustOpenTrace(dir.path());

  auto result = reader.Stack(std::nullopt, {1, std::nullopt, std::nullopt});
  REQUIRE(result.ok());
  REQUIRE(result->keys.size() == 3);
  const StackedKey& w = result->keys[0];
  CHECK(w.key == "w");
  CHECK(w.dtype == DType::kFloat32);
  CHECK(w.shape == Shape{2, 3});
  CHECK(w.gsteps == std::vector<int64_t>{1, 2, 3, 4});
  REQUIRE(w.row_bytes() == 24);
  std::vector<float> values(4 * 6);
  w.CopyRowsTo(reinterpret_cast<char*>(values.data()));
  for (int row = 0; row < 4; ++row) {
    for (int i = 0; i < 6; ++i) CHECK(values[row * 6 + i] == static_cast<float>(row + 1 + i));
  }
  CHECK(result->keys[2].gsteps == std::vector<int64_t>{3});  // Empty "once" columns left out.
  CHECK(result->keys[2].row_bytes() == 12);
  auto none = reader.Stack(std::vector<std::string>{"once"}, {1, 2, std::nullopt});
  REQUIRE(none.ok());
  CHECK(none->keys[0].rows.empty());
  CHECK(none->keys[0].row_bytes() == 0);
  none->keys[0].CopyRowsTo(nullptr);  // Nothing to copy, nothing touched.

  auto once = reader.Stack(std::vector<std::string>{"once"}, {});
  REQUIRE(once.ok());
  CHECK(once->keys[0].gsteps == std::vector<int64_t>{0, 3});
  CHECK(once->keys[0].shape == Shape{3});

  SECTION("a shape that changes between files is an error naming them") {
    write(dir / "train.trace.0.2", {3, 4}, {2});
    auto changed = MustOpenTrace(dir.path()).Stack(std::vector<std::string>{"once"}, {});
    REQUIRE(changed.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string message(changed.status().message());
    CHECK(message.find(dir / "train.trace.0.2") != std::string::npos);
    CHECK(message.find("key 'once' changes dtype or shape at gstep 3") != std::string::npos);
    CHECK(message.find("from float32[3] to float32[2]") != std::string::npos);
  }
  SECTION("a ragged stack keeps each row's shape where the shape changes") {
    write(dir / "train.trace.0.2", {3, 4}, {2});
    const TraceReader changed = MustOpenTrace(dir.path());
    auto ragged = changed.Stack(std::vector<std::string>{"once", "w"}, {}, 0, /*ragged=*/true);
    REQUIRE(ragged.ok());
    const StackedKey& once = ragged->keys[0];
    CHECK(once.gsteps == std::vector<int64_t>{0, 3});
    CHECK(once.row_shapes == std::vector<Shape>{{3}, {2}});
    REQUIRE(once.bytes() == 5 * sizeof(float));
    std::vector<float> values(5);
    once.CopyRowsTo(reinterpret_cast<char*>(values.data()));
    CHECK(values == std::vector<float>(5, 7.0f));
    CHECK_FALSE(ragged->keys[1].ragged());  // "w" keeps its shape: no shapes kept.
    CHECK(ragged->keys[1].bytes() == 5 * 24);
  }
  SECTION("several ranks need a rank; a missing key names the file") {
    WriteSteps(dir / "train.trace.1.1", {0});
    const TraceReader two = MustOpenTrace(dir.path());
    auto no_rank = two.Stack(std::vector<std::string>{"w"}, {});
    CHECK(no_rank.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(no_rank.status().message()).find("ranks [0, 1]; pass rank=") !=
          std::string::npos);
    auto missing = two.Stack(std::vector<std::string>{"once"}, {}, 1);
    CHECK(IsMissingKeyError(missing.status()));
    CHECK(std::string(missing.status().message()).find("train.trace.1.1: no key 'once'") !=
          std::string::npos);
    auto rank1 = two.Stack(std::vector<std::string>{"loss"}, {}, 1);
    REQUIRE(rank1.ok());
    CHECK(rank1->keys[0].gsteps == std::vector<int64_t>{0});
  }
}

}  // namespace
}  // namespace xdl_trace
