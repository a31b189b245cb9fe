// TraceFile and RecordCursor (cpp/src/reader/trace_file.cc) against files written with protobuf's
// own serialization (not the writer): decoding, torn tails, corruption, Meta and verification.
#include "xdl_trace/reader/trace_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/crc32c.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/unknown_field_set.h"
#include "google/protobuf/wire_format.h"
#include "reader/reader_test_util.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {
namespace {

using test::AddColumn;
using test::Bytes;
using test::Frame;
using test::TempDir;
using test::WriteFile;

absl::string_view AsView(const std::string& s) { return s; }

TEST_CASE("reader decodes every dtype as zero-copy views into the mapping", "[reader]") {
  TempDir dir;
  struct Case {
    xdl::proto::Type proto;
    DType dtype;
    size_t size;
  };
  const std::vector<Case> cases = {
      {xdl::proto::Int8, DType::kInt8, 1},       {xdl::proto::Int16, DType::kInt16, 2},
      {xdl::proto::Int32, DType::kInt32, 4},     {xdl::proto::Int64, DType::kInt64, 8},
      {xdl::proto::Float, DType::kFloat32, 4},   {xdl::proto::Double, DType::kFloat64, 8},
      {xdl::proto::Bool, DType::kBool, 1},       {xdl::proto::Byte, DType::kByte, 1},
      {xdl::proto::UInt8, DType::kUInt8, 1},     {xdl::proto::UInt16, DType::kUInt16, 2},
      {xdl::proto::UInt32, DType::kUInt32, 4},   {xdl::proto::UInt64, DType::kUInt64, 8},
      {xdl::proto::Float16, DType::kFloat16, 2}, {xdl::proto::BFloat16, DType::kBFloat16, 2},
  };
  REQUIRE(cases.size() == static_cast<size_t>(kNumDTypes));
  std::vector<std::string> keys;
  xdl::proto::Record record;
  record.set_gstep(42);
  record.set_lstep(7);
  record.set_timestamp(1234567890123);
  std::vector<std::string> payloads;
  for (size_t i = 0; i < cases.size(); ++i) {
    keys.push_back(absl::StrCat("scope/k", i));
    std::string bytes(3 * 2 * cases[i].size, '\0');
    for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<char>(i * 31 + b);
    payloads.push_back(bytes);
    AddColumn(&record, cases[i].proto, {3, 2}, bytes);
  }
  const std::string path = dir / "train.trace.0.1";
  std::string data = HeaderFrame(keys) + Frame(record.SerializeAsString());
  WriteFile(path, data);

  const std::shared_ptr<TraceFile> file = MustOpen(path);
  CHECK(file->keys() == keys);
  CHECK_FALSE(file->meta().has_value());
  CHECK(file->meta_error().code() == absl::StatusCode::kNotFound);
  const std::vector<RecordView> records = ReadAllOk(file);
  REQUIRE(records.size() == 1);
  const RecordView& r = records[0];
  CHECK(r.gstep == 42);
  CHECK(r.lstep == 7);
  CHECK(r.timestamp_ms == 1234567890123);
  CHECK(r.offset == HeaderFrame(keys).size());
  CHECK(r.frame_size == data.size() - r.offset);
  REQUIRE(r.columns.size() == cases.size());
  const absl::string_view mapping = file->bytes();
  for (size_t i = 0; i < cases.size(); ++i) {
    const ColumnView& c = r.columns[i];
    CHECK(c.dtype == cases[i].dtype);
    CHECK(c.shape == Shape{3, 2});
    CHECK(c.NumElements() == 6);
    CHECK(c.data == payloads[i]);
    // Zero-copy: the view points into the mapped file, not into a copy.
    CHECK(c.data.data() >= mapping.data());
    CHECK(c.data.data() + c.data.size() <= mapping.data() + mapping.size());
  }
}

TEST_CASE("reader handles scalar, empty and unpacked-shape columns", "[reader]") {
  TempDir dir;
  xdl::proto::Record record;
  record.set_gstep(1);
  AddColumn(&record, xdl::proto::Double, {}, std::string(8, '\x01'));  // Scalar.
  record.add_column()->set_dtype(xdl::proto::Float);                   // Empty (trace_once).
  AddColumn(&record, xdl::proto::Int32, {0, 5}, "");                   // Zero elements.
  std::string body = record.SerializeAsString();
  // A column whose shape is written unpacked (one varint per dim), which
  // proto3 parsers must accept: dtype Int16, shape [2] unpacked, data 4 bytes.
  const std::string unpacked_column("\x08\x01\x10\x02\x1a\x04\x01\x00\x02\x00", 10);
  body += std::string("\x1a") + static_cast<char>(unpacked_column.size()) + unpacked_column;
  const std::string path = dir / "train.trace.0.1";
  WriteFile(path, HeaderFrame({"s", "once", "z", "u"}) + Frame(body));

  const std::shared_ptr<TraceFile> file = MustOpen(path);
  const std::vector<RecordView> records = ReadAllOk(file);
  REQUIRE(records.size() == 1);
  const auto& c = records[0].columns;
  REQUIRE(c.size() == 4);
  CHECK(c[0].shape.empty());
  CHECK(c[0].NumElements() == 1);
  CHECK_FALSE(c[0].empty());
  CHECK(c[1].empty());
  CHECK(c[1].NumElements() == 0);
  CHECK(c[1].dtype == DType::kFloat32);
  CHECK(c[2].shape == Shape{0, 5});
  CHECK(c[2].NumElements() == 0);
  CHECK_FALSE(c[2].empty());
  CHECK(c[3].dtype == DType::kInt16);
  CHECK(c[3].shape == Shape{2});
  CHECK(c[3].data == AsView(std::string("\x01\x00\x02\x00", 4)));
}

TEST_CASE("reader exposes unknown record fields as raw bytes", "[reader]") {
  TempDir dir;
  xdl::proto::Record record = SimpleRecord(3);
  auto* unknown = record.GetReflection()->MutableUnknownFields(&record);
  unknown->AddLengthDelimited(5, "device events");
  unknown->AddVarint(6, 300);
  unknown->AddFixed32(7, 0xDEADBEEF);
  unknown->AddFixed64(15, 0x0123456789ABCDEFull);
  // An unknown field inside a Column is skipped.
  record.mutable_column(0)
      ->GetReflection()
      ->MutableUnknownFields(record.mutable_column(0))
      ->AddLengthDelimited(9, "ignored");
  const std::string path = dir / "train.trace.0.1";
  WriteFile(path, HeaderFrame({"w", "loss"}) + Frame(record.SerializeAsString()));

  const std::shared_ptr<TraceFile> file = MustOpen(path);
  const std::vector<RecordView> records = ReadAllOk(file);
  REQUIRE(records.size() == 1);
  const RecordView& r = records[0];
  CHECK(r.gstep == 3);
  CHECK(r.columns.size() == 2);
  CHECK(r.columns[0].data == Bytes<float>({3, 4, 5, 6, 7, 8}));
  REQUIRE(r.extra_fields.size() == 4);
  CHECK(r.extra_fields[0].number == 5);
  CHECK(r.extra_fields[0].wire_type == 2);
  CHECK(r.extra_fields[0].payload == "device events");
  CHECK(r.extra_fields[1].number == 6);
  CHECK(r.extra_fields[2].number == 7);
  CHECK(r.extra_fields[2].payload.size() == 4);
  CHECK(r.extra_fields[3].number == 15);
  CHECK(r.extra_fields[3].payload.size() == 8);
  // The encoded views re-parse into exactly the unknown fields protobuf wrote.
  std::string encoded;
  for (const auto& f : r.extra_fields) encoded += std::string(f.encoded);
  std::string expected;
  google::protobuf::io::StringOutputStream sink(&expected);
  {
    google::protobuf::io::CodedOutputStream out(&sink);
    google::protobuf::internal::WireFormat::SerializeUnknownFields(*unknown, &out);
  }
  CHECK(encoded == expected);
}

TEST_CASE("a torn final frame is reported, not an error, at every cut point", "[reader]") {
  TempDir dir;
  const std::string full = WriteSimpleFile(dir / "full", 10, 3, /*with_meta=*/false);
  const size_t header = HeaderFrame({"w", "loss"}).size();
  const size_t frame = Frame(SimpleRecord(10).SerializeAsString()).size();
  const size_t last = header + 2 * frame;  // Offset of the third record.
  REQUIRE(last + frame == full.size());
  for (size_t cut = last + 1; cut < full.size(); ++cut) {  // Prefix and body cut short.
    const std::string path = dir / absl::StrCat("train.trace.0.", cut);
    WriteFile(path, full.substr(0, cut));
    auto file = TraceFile::Open(path);
    REQUIRE(file.ok());
    RecordCursor cursor = (*file)->Records();
    auto records = ReadAll(*file, &cursor);
    INFO("cut at " << cut);
    CHECK(cursor.status().ok());
    CHECK(records.size() == 2);
    CHECK(cursor.torn_tail());
    CHECK(cursor.torn_offset() == last);
    VerifyReport report = (*file)->Verify();
    CHECK(report.torn_tail);
  }
  // A cut exactly at a frame boundary is a clean end.
  WriteFile(dir / "clean", full.substr(0, last));
  auto clean = TraceFile::Open(dir / "clean");
  REQUIRE(clean.ok());
  RecordCursor cursor = (*clean)->Records();
  CHECK(ReadAll(*clean, &cursor).size() == 2);
  CHECK_FALSE(cursor.torn_tail());
  // A cut inside the Header frame: no keys, no records, torn.
  for (size_t cut : {size_t{0}, size_t{2}, header - 1}) {
    WriteFile(dir / "header", full.substr(0, cut));
    auto file = TraceFile::Open(dir / "header");
    REQUIRE(file.ok());
    CHECK((*file)->header_torn());
    CHECK((*file)->keys().empty());
    RecordCursor c = (*file)->Records();
    RecordView r;
    CHECK_FALSE(c.Next(&r));
    CHECK(c.torn_tail());
    CHECK(c.status().ok());
  }
}

// Reads `path` to the end and returns the error message (empty when none).
std::string ReadError(const std::string& path) {
  auto file = TraceFile::Open(path);
  if (!file.ok()) return std::string(file.status().message());
  RecordCursor cursor = (*file)->Records();
  ReadAll(*file, &cursor);
  if (cursor.status().ok()) return "";
  CHECK(cursor.status().code() == absl::StatusCode::kDataLoss);
  return std::string(cursor.status().message());
}

TEST_CASE("corruption is an error naming the file and the byte offset", "[reader]") {
  TempDir dir;
  const std::string header = HeaderFrame({"w", "loss"});
  const std::string good = Frame(SimpleRecord(1).SerializeAsString());
  const size_t second = header.size() + good.size();  // Offset of the bad frame.

  SECTION("bad varint") {
    const std::string body("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12);
    const std::string path = dir / "train.trace.0.1";
    WriteFile(path, header + good + Frame(body));
    const std::string error = ReadError(path);
    CHECK(error.find(path) != std::string::npos);
    CHECK(error.find(absl::StrCat("byte offset ", second + 4 + 1)) != std::string::npos);
    CHECK(error.find("bad varint") != std::string::npos);
  }
  SECTION("field overruns its message") {
    const std::string body("\x08\x01\x1a\x7f\x00", 5);
    const std::string path = dir / "train.trace.0.1";
    WriteFile(path, header + good + Frame(body));
    const std::string error = ReadError(path);
    INFO(error);
    CHECK(error.find(path) != std::string::npos);
    CHECK(error.find(absl::StrCat("byte offset ", second + 4 + 2)) != std::string::npos);
    CHECK(error.find("overruns") != std::string::npos);
  }
  SECTION("data size differs from shape times dtype size") {
    xdl::proto::Record record = SimpleRecord(2);
    record.mutable_column(0)->set_data("short");
    const std::string path = dir / "train.trace.0.1";
    WriteFile(path, header + good + Frame(record.SerializeAsString()));
    const std::string error = ReadError(path);
    CHECK(error.find(path) != std::string::npos);
    CHECK(error.find("5 bytes") != std::string::npos);
    CHECK(error.find("need 24") != std::string::npos);
  }
  SECTION("wrong column count") {
    xdl::proto::Record record = SimpleRecord(2);
    record.mutable_column()->RemoveLast();
    const std::string path = dir / "train.trace.0.1";
    WriteFile(path, header + good + Frame(record.SerializeAsString()));
    const std::string error = ReadError(path);
    CHECK(error.find(absl::StrCat("byte offset ", second)) != std::string::npos);
    CHECK(error.find("1 columns but the header has 2 keys") != std::string::npos);
  }
  SECTION("an impossible frame length inside the part the Meta covers") {
    const std::string data = header + good + good + good;
    std::string broken = data;
    broken[second + 3] = '\x70';  // Length prefix now far past the end of the file.
    const std::string path = dir / "train.trace.0.1";
    WriteFile(path, broken);
    WriteFile(path + ".meta", MetaFor(data, 3, 1, 1).SerializeAsString());
    const std::string error = ReadError(path);
    CHECK(error.find(path) != std::string::npos);
    CHECK(error.find(absl::StrCat("byte offset ", second)) != std::string::npos);
    CHECK(error.find("runs past the end") != std::string::npos);
  }
}

TEST_CASE("random byte damage is an error or a torn tail, never a crash", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string data = WriteSimpleFile(path, 0, 6, /*with_meta=*/false);
  std::mt19937 rng(1234);
  int errors = 0;
  for (int trial = 0; trial < 600; ++trial) {
    std::string damaged = data;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) damaged[rng() % damaged.size()] = static_cast<char>(rng());
    if (trial % 3 == 0) damaged.resize(rng() % damaged.size());
    WriteFile(path, damaged);
    auto file = TraceFile::Open(path);
    if (!file.ok()) {
      CHECK(file.status().code() == absl::StatusCode::kDataLoss);
      ++errors;
      continue;
    }
    RecordCursor cursor = (*file)->Records();
    RecordView record;
    while (cursor.Next(&record)) {
      for (const ColumnView& c : record.columns) {
        // Every view stays inside the mapping.
        REQUIRE(c.data.data() + c.data.size() <= (*file)->bytes().data() + (*file)->size());
      }
    }
    if (!cursor.status().ok()) {
      CHECK(cursor.status().code() == absl::StatusCode::kDataLoss);
      CHECK(std::string(cursor.status().message()).find(path) != std::string::npos);
      ++errors;
    }
    (*file)->Verify();  // Must not crash either.
  }
  CHECK(errors > 0);
}

// Opens `path` (which must open) and verifies it against its Meta.
VerifyReport VerifyFile(const std::string& path) { return MustOpen(path)->Verify(); }

TEST_CASE("verify compares a file with its Meta", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string data = WriteSimpleFile(path, 5, 4);

  VerifyReport report = VerifyFile(path);
  INFO((report.problems.empty() ? "" : report.problems[0]));
  CHECK(report.ok);
  CHECK(report.has_meta);
  CHECK(report.records_counted == 4);
  CHECK(report.crc_actual == report.crc_expected);
  CHECK(report.unverified_tail_bytes == 0);

  SECTION("a flipped byte fails the checksum") {
    std::string flipped = data;
    flipped[data.size() - 3] ^= 0x40;  // Inside float data: still decodes.
    WriteFile(path, flipped);
    VerifyReport r = VerifyFile(path);
    CHECK_FALSE(r.ok);
    REQUIRE(r.problems.size() == 1);
    CHECK(r.problems[0].find(path) != std::string::npos);
    CHECK(r.problems[0].find("crc32c") != std::string::npos);
  }
  SECTION("a record count that disagrees") {
    xdl::proto::Meta meta = MetaFor(data, 5, 5, 8);
    WriteFile(path + ".meta", meta.SerializeAsString());
    VerifyReport r = VerifyFile(path);
    CHECK_FALSE(r.ok);
    CHECK(r.problems.at(0).find("says 5 records") != std::string::npos);
  }
  SECTION("records appended after the last Meta of a crashed run") {
    xdl::proto::Meta meta = MetaFor(data, 4, 5, 8);
    meta.set_closed_cleanly(false);
    WriteFile(path + ".meta", meta.SerializeAsString());
    const std::string extra = Frame(SimpleRecord(9).SerializeAsString());
    WriteFile(path, data + extra + extra.substr(0, 7));  // One whole, one torn.
    VerifyReport r = VerifyFile(path);
    CHECK(r.ok);
    CHECK(r.torn_tail);
    CHECK(r.unverified_tail_bytes == extra.size() + 7);
  }
  SECTION("a file shorter than its Meta says") {
    WriteFile(path, data.substr(0, data.size() - 10));
    VerifyReport r = VerifyFile(path);
    CHECK_FALSE(r.ok);
    CHECK(r.problems.at(0).find("truncated") != std::string::npos);
  }
  SECTION("no Meta") {
    std::remove((path + ".meta").c_str());
    VerifyReport r = VerifyFile(path);
    CHECK_FALSE(r.ok);
    CHECK_FALSE(r.has_meta);
    CHECK(r.problems.at(0).find("cannot verify") != std::string::npos);
  }
}

TEST_CASE("a Meta keeps its serialized bytes for fields the struct does not mirror", "[reader]") {
  xdl::proto::Meta meta;
  meta.set_run_id("run-42");
  meta.set_gstep_end(9);
  meta.set_format_version(1);
  const std::string bytes = meta.SerializeAsString();
  auto parsed = ParseFileMeta(bytes);
  REQUIRE(parsed.ok());
  CHECK(parsed->gstep_end == 9);
  CHECK(parsed->serialized == bytes);
  xdl::proto::Meta again;
  REQUIRE(again.ParseFromString(parsed->serialized));
  CHECK(again.run_id() == "run-42");
  CHECK(ParseFileMeta("\xff\xff").status().code() == absl::StatusCode::kDataLoss);
}

// --- Issue 9: hostile files (items 7-12 and 14) -------------------------------

// Record frame body with column "w" replaced by `column` (raw Column bytes).
std::string RecordWithColumn(int64_t gstep, const xdl::proto::Column& column) {
  xdl::proto::Record record = SimpleRecord(gstep);
  *record.mutable_column(0) = column;
  return record.SerializeAsString();
}

TEST_CASE("only regular files are read: a FIFO or /dev/zero is refused by name", "[reader]") {
  TempDir dir;
  const std::string fifo = dir / "train.trace.0.1";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto opened = TraceFile::Open(fifo);  // Must not wait for a writer.
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().message() == fifo + ": not a regular file (a FIFO)");

  const std::string zero = dir / "train.trace.0.2";
  REQUIRE(symlink("/dev/zero", zero.c_str()) == 0);
  CHECK(TraceFile::Open(zero).status().message() ==
        zero + ": not a regular file (a character device)");

  // A planted Meta: the records still read, the Meta is refused by name.
  const std::string path = dir / "train.trace.1.1";
  WriteSimpleFile(path, 0, 3, /*with_meta=*/false);
  REQUIRE(symlink("/dev/zero", (path + ".meta").c_str()) == 0);
  std::shared_ptr<TraceFile> file = MustOpen(path);
  CHECK_FALSE(file->meta().has_value());
  CHECK(file->meta_error().message() == path + ".meta: not a regular file (a character device)");
  CHECK(ReadAllOk(file).size() == 3);
  std::remove((path + ".meta").c_str());
  REQUIRE(mkfifo((path + ".meta").c_str(), 0600) == 0);
  CHECK(MustOpen(path)->meta_error().message() == path + ".meta: not a regular file (a FIFO)");
  std::remove((path + ".meta").c_str());
  WriteFile(path + ".meta", std::string(70000, '\0'));
  CHECK(MustOpen(path)->meta_error().message() ==
        path + ".meta: 70000 bytes, more than a Meta can be (65536)");

  // A directory lists the planted entries (so reading names them) without hanging.
  const TraceReader reader = MustOpenTrace(dir.path());
  CHECK(reader.files().size() == 3);
  Drained all = Drain(reader.Read({}));
  CHECK(all.status.message() == fifo + ": not a regular file (a FIFO)");
}

TEST_CASE("a shape whose element count or byte count overflows is corruption", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string header = HeaderFrame({"w", "loss"});
  xdl::proto::Column column;
  column.set_dtype(xdl::proto::Int8);
  for (int d : {1 << 30, 1 << 30, 16}) column.add_shape(d);
  WriteFile(path, header + Frame(RecordWithColumn(1, column)));
  std::string error = ReadError(path);
  CHECK(error.find(absl::StrCat(path, ": corrupt at byte offset ")) == 0);
  CHECK(error.find(": column 0 ('w'): shape [1073741824, 1073741824, 16] has more than "
                   "9223372036854775807 elements") != std::string::npos);

  column.set_dtype(xdl::proto::Float);
  column.set_shape(2, 4);  // 2^62 elements fit an int64; 2^64 bytes do not fit a uint64.
  WriteFile(path, header + Frame(RecordWithColumn(1, column)));
  error = ReadError(path);
  CHECK(error.find("column data has 0 bytes but its shape [1073741824, 1073741824, 4] and float32 "
                   "dtype need 18446744073709551616") != std::string::npos);

  ColumnView view;
  view.shape = {1 << 30, 1 << 30, 1 << 30, 16};
  view.data = "x";
  CHECK(view.NumElements() == -1);  // Checked: no signed overflow.
}

TEST_CASE("an unknown dtype is opaque bytes, not corruption", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  xdl::proto::Column column;
  column.set_dtype(static_cast<xdl::proto::Type>(99));
  column.add_shape(2);
  column.add_shape(3);
  column.set_data("abcdefg");  // Any length: the reader cannot know the element size.
  xdl::proto::Column negative = column;
  negative.set_dtype(static_cast<xdl::proto::Type>(-1));
  WriteFile(path, HeaderFrame({"w", "loss"}) + Frame(RecordWithColumn(1, column)) +
                      Frame(RecordWithColumn(2, negative)));
  std::shared_ptr<TraceFile> file = MustOpen(path);  // Owns the mapping the views point into.
  std::vector<RecordView> records = ReadAllOk(file);
  REQUIRE(records.size() == 2);
  CHECK(static_cast<int32_t>(records[0].columns[0].dtype) == 99);
  CHECK_FALSE(records[0].columns[0].known_dtype());
  CHECK(records[0].columns[0].data == "abcdefg");
  CHECK(records[0].columns[0].shape == Shape{2, 3});
  CHECK(static_cast<int32_t>(records[1].columns[0].dtype) == -1);
  CHECK(records[0].columns[1].known_dtype());
}

TEST_CASE("a zero-filled tail is a torn tail: every complete record, then the offset", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string data = WriteSimpleFile(path, 0, 3, /*with_meta=*/false);
  WriteFile(path, data + std::string(4096, '\0'));
  std::shared_ptr<TraceFile> file = MustOpen(path);
  RecordCursor cursor = file->Records();
  CHECK(ReadAll(file, &cursor).size() == 3);
  CHECK(cursor.status().ok());
  CHECK(cursor.torn_tail());
  CHECK(cursor.torn_offset() == data.size());
  Drained drained = Drain(MustOpenTrace(path).Read({}));
  REQUIRE(drained.status.ok());
  CHECK(drained.records.size() == 3);
  REQUIRE(drained.torn_tails.size() == 1);
  const TornTail& torn = drained.torn_tails[0];
  CHECK(torn.zero_filled);
  CHECK(torn.zero_from == data.size());
  CHECK(DescribeTornTail(torn) ==
        absl::StrCat(path, ": torn tail at byte offset ", data.size(),
                     ": zero-filled from byte offset ", data.size(),
                     " to the end (4096 bytes), as a power loss leaves unsynced data"));

  // The Meta's rename reached the disk, the data did not: still a torn tail.
  WriteFile(path, data.substr(0, data.size() - 10) + std::string(4096, '\0'));
  WriteFile(path + ".meta", MetaFor(data, 3, 0, 2).SerializeAsString());
  drained = Drain(MustOpenTrace(path).Read({}));
  REQUIRE(drained.status.ok());
  CHECK(drained.records.size() == 2);
  REQUIRE(drained.torn_tails.size() == 1);
  CHECK(DescribeTornTail(drained.torn_tails[0]).find("so records it counted were lost") !=
        std::string::npos);
  CHECK_FALSE(MustOpen(path)->Verify().ok);  // Verify still says records were lost.

  // A file of zeros (nothing reached the disk) has no Header, not empty records.
  std::remove((path + ".meta").c_str());
  WriteFile(path, std::string(4096, '\0'));
  CHECK(MustOpen(path)->header_torn());

  // Zeros followed by more frames are corruption.
  WriteFile(path, data + Frame(std::string(10, '\0')) + Frame(SimpleRecord(9).SerializeAsString()));
  CHECK(ReadError(path).find("invalid field number") != std::string::npos);
}

TEST_CASE("verify: no Meta and no record is unverifiable, nothing lost", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  WriteFile(path, HeaderFrame({"w", "loss"}));  // A crash before the first Meta.
  VerifyReport report = VerifyFile(path);
  CHECK(report.ok);
  CHECK(report.unverifiable);
  CHECK(report.note.find("no data lost") != std::string::npos);
  WriteFile(path, HeaderFrame({"w", "loss"}).substr(0, 3));  // Even the Header cut short.
  CHECK(VerifyFile(path).unverifiable);
}

TEST_CASE("verify checks the Meta's step and time ranges against the records", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string data = WriteSteps(path, {4, 2, 6});  // Min/max, not first/last.
  xdl::proto::Meta meta = MetaFor(data, 3, 2, 6);
  meta.set_lstep_begin(1);
  meta.set_lstep_end(3);
  meta.set_timestamp_begin(1700000000002);
  meta.set_timestamp_end(1700000000006);
  WriteFile(path + ".meta", meta.SerializeAsString());
  VerifyReport report = VerifyFile(path);
  INFO((report.problems.empty() ? "" : report.problems[0]));
  CHECK(report.ok);

  meta.set_gstep_begin(3);  // Would make records(gsteps=(2, 2)) skip the file.
  meta.set_timestamp_end(1700000000005);
  WriteFile(path + ".meta", meta.SerializeAsString());
  report = VerifyFile(path);
  CHECK_FALSE(report.ok);
  REQUIRE(report.problems.size() == 2);
  CHECK(report.problems[0].find("the Meta says gstep_begin 3, the records say 2") !=
        std::string::npos);
  CHECK(report.problems[1].find(
            "the Meta says timestamp_end 1700000000005, the records say 1700000000006") !=
        std::string::npos);
}

TEST_CASE("verify: XDL's Meta is unverifiable, a newer format_version is refused", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string data = WriteSimpleFile(path, 0, 3, /*with_meta=*/false);
  xdl::proto::Meta xdl;  // Fields 1-6 only; -1 where XDL never learnt a value.
  xdl.set_gstep_begin(-1);
  xdl.set_gstep_end(2);
  WriteFile(path + ".meta", xdl.SerializeAsString());
  VerifyReport report = VerifyFile(path);
  CHECK(report.ok);
  CHECK(report.unverifiable);
  CHECK(report.note.find("XDL Meta, no checksum") != std::string::npos);
  Drained all = Drain(MustOpenTrace(path).Read({std::nullopt, {1, 2, std::nullopt}, {}}));
  CHECK(all.records == std::vector<std::pair<int64_t, int32_t>>{{1, 0}, {2, 0}});
  CHECK(ReadStartOffset(*MustOpen(path), {0, 0, std::nullopt}).has_value());  // -1: unknown.
  xdl.set_gstep_end(-1);  // Both -1: XDL traced no step into this file.
  WriteFile(path + ".meta", xdl.SerializeAsString());
  CHECK_FALSE(ReadStartOffset(*MustOpen(path), {0, 0, std::nullopt}).has_value());

  xdl::proto::Meta newer = MetaFor(data, 3, 0, 2);
  newer.set_format_version(2);
  WriteFile(path + ".meta", newer.SerializeAsString());
  const std::string refused = absl::StrCat(
      path, ".meta: format_version 2 is newer than this reader knows (1): not reading ", path);
  report = VerifyFile(path);
  CHECK_FALSE(report.ok);
  CHECK(report.problems == std::vector<std::string>{refused});
  CHECK(Drain(MustOpenTrace(path).Read({})).status.message() == refused);
}

TEST_CASE("column descriptors that do not match the keys are corruption, named", "[reader]") {
  TempDir dir;
  xdl::proto::Header header;
  header.add_key("w");
  header.add_key("loss");
  header.add_column()->set_content(xdl::proto::ColumnDescriptor::VALUE);  // One for two keys.
  const std::string path = dir / "train.trace.0.1";
  WriteFile(path, Frame(header.SerializeAsString()) + Frame(SimpleRecord(1).SerializeAsString()));
  absl::StatusOr<std::shared_ptr<TraceFile>> file = TraceFile::Open(path);
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(file.status().message()),
             Catch::Contains(path) && Catch::Contains("1 column descriptors for 2 keys"));

  // A field 2 that is not a ColumnDescriptor (a varint): named with its offset.
  xdl::proto::Header keys_only;
  keys_only.add_key("w");
  keys_only.add_key("loss");
  std::string body = keys_only.SerializeAsString();  // 9 bytes.
  body += std::string("\x10\x05", 2);                // Field 2 as a varint.
  WriteFile(path, Frame(body));
  file = TraceFile::Open(path);
  REQUIRE_FALSE(file.ok());
  CHECK_THAT(std::string(file.status().message()),
             Catch::Contains("corrupt at byte offset 13") &&
                 Catch::Contains("Header.column 0 is not a ColumnDescriptor"));
}

}  // namespace
// --- Issue 24 ----------------------------------------------------------------------------------

namespace {

// The frame of `record` as the writer seals it: field 16 (crc32c) last, the
// CRC-32C of the bytes before it.
std::string SealedFrame(xdl::proto::Record record) {
  record.clear_crc32c();
  const std::string body = record.SerializeAsString();
  record.set_crc32c(internal::crc32c::Value(body.data(), body.size()));
  const std::string sealed = record.SerializeAsString();
  REQUIRE(sealed.substr(0, body.size()) == body);  // Field 16 is last.
  return Frame(sealed);
}

// A Meta as the writer writes it: field 17 (meta_crc32c) last, the CRC-32C of
// the bytes before it.
std::string SealedMeta(const xdl::proto::Meta& meta) {
  xdl::proto::Meta copy = meta;
  copy.clear_meta_crc32c();
  const std::string body = copy.SerializeAsString();
  copy.set_meta_crc32c(internal::crc32c::Value(body.data(), body.size()));
  return copy.SerializeAsString();
}

}  // namespace

TEST_CASE("a Header cut short inside what a closed Meta covers is corruption (issue 24 #1)",
          "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  const std::string data = WriteSimpleFile(path, 0, 5);
  for (const size_t cut : {size_t{2}, size_t{10}}) {
    INFO("cut at " << cut);
    WriteFile(path, data.substr(0, cut));
    auto file = TraceFile::Open(path);
    REQUIRE_FALSE(file.ok());
    CHECK(file.status().code() == absl::StatusCode::kDataLoss);
    const std::string message(file.status().message());
    CHECK_THAT(message, Catch::Contains(path + ": corrupt at byte offset 0"));
    CHECK_THAT(message, Catch::Contains("Header frame"));
    CHECK_THAT(message, Catch::Contains(absl::StrCat("the Meta covers ", data.size())));
    CHECK(Drain(MustOpenTrace(path).Read({})).status.code() == absl::StatusCode::kDataLoss);
  }
  // Without a Meta (a crash before the first one) it stays a torn tail.
  std::remove((path + ".meta").c_str());
  WriteFile(path, data.substr(0, 10));
  CHECK(MustOpen(path)->header_torn());
}

TEST_CASE("a record's checksum is checked on every read, with an opt-out (issue 24 #3)",
          "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  std::string data = HeaderFrame({"w", "loss"});
  for (int i = 0; i < 3; ++i) data += SealedFrame(SimpleRecord(i));
  WriteFile(path, data);
  WriteFile(path + ".meta", SealedMeta(MetaFor(data, 3, 0, 2)));
  {
    std::vector<RecordView> records = ReadAllOk(MustOpen(path));
    REQUIRE(records.size() == 3);
    CHECK(records[2].gstep == 2);
    CHECK(records[2].extra_fields.empty());  // The checksum is not an unknown field.
    CHECK(VerifyFile(path).ok);
  }
  // Flip one bit of a float inside record 1 (its Meta's file checksum still matches:
  // rewritten), as a disk or a copy would.
  const std::string frame1 = SealedFrame(SimpleRecord(1));
  const size_t at = data.find(frame1) + frame1.size() - 20;
  data[at] = static_cast<char>(data[at] ^ 0x40);
  WriteFile(path, data);
  WriteFile(path + ".meta", SealedMeta(MetaFor(data, 3, 0, 2)));
  const uint64_t frame_offset =
      HeaderFrame({"w", "loss"}).size() + SealedFrame(SimpleRecord(0)).size();

  RecordCursor cursor = MustOpen(path)->Records();
  RecordView record;
  CHECK(cursor.Next(&record));
  CHECK_FALSE(cursor.Next(&record));
  CHECK(cursor.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(cursor.status().message()),
             Catch::Contains(absl::StrCat(path, ": corrupt at byte offset ", frame_offset,
                                          ": record checksum mismatch")));
  CHECK(Drain(MustOpenTrace(path).Read({})).status.code() == absl::StatusCode::kDataLoss);
  CHECK_FALSE(VerifyFile(path).ok);

  // The opt-out reads it (hot paths that trust their disk).
  FileOptions unchecked;
  unchecked.check_record_crc = false;
  auto file = TraceFile::Open(path, unchecked);
  REQUIRE(file.ok());
  RecordCursor fast = (*file)->Records();
  std::vector<RecordView> all = ReadAll(*file, &fast);
  CHECK(fast.status().ok());
  CHECK(all.size() == 3);
  auto reader = TraceReader::Open(path, "train", "trace", unchecked);
  REQUIRE(reader.ok());
  CHECK(Drain(reader->Read({})).status.ok());

  // A checksum field that is not the last field is corruption too.
  xdl::proto::Record moved = SimpleRecord(0);
  moved.set_crc32c(1);
  std::string body = moved.SerializeAsString();
  body += std::string("\x20\x05", 2);  // Field 4 again (timestamp 5) after field 16.
  WriteFile(path, HeaderFrame({"w", "loss"}) + Frame(body));
  std::remove((path + ".meta").c_str());
  RecordCursor misplaced = MustOpen(path)->Records();
  CHECK_FALSE(misplaced.Next(&record));
  CHECK_THAT(std::string(misplaced.status().message()),
             Catch::Contains("Record.crc32c is not the last field"));
}

TEST_CASE("the Meta's own checksum and ranges are checked before any pruning (issue 24 #3)",
          "[reader]") {
  TempDir dir;
  const std::string first = dir / "train.trace.0.1";
  const std::string second = dir / "train.trace.0.2";
  WriteSimpleFile(first, 0, 5);
  const std::string data = WriteSimpleFile(second, 5, 5);
  const xdl::proto::Meta good = MetaFor(data, 5, 5, 9);
  WriteFile(second + ".meta", SealedMeta(good));
  CHECK(MustOpen(second)->meta().has_value());
  CHECK(MustOpen(second)->meta_error().ok());

  // One flipped bit in gstep_begin (9 -> 25... begin > end): with its checksum the Meta is
  // refused; without one (an older writer) its impossible range is.
  std::string sealed = SealedMeta(good);
  xdl::proto::Meta lying = good;
  lying.set_gstep_begin(good.gstep_begin() | 0x40);
  std::string lying_bytes = lying.SerializeAsString();
  lying_bytes += sealed.substr(sealed.size() - 6);  // The good Meta's checksum field.
  for (const std::string& meta : {lying_bytes, lying.SerializeAsString()}) {
    WriteFile(second + ".meta", meta);
    const std::shared_ptr<TraceFile> file = MustOpen(second);
    CHECK_FALSE(file->meta().has_value());
    CHECK(file->meta_error().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(file->meta_error().message()), Catch::StartsWith(second + ".meta: "));
    CHECK_FALSE(VerifyFile(second).ok);
    // The file is read, not pruned: gsteps 5..9 are all there.
    Drained picked =
        Drain(MustOpenTrace(dir.path()).Read({std::nullopt, {6, 7, std::nullopt}, {}}));
    REQUIRE(picked.status.ok());
    CHECK(picked.records == std::vector<std::pair<int64_t, int32_t>>{{6, 0}, {7, 0}});
  }
  WriteFile(second + ".meta", lying_bytes);
  CHECK_THAT(std::string(MustOpen(second)->meta_error().message()), Catch::Contains("checksum"));
  WriteFile(second + ".meta", lying.SerializeAsString());
  CHECK_THAT(std::string(MustOpen(second)->meta_error().message()),
             Catch::Contains("gstep_begin 69 > gstep_end 9"));
}

TEST_CASE("a key's Header index: O(log keys), the first of a repeated one (issue 24 #2)",
          "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back(absl::StrCat("layer", 999 - i, "/w"));
  keys.push_back("layer5/w");  // Repeated: the first one is the key's column.
  WriteFile(path, HeaderFrame(keys));
  auto file = MustOpen(path);
  CHECK(file->KeyIndex("layer999/w") == std::optional<size_t>(0));
  CHECK(file->KeyIndex("layer0/w") == std::optional<size_t>(999));
  CHECK(file->KeyIndex("layer5/w") == std::optional<size_t>(994));
  CHECK(file->KeyIndex("layer5") == std::nullopt);
  CHECK(file->KeyIndex("") == std::nullopt);
  CHECK(file->KeyIndex("zzz") == std::nullopt);
  // A file cut inside its Header names no key.
  WriteFile(path, HeaderFrame(keys).substr(0, 10));
  CHECK(MustOpen(path)->KeyIndex("layer0/w") == std::nullopt);
}

// --- Issue 37 ----------------------------------------------------------------------------------

namespace {

// A Meta as the writer writes it since field 18: header_crc32c (of the Header frame, the first
// `header_bytes` of `data`), then meta_crc32c last.
std::string SealedMetaWithHeaderCrc(xdl::proto::Meta meta, const std::string& data,
                                    size_t header_bytes) {
  meta.set_header_crc32c(internal::crc32c::Value(data.data(), header_bytes));
  meta.clear_meta_crc32c();
  std::string bytes = meta.SerializeAsString();  // Field 18 last so far.
  const uint32_t crc = internal::crc32c::Value(bytes.data(), bytes.size());
  bytes += "\x8d\x01";  // Field 17, fixed32, appended last as the writer does (SealedMeta
                        // would let protobuf put it before field 18).
  for (int shift = 0; shift < 32; shift += 8) bytes += static_cast<char>(crc >> shift);
  return bytes;
}

// A file of sealed SimpleRecords for gsteps 0..count-1 and the Meta the writer writes for it.
std::string WriteSealedFile(const std::string& path, int count) {
  std::string data = HeaderFrame({"w", "loss"});
  const size_t header_bytes = data.size();
  for (int i = 0; i < count; ++i) data += SealedFrame(SimpleRecord(i));
  WriteFile(path, data);
  WriteFile(path + ".meta",
            SealedMetaWithHeaderCrc(MetaFor(data, count, 0, count - 1), data, header_bytes));
  return data;
}

std::string OpenError(const std::string& path) {
  auto file = TraceFile::Open(path);
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == absl::StatusCode::kDataLoss);
  return std::string(file.status().message());
}

}  // namespace

TEST_CASE("CheckHeader: a Header that does not match Meta.header_crc32c is refused at open",
          "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  std::string data = WriteSealedFile(path, 3);
  CHECK(ReadAllOk(MustOpen(path)).size() == 3);
  CHECK(VerifyFile(path).ok);

  const size_t key = data.find("loss");
  data[key] = static_cast<char>(data[key] ^ 0x01);  // "loss" -> "moss": a key renamed.
  WriteFile(path, data);
  CHECK_THAT(OpenError(path), Catch::StartsWith(path + ": corrupt at byte offset 0: Header "
                                                       "checksum mismatch"));
  CHECK(Drain(MustOpenTrace(dir.path()).Read({})).status.code() == absl::StatusCode::kDataLoss);

  // A Meta without field 18 (XDL's, ours before it) leaves the Header to verify's checksum.
  xdl::proto::Meta older;
  REQUIRE(older.ParseFromString(test::ReadFile(path + ".meta")));
  older.clear_header_crc32c();
  WriteFile(path + ".meta", SealedMeta(older));
  CHECK(MustOpen(path)->KeyIndex("moss").has_value());
  CHECK_FALSE(VerifyFile(path).ok);
}

TEST_CASE("CheckHeader: a Header length prefix that does not fit a covered file is corruption",
          "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  std::string data = WriteSealedFile(path, 3);
  data[3] = static_cast<char>(data[3] ^ 0x01);  // Bit 24 of the Header's length.
  WriteFile(path, data);
  const std::string error = OpenError(path);
  CHECK_THAT(error, Catch::StartsWith(path + ": corrupt at byte offset 0: the Header frame's "
                                             "length prefix says "));
  CHECK_THAT(error, Catch::Contains("(a damaged length prefix)"));
  // Without a Meta nothing vouches for the bytes: a torn Header, as a crash leaves.
  std::remove((path + ".meta").c_str());
  CHECK(MustOpen(path)->header_torn());
}

TEST_CASE("a record without its checksum in a file whose Meta has one is corruption", "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  std::string data = WriteSealedFile(path, 3);
  const std::string frame1 = SealedFrame(SimpleRecord(1));
  const size_t at = data.find(frame1);
  const size_t tag = at + frame1.size() - 6;
  REQUIRE(static_cast<uint8_t>(data[tag]) == 0x85);  // Field 16, fixed32.
  data[tag] = static_cast<char>(data[tag] ^ 0x08);   // Field 17: an unknown field.
  WriteFile(path, data);
  const std::string expected = absl::StrCat(path, ": corrupt at byte offset ", at,
                                            ": record without its checksum (Record.crc32c");
  for (const bool check : {true, false}) {  // Its presence is checked even without its value.
    FileOptions options;
    options.check_record_crc = check;
    auto file = TraceFile::Open(path, options);
    REQUIRE(file.ok());
    RecordCursor cursor = (*file)->Records();
    CHECK(ReadAll(*file, &cursor).size() == 1);
    CHECK_THAT(std::string(cursor.status().message()), Catch::StartsWith(expected));
  }
  const VerifyReport report = VerifyFile(path);
  CHECK_FALSE(report.ok);

  // A Meta without its own checksum (ours before it, XDL's): records without one read as before.
  xdl::proto::Meta unsealed = MetaFor(data, 3, 0, 2);
  WriteFile(path + ".meta", unsealed.SerializeAsString());
  CHECK(ReadAllOk(MustOpen(path)).size() == 3);
}

TEST_CASE("a Meta that lost its own checksum or its format_version to a flipped bit is refused",
          "[reader]") {
  TempDir dir;
  const std::string path = dir / "train.trace.0.1";
  WriteSealedFile(path, 3);
  const std::string sealed = test::ReadFile(path + ".meta");
  REQUIRE(static_cast<uint8_t>(sealed[sealed.size() - 6]) == 0x8D);  // meta_crc32c's tag.

  std::string flipped = sealed;
  flipped[flipped.size() - 6] = static_cast<char>(0x8D ^ 0x08);  // Field 17 -> 16.
  WriteFile(path + ".meta", flipped);
  std::shared_ptr<TraceFile> file = MustOpen(path);
  CHECK_FALSE(file->meta().has_value());
  CHECK_THAT(std::string(file->meta_error().message()),
             Catch::Contains("has header_crc32c (field 18) but not its own checksum"));
  CHECK_FALSE(VerifyFile(path).ok);

  // No format_version but a field XDL's Meta never has: not read as XDL's, unverifiable.
  xdl::proto::Meta no_version;
  REQUIRE(no_version.ParseFromString(sealed));
  no_version.clear_format_version();
  no_version.clear_header_crc32c();
  no_version.clear_meta_crc32c();
  WriteFile(path + ".meta", no_version.SerializeAsString());
  file = MustOpen(path);
  CHECK_FALSE(file->meta().has_value());
  CHECK_THAT(std::string(file->meta_error().message()),
             Catch::Contains("has no format_version but holds field 9,"));
  const VerifyReport report = VerifyFile(path);
  CHECK_FALSE(report.ok);
  CHECK_FALSE(report.unverifiable);

  // XDL's own Meta (fields 1-6) stays unverifiable, not refused.
  xdl::proto::Meta xdl;
  xdl.set_gstep_begin(0);
  xdl.set_gstep_end(2);
  WriteFile(path + ".meta", xdl.SerializeAsString());
  file = MustOpen(path);
  CHECK(file->meta().has_value());
  CHECK(VerifyFile(path).unverifiable);
}

}  // namespace xdl_trace
