// Tests of DataFileSegment alone (no thread, no queue): one data file's bytes, CRC, Meta, rollover.
#include "io/data_file_segment.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/crc32c.h"
#include "io/file_set.h"
#include "io/io_error.h"
#include "io/limits.h"
#include "io/meta_writer.h"
#include "record/record_encoder.h"
#include "test_util.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using test::Exists;
using test::FileSizeLimit;
using test::ReadFile;
using test::TempDir;

const std::vector<std::string> kKeys = {"scope/a", "scope/b"};

// A record of one float32 column of `floats` values, framed by protobuf itself.
EncodedRecord MakeRecord(int64_t gstep, int64_t lstep, int64_t timestamp_ms, size_t floats = 25) {
  const std::vector<float> values(floats, static_cast<float>(gstep));
  const std::vector<TensorView> columns = {
      TensorView{DType::kFloat32, {static_cast<int64_t>(floats)}, values.data()}};
  EncodedRecord r;
  r.gstep = gstep;
  r.lstep = lstep;
  r.timestamp_ms = timestamp_ms;
  r.frame = test::ProtobufFrame(gstep, lstep, timestamp_ms, columns);
  return r;
}

std::vector<EncodedRecord*> Pointers(std::vector<EncodedRecord>* records) {
  std::vector<EncodedRecord*> out;
  for (EncodedRecord& r : *records) out.push_back(&r);
  return out;
}

SegmentOptions Options(const std::string& dir) {
  SegmentOptions options;
  options.output_dir = dir;
  options.stem = "train.seg.2";
  options.rank = 2;
  options.fsync = false;
  options.run_id = "segment-run";
  options.header_frame = DataFileSegment::HeaderFrame(kKeys);
  return options;
}

// Where the data file `index` of `options` lives.
std::string DataFilePath(const SegmentOptions& options, int64_t index) {
  return internal::DataFilePath(options.output_dir, options.stem, index);
}

std::unique_ptr<DataFileSegment> CreateOrDie(const SegmentOptions* options, int64_t index) {
  absl::StatusOr<std::unique_ptr<DataFileSegment>> segment =
      DataFileSegment::Create(options, index);
  INFO(segment.status().ToString());
  REQUIRE(segment.ok());
  return std::move(*segment);
}

// The Meta on disk, its own checksum checked (the last field: the CRC-32C of
// the bytes before it) and then cleared, to compare with BuildMeta.
xdl::proto::Meta ReadMeta(const std::string& data_path) {
  const std::string bytes = ReadFile(MetaPath(data_path));
  xdl::proto::Meta meta;
  REQUIRE(meta.ParseFromString(bytes));
  REQUIRE(bytes.size() > 6);
  CHECK(bytes.substr(bytes.size() - 6, 2) == "\x8d\x01");  // Field 17, fixed32.
  CHECK(meta.meta_crc32c() == crc32c::Value(bytes.data(), bytes.size() - 6));
  meta.clear_meta_crc32c();
  return meta;
}

TEST_CASE("the Header frame is protobuf's own serialization, length-prefixed", "[segment]") {
  xdl::proto::Header header;
  for (const std::string& key : kKeys) header.add_key(key);
  CHECK(DataFileSegment::HeaderFrame(kKeys) == test::Frame(header.SerializeAsString()));
  CHECK(DataFileSegment::HeaderFrame({}) == test::Frame(""));
  // With column descriptors: protobuf's serialization of the Header with field 2 too.
  std::vector<xdl::proto::ColumnDescriptor> columns(2);
  columns[0].set_content(xdl::proto::ColumnDescriptor::STATS);
  columns[0].set_layout_version(1);
  columns[1].set_content(xdl::proto::ColumnDescriptor::VALUE);
  columns[1].mutable_input()->set_dtype(xdl::proto::BFloat16);
  for (const auto& column : columns) *header.add_column() = column;
  CHECK(DataFileSegment::HeaderFrame(kKeys, columns) == test::Frame(header.SerializeAsString()));
  // The keys come first on the wire, so the Header of a file with descriptors
  // starts with XDL's Header bytes (field 1 only).
  xdl::proto::Header keys_only;
  for (const std::string& key : kKeys) keys_only.add_key(key);
  CHECK(header.SerializeAsString().rfind(keys_only.SerializeAsString(), 0) == 0);
}

TEST_CASE("a new segment holds the Header and a Meta describing just that", "[segment]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path());
  auto segment = CreateOrDie(&options, 4);
  CHECK(segment->path() == DataFilePath(options, 4));
  CHECK(segment->index() == 4);
  CHECK(ReadFile(segment->path()).empty());  // Create writes nothing.
  CHECK_FALSE(Exists(MetaPath(segment->path())));

  REQUIRE(segment->WriteHeader(/*dropped_records=*/7).ok());
  const std::string bytes = ReadFile(segment->path());
  CHECK(bytes == options.header_frame);
  CHECK(segment->bytes() == static_cast<int64_t>(bytes.size()));
  CHECK(segment->records() == 0);
  CHECK(segment->crc32c() == crc32c::Value(bytes.data(), bytes.size()));
  const xdl::proto::Meta meta = ReadMeta(segment->path());
  CHECK(meta.record_count() == 0);
  CHECK(meta.data_bytes() == static_cast<int64_t>(bytes.size()));
  CHECK(meta.crc32c() == segment->crc32c());
  CHECK(meta.file_index() == 4);
  CHECK(meta.rank() == 2);
  CHECK(meta.run_id() == "segment-run");
  CHECK(meta.format_version() == kFormatVersion);

  CHECK(meta.dropped_records() == 7);
  CHECK_FALSE(meta.closed_cleanly());
}

TEST_CASE("Append writes frames byte for byte and keeps ranges over complete frames", "[segment]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path());
  auto segment = CreateOrDie(&options, 1);
  REQUIRE(segment->WriteHeader(0).ok());
  // Steps out of order: the ranges are min/max, not first/last.
  std::vector<EncodedRecord> records = {MakeRecord(9, 90, 1009), MakeRecord(3, 95, 1003),
                                        MakeRecord(5, 50, 1020)};
  std::string expected = options.header_frame;
  for (const EncodedRecord& r : records) expected += r.frame;
  REQUIRE(segment->Append(Pointers(&records)).ok());

  const std::string bytes = ReadFile(segment->path());
  CHECK(bytes == expected);
  CHECK(segment->bytes() == static_cast<int64_t>(bytes.size()));
  CHECK(segment->records() == 3);
  CHECK(segment->crc32c() == crc32c::Value(bytes.data(), bytes.size()));

  REQUIRE(segment->SyncAndWriteMeta(/*closed_cleanly=*/true, /*dropped_records=*/2).ok());
  const xdl::proto::Meta meta = ReadMeta(segment->path());
  CHECK(meta.gstep_begin() == 3);
  CHECK(meta.gstep_end() == 9);
  CHECK(meta.lstep_begin() == 50);
  CHECK(meta.lstep_end() == 95);
  CHECK(meta.timestamp_begin() == 1003);
  CHECK(meta.timestamp_end() == 1020);
  CHECK(meta.record_count() == 3);
  CHECK(meta.data_bytes() == static_cast<int64_t>(bytes.size()));
  CHECK(meta.crc32c() == crc32c::Value(bytes.data(), bytes.size()));
  CHECK(meta.dropped_records() == 2);
  CHECK(meta.closed_cleanly());
  // What is on disk is what BuildMeta describes.
  CHECK(meta.SerializeAsString() == segment->BuildMeta(true, 2).SerializeAsString());
}

TEST_CASE("Append splits a group larger than one writev call", "[segment]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path());
  auto segment = CreateOrDie(&options, 1);
  REQUIRE(segment->WriteHeader(0).ok());
  const int64_t count = static_cast<int64_t>(2 * kMaxIovecs + 3);
  std::vector<EncodedRecord> records;
  std::string expected = options.header_frame;
  for (int64_t i = 0; i < count; ++i) {
    records.push_back(MakeRecord(i, i, 1000 + i, 2));
    expected += records.back().frame;
  }
  REQUIRE(segment->Append(Pointers(&records)).ok());
  CHECK(segment->records() == count);
  CHECK(ReadFile(segment->path()) == expected);
  CHECK(segment->BuildMeta(false, 0).gstep_end() == count - 1);
}

TEST_CASE("rollover: a file may end exactly at the limit; an oversized record goes alone",
          "[segment][rollover]") {
  TempDir dir;
  SegmentOptions options = Options(dir.path());
  const int64_t header = static_cast<int64_t>(options.header_frame.size());
  const int64_t record = static_cast<int64_t>(MakeRecord(20, 20, 20).frame.size());
  options.max_file_bytes = header + 3 * record;
  auto segment = CreateOrDie(&options, 1);
  REQUIRE(segment->WriteHeader(0).ok());

  // An empty file takes any record, even one larger than the limit.
  CHECK_FALSE(segment->ShouldRollOver(0, 0, 100 * record));
  // Pending records count as held: the oversized one waits for the next file.
  CHECK(segment->ShouldRollOver(record, 1, 100 * record));
  CHECK_FALSE(segment->ShouldRollOver(2 * record, 2, record));  // Ends exactly at the limit.
  CHECK(segment->ShouldRollOver(3 * record, 3, record));        // A whole record over.

  std::vector<EncodedRecord> records = {MakeRecord(20, 20, 20), MakeRecord(21, 21, 21)};
  REQUIRE(segment->Append(Pointers(&records)).ok());
  CHECK_FALSE(segment->ShouldRollOver(0, 0, record));
  CHECK(segment->ShouldRollOver(0, 0, record + 1));
  CHECK(segment->ShouldRollOver(record, 1, 1));
}

TEST_CASE("Create skips an index another writer took and leaves that file alone",
          "[segment][naming]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path());
  test::WriteFile(DataFilePath(options, 2), "other writer");
  auto first = CreateOrDie(&options, 2);
  CHECK(first->index() == 3);
  auto second = CreateOrDie(&options, 2);  // 2 and 3 are taken now.
  CHECK(second->index() == 4);
  CHECK(second->path() == DataFilePath(options, 4));
  CHECK(ReadFile(DataFilePath(options, 2)) == "other writer");
}

TEST_CASE("Create fails naming the file when its directory is missing", "[segment][errors]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path() + "/missing");
  const absl::StatusOr<std::unique_ptr<DataFileSegment>> segment =
      DataFileSegment::Create(&options, 1);
  REQUIRE_FALSE(segment.ok());
  CHECK(segment.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(segment.status().message()), Catch::Contains(DataFilePath(options, 1)));
}

TEST_CASE("Meta is replaced when stale or closing, and only then", "[segment][meta]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path());
  auto segment = CreateOrDie(&options, 1);
  REQUIRE(segment->WriteHeader(0).ok());
  const std::string meta_path = MetaPath(segment->path());

  // Nothing new since the first Meta: not rewritten.
  REQUIRE(unlink(meta_path.c_str()) == 0);
  REQUIRE(segment->SyncAndWriteMeta(false, 0).ok());
  CHECK_FALSE(Exists(meta_path));
  // A new drop makes it stale.
  REQUIRE(segment->SyncAndWriteMeta(false, 1).ok());
  REQUIRE(Exists(meta_path));
  CHECK(ReadMeta(segment->path()).dropped_records() == 1);
  // So do new bytes.
  REQUIRE(unlink(meta_path.c_str()) == 0);
  std::vector<EncodedRecord> records = {MakeRecord(1, 1, 1)};
  REQUIRE(segment->Append(Pointers(&records)).ok());
  REQUIRE(segment->SyncAndWriteMeta(false, 1).ok());
  CHECK(ReadMeta(segment->path()).record_count() == 1);
  // Closing always writes, marking the file clean.
  REQUIRE(unlink(meta_path.c_str()) == 0);
  REQUIRE(segment->SyncAndWriteMeta(true, 1).ok());
  CHECK(ReadMeta(segment->path()).closed_cleanly());
}

TEST_CASE("with fsync on, data and Meta agree after every replacement", "[segment][meta]") {
  TempDir dir;
  SegmentOptions options = Options(dir.path());
  options.fsync = true;
  options.dir_fd = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(options.dir_fd >= 0);
  {
    auto segment = CreateOrDie(&options, 1);
    REQUIRE(segment->WriteHeader(0).ok());
    for (int64_t step = 0; step < 3; ++step) {
      std::vector<EncodedRecord> records = {MakeRecord(step, step, step)};
      REQUIRE(segment->Append(Pointers(&records)).ok());
      REQUIRE(segment->SyncAndWriteMeta(step == 2, 0).ok());
      const std::string bytes = ReadFile(segment->path());
      const xdl::proto::Meta meta = ReadMeta(segment->path());
      CHECK(meta.data_bytes() == static_cast<int64_t>(bytes.size()));
      CHECK(meta.crc32c() == crc32c::Value(bytes.data(), bytes.size()));
      CHECK(meta.record_count() == step + 1);
    }
  }
  close(options.dir_fd);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    CHECK_THAT(entry.path().string(), !Catch::Contains(".meta.tmp"));  // No temp file left.
  }
}

TEST_CASE(
    "a failed write names file and offset; the cut frame is cut off, counts and CRC "
    "cover the complete frames",
    "[segment][errors]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path());
  const int64_t header = static_cast<int64_t>(options.header_frame.size());
  std::vector<EncodedRecord> records = {MakeRecord(1, 1, 1, 100), MakeRecord(2, 2, 2, 100),
                                        MakeRecord(3, 3, 3, 100)};
  const int64_t record = static_cast<int64_t>(records[0].frame.size());
  const int64_t limit = header + record + record / 2;  // The second frame is cut in half.
  auto segment = CreateOrDie(&options, 1);
  absl::Status status;
  {
    FileSizeLimit file_limit(static_cast<rlim_t>(limit));
    REQUIRE(segment->WriteHeader(0).ok());
    status = segment->Append(Pointers(&records));
  }
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == absl::StatusCode::kOutOfRange);  // EFBIG.
  CHECK(IsIoError(status));  // For Python: TraceIOError, not ValueError.
  CHECK_THAT(std::string(status.message()), Catch::Contains(segment->path()));
  CHECK_THAT(std::string(status.message()), Catch::Contains(absl::StrCat("offset ", limit)));
  // The file ends at its last complete frame: no torn tail, and on a full disk the cut frame's
  // blocks are free for the final Meta (issue 34).
  const std::string bytes = ReadFile(segment->path());
  REQUIRE(static_cast<int64_t>(bytes.size()) == header + record);
  CHECK(segment->bytes() == header + record);
  CHECK(segment->records() == 1);  // Only the complete frame.
  CHECK(segment->crc32c() == crc32c::Value(bytes.data(), bytes.size()));
  CHECK(segment->BuildMeta(false, 0).gstep_end() == 1);
}

// `floats` float32 values framed by EncodeRecord in pieces (the tensor left in
// place, its Record.crc32c left to the writer), as a write-through sends them.
EncodedRecord InPieces(int64_t gstep, const std::vector<float>& values) {
  const std::vector<TensorView> columns = {
      TensorView{DType::kFloat32, {static_cast<int64_t>(values.size())}, values.data()}};
  EncodeOptions options;
  options.reference_min_bytes = 64;
  absl::StatusOr<EncodedRecord> r = EncodeRecord(
      gstep, gstep, gstep, columns, {}, {}, [](size_t) { return std::string(); }, options);
  REQUIRE(r.ok());
  REQUIRE(r->crc_at_write);
  REQUIRE(r->pieces.size() == 3);
  return *std::move(r);
}

TEST_CASE("a frame in pieces is sealed once and combined into the file's CRC", "[segment]") {
  TempDir dir;
  const SegmentOptions options = Options(dir.path());
  const std::vector<float> values(5000, 1.5f);
  const EncodedRecord second = MakeRecord(2, 2, 2, 100);
  const int64_t header = static_cast<int64_t>(options.header_frame.size());
  std::vector<EncodedRecord> records = {InPieces(1, values), second};
  const int64_t frame = static_cast<int64_t>(records[0].FrameBytes());
  // What protobuf writes for the same record, checksum included.
  xdl::proto::Record expected;
  expected.set_gstep(1);
  expected.set_lstep(1);
  expected.set_timestamp(1);
  test::AddColumn(&expected, xdl::proto::Float, {5000},
                  std::string(reinterpret_cast<const char*>(values.data()), 20000));
  const std::string body = expected.SerializeAsString();
  expected.set_crc32c(crc32c::Value(body.data(), body.size()));
  const std::string sealed = test::Frame(expected.SerializeAsString());

  SECTION("written whole") {
    auto segment = CreateOrDie(&options, 1);
    REQUIRE(segment->WriteHeader(0).ok());
    REQUIRE(segment->Append(Pointers(&records)).ok());
    const std::string bytes = ReadFile(segment->path());
    CHECK(bytes == options.header_frame + sealed + second.frame);
    CHECK(segment->records() == 2);
    CHECK(segment->crc32c() == crc32c::Value(bytes.data(), bytes.size()));
  }
  SECTION("cut by a failed write: the cut frame is cut off, the CRC covers what remains") {
    auto segment = CreateOrDie(&options, 1);
    const int64_t limit = header + frame / 2;
    absl::Status status;
    {
      FileSizeLimit file_limit(static_cast<rlim_t>(limit));
      REQUIRE(segment->WriteHeader(0).ok());
      status = segment->Append(Pointers(&records));
    }
    REQUIRE_FALSE(status.ok());
    const std::string bytes = ReadFile(segment->path());
    REQUIRE(static_cast<int64_t>(bytes.size()) == header);
    CHECK(segment->records() == 0);
    CHECK(segment->crc32c() == crc32c::Value(bytes.data(), bytes.size()));
  }
}

TEST_CASE("a huge max_file_m_size saturates: a full file never looks over the limit",
          "[segment][rollover][config]") {
  TempDir dir;
  SegmentOptions options = Options(dir.path());
  options.max_file_bytes = MegabytesToBytes(1e13);  // 10^19 bytes: past INT64_MAX.
  auto segment = CreateOrDie(&options, 1);
  REQUIRE(segment->WriteHeader(0).ok());
  std::vector<EncodedRecord> records = {MakeRecord(1, 1, 1)};
  REQUIRE(segment->Append(Pointers(&records)).ok());
  CHECK_FALSE(segment->ShouldRollOver(0, 0, 1 << 20));
  CHECK_FALSE(segment->ShouldRollOver(int64_t{1} << 40, 1000, int64_t{1} << 40));
}

TEST_CASE("Create refuses a symbolic link at its name, naming it, and leaves the target untouched",
          "[segment][security]") {
  TempDir dir;
  TempDir outside("outside");
  const std::string target = outside.path() + "/target";
  test::WriteFile(target, "outside");
  SegmentOptions options = Options(dir.path());
  options.dir_fd = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(options.dir_fd >= 0);
  const std::string path = DataFilePath(options, 1);
  REQUIRE(symlink(target.c_str(), path.c_str()) == 0);
  const absl::StatusOr<std::unique_ptr<DataFileSegment>> segment =
      DataFileSegment::Create(&options, 1);
  close(options.dir_fd);
  REQUIRE_FALSE(segment.ok());
  CHECK(IsIoError(segment.status()));
  CHECK_THAT(std::string(segment.status().message()), Catch::Contains(path));
  CHECK(ReadFile(target) == "outside");
  // A dangling link too: O_CREAT would otherwise create its target.
  const std::string dangling = outside.path() + "/not-yet";
  REQUIRE(symlink(dangling.c_str(), DataFilePath(options, 2).c_str()) == 0);
  CHECK_FALSE(DataFileSegment::Create(&options, 2).ok());
  CHECK_FALSE(Exists(dangling));
}

TEST_CASE("ReplaceMeta never writes through a link at the Meta or its temp names",
          "[segment][security][meta]") {
  TempDir dir;
  TempDir outside("outside");
  const std::string target = outside.path() + "/target";
  test::WriteFile(target, "outside");
  const int dir_fd = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dir_fd >= 0);
  const std::string data = dir.path() + "/train.seg.2.1";
  xdl::proto::Meta meta;
  meta.set_record_count(3);

  // Temp names: the links are skipped, left in place, and another name is used.
  std::vector<std::string> planted;
  for (uint64_t serial = PeekMetaTempSerial(); planted.size() < 5; ++serial) {
    planted.push_back(MetaTempPath(data, serial));
    REQUIRE(symlink(target.c_str(), planted.back().c_str()) == 0);
  }
  REQUIRE(ReplaceMeta(data, meta, /*fsync=*/true, dir_fd).ok());
  CHECK(ReadMeta(data).SerializeAsString() == meta.SerializeAsString());
  for (const std::string& link : planted) CHECK(std::filesystem::is_symlink(link));

  // The Meta itself: an error naming it.
  REQUIRE(unlink(MetaPath(data).c_str()) == 0);
  REQUIRE(symlink(target.c_str(), MetaPath(data).c_str()) == 0);
  const absl::Status status = ReplaceMeta(data, meta, /*fsync=*/false, dir_fd);
  close(dir_fd);
  CHECK(IsIoError(status));
  CHECK_THAT(std::string(status.message()), Catch::Contains(MetaPath(data) + "' is a symbolic"));
  CHECK(std::filesystem::is_symlink(MetaPath(data)));
  CHECK(ReadFile(target) == "outside");
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
