// Tests of TraceWriter on real files: header, rollover, naming, Meta, overflow, errors.
#include "io/trace_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/crc32c.h"
#include "io/file_set.h"
#include "io/io_error.h"
#include "io/limits.h"
#include "io/meta_writer.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/file_names.h"

namespace xdl_trace {
namespace internal {
namespace {

// ---- Helpers ----

using test::Eventually;
using test::Exists;
using test::FileSizeLimit;
using test::Frame;
using test::Gate;
using test::ReadFile;
using test::TempDir;
using test::TryReadFile;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A record whose one float column carries `payload_bytes` bytes, framed with protobuf.
EncodedRecord MakeRecord(int64_t gstep, size_t payload_bytes = 100) {
  xdl::proto::Record record;
  record.set_gstep(gstep);
  record.set_lstep(gstep * 10);
  record.set_timestamp(1'700'000'000'000 + gstep);
  xdl::proto::Column* column = record.add_column();
  column->set_dtype(xdl::proto::Float);
  column->add_shape(static_cast<int32_t>(payload_bytes / 4));
  column->set_data(std::string(payload_bytes, static_cast<char>('a' + gstep % 26)));
  std::string body;
  REQUIRE(record.SerializeToString(&body));
  EncodedRecord r;
  r.gstep = gstep;
  r.lstep = gstep * 10;
  r.timestamp_ms = 1'700'000'000'000 + gstep;
  r.frame = Frame(body);
  return r;
}

std::string HeaderFrame(const std::vector<std::string>& keys) {
  xdl::proto::Header header;
  for (const auto& k : keys) header.add_key(k);
  return Frame(header.SerializeAsString());
}

struct DataFile {
  xdl::proto::Header header;
  std::vector<xdl::proto::Record> records;
  std::vector<size_t> frame_sizes;  // Records only, prefix included.
  bool clean = true;                // No torn or unparsable frame.
};

// Parses `bytes` as Header frame + Record frames.
DataFile ParseData(const std::string& bytes) {
  DataFile out;
  size_t pos = 0;
  bool first = true;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 4) {
      out.clean = false;
      break;
    }
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(bytes[pos + i])} << (8 * i);
    if (bytes.size() - pos - 4 < n) {
      out.clean = false;
      break;
    }
    const char* body = bytes.data() + pos + 4;
    if (first) {
      if (!out.header.ParseFromArray(body, static_cast<int>(n))) out.clean = false;
      first = false;
    } else {
      out.records.emplace_back();
      if (!out.records.back().ParseFromArray(body, static_cast<int>(n))) out.clean = false;
      out.frame_sizes.push_back(n + 4);
    }
    pos += 4 + n;
  }
  if (first) out.clean = false;  // Not even a Header.
  return out;
}

DataFile ReadData(const std::string& path) { return ParseData(ReadFile(path)); }

xdl::proto::Meta ReadMeta(const std::string& data_path) {
  xdl::proto::Meta meta;
  const std::string bytes = ReadFile(MetaPath(data_path));
  REQUIRE(meta.ParseFromString(bytes));
  return meta;
}

// The Meta describes a prefix of its data file that checks out.
void CheckMetaMatchesPrefix(const std::string& data_path) {
  const xdl::proto::Meta meta = ReadMeta(data_path);
  const std::string bytes = ReadFile(data_path);
  INFO("data file " << data_path);
  REQUIRE(meta.data_bytes() <= static_cast<int64_t>(bytes.size()));
  const std::string prefix = bytes.substr(0, static_cast<size_t>(meta.data_bytes()));
  CHECK(crc32c::Value(prefix.data(), prefix.size()) == meta.crc32c());
  const DataFile parsed = ParseData(prefix);
  CHECK(parsed.clean);
  CHECK(static_cast<int64_t>(parsed.records.size()) == meta.record_count());
}

TraceConfig SmallConfig(const std::string& dir) {
  TraceConfig config;
  config.output_dir = dir;
  config.output_file_name = "trace";
  config.rank = 3;
  config.fsync = false;  // Most tests: speed; one test runs with fsync on.
  config.meta_interval_s = 0;
  config.run_id = "run-under-test";
  return config;
}

const std::vector<std::string> kKeys = {"scope/a", "scope/b"};

std::unique_ptr<TraceWriter> OpenOrDie(const TraceConfig& config, WriterTestHooks hooks = {}) {
  auto writer = TraceWriter::Open(config, kKeys, std::move(hooks));
  INFO(writer.status().ToString());
  REQUIRE(writer.ok());
  return std::move(*writer);
}

// ---- Naming ----

TEST_CASE("file names follow {train|test}.{name}.{rank}.{index}", "[writer][naming]") {
  TraceConfig config;
  config.output_dir = "/x/y";
  config.output_file_name = "trace";
  config.rank = 2;
  CHECK(DataFilePath(config, 1) == "/x/y/train.trace.2.1");
  CHECK(MetaPath(DataFilePath(config, 1)) == "/x/y/train.trace.2.1.meta");
  config.is_training = false;
  config.output_dir = "/x/y/";
  CHECK(DataFilePath(config, 12) == "/x/y/test.trace.2.12");

  CHECK(ParseFileIndex("train.trace.0", "train.trace.0.7") == 7);
  CHECK(ParseFileIndex("train.trace.0", "train.trace.0.7.meta") == 7);
  CHECK(ParseFileIndex("train.trace.0", "train.trace.0.9.meta.tmp") == 9);
  CHECK_FALSE(ParseFileIndex("train.trace.0", "train.trace.0.").has_value());
  CHECK_FALSE(ParseFileIndex("train.trace.0", "train.trace.0.x").has_value());
  CHECK_FALSE(ParseFileIndex("train.trace.0", "train.trace.0.1.5").has_value());
  CHECK_FALSE(ParseFileIndex("train.trace.0", "train.trace.01").has_value());
  CHECK_FALSE(ParseFileIndex("train.trace.0", "train.trace.1.4").has_value());
  CHECK_FALSE(ParseFileIndex("train.trace.0", "test.trace.0.4").has_value());
}

// ---- Basic content and Meta ----

TEST_CASE("writer writes the Header then every record, and a complete Meta", "[writer]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path() + "/nested/out");  // Created on Open.
  auto writer = OpenOrDie(config);
  const std::string path = DataFilePath(config, 1);

  // Meta exists as soon as the file is opened, describing just the Header.
  {
    const xdl::proto::Meta meta = ReadMeta(path);
    CHECK(meta.record_count() == 0);
    CHECK(meta.data_bytes() == static_cast<int64_t>(HeaderFrame(kKeys).size()));
    CHECK_FALSE(meta.closed_cleanly());
  }

  for (int64_t step = 5; step < 15; ++step) REQUIRE(writer->Submit(MakeRecord(step)).ok());
  REQUIRE(writer->Close().ok());

  const std::string bytes = ReadFile(path);
  const DataFile data = ParseData(bytes);
  REQUIRE(data.clean);
  CHECK(bytes.compare(0, HeaderFrame(kKeys).size(), HeaderFrame(kKeys)) == 0);
  REQUIRE(data.header.key_size() == 2);
  CHECK(data.header.key(0) == "scope/a");
  CHECK(data.header.key(1) == "scope/b");
  REQUIRE(data.records.size() == 10);
  for (int i = 0; i < 10; ++i) {
    CHECK(data.records[i].gstep() == 5 + i);
    CHECK(data.records[i].lstep() == (5 + i) * 10);
    CHECK(data.records[i].column(0).data() ==
          std::string(100, static_cast<char>('a' + (5 + i) % 26)));
  }

  const xdl::proto::Meta meta = ReadMeta(path);
  CHECK(meta.gstep_begin() == 5);
  CHECK(meta.gstep_end() == 14);
  CHECK(meta.lstep_begin() == 50);
  CHECK(meta.lstep_end() == 140);
  CHECK(meta.timestamp_begin() == 1'700'000'000'005);
  CHECK(meta.timestamp_end() == 1'700'000'000'014);
  CHECK(meta.rank() == 3);
  CHECK(meta.file_index() == 1);
  CHECK(meta.record_count() == 10);
  CHECK(meta.data_bytes() == static_cast<int64_t>(bytes.size()));
  CHECK(meta.crc32c() == crc32c::Value(bytes.data(), bytes.size()));
  CHECK(meta.run_id() == "run-under-test");
  CHECK(meta.format_version() == 1);
  CHECK(meta.dropped_records() == 0);
  CHECK(meta.closed_cleanly());

  const TraceStats stats = writer->stats();
  CHECK(stats.records_written == 10);
  CHECK(stats.bytes_written == static_cast<int64_t>(bytes.size()));
  CHECK(stats.records_dropped == 0);
  CHECK(stats.files_written == 1);
  CHECK(stats.pending_bytes == 0);
  CHECK(stats.queue_high_water_bytes > 0);
  CHECK(stats.last_error.ok());

  // Only the data file and its meta: no temp file left behind.
  CHECK(ListDir(config.output_dir) ==
        std::vector<std::string>{"train.trace.3.1", "train.trace.3.1.meta"});
}

TEST_CASE("writer generates a run id when none is configured", "[writer]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.run_id.clear();
  config.is_training = false;
  auto writer = OpenOrDie(config);
  REQUIRE(writer->Close().ok());
  const xdl::proto::Meta meta = ReadMeta(dir.path() + "/test.trace.3.1");
  CHECK(meta.run_id().size() == 32);
}

// Threads of this process named `name` (from /proc/self/task/*/comm).
int ThreadsNamed(const std::string& name) {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++count;
  }
  return count;
}

TEST_CASE("the IO thread is named while the writer is open", "[writer]") {
  TempDir dir;
  const int before = ThreadsNamed(kIoThreadName);
  auto writer = OpenOrDie(SmallConfig(dir.path()));
  CHECK(ThreadsNamed(kIoThreadName) == before + 1);
  REQUIRE(writer->Close().ok());
  CHECK(ThreadsNamed(kIoThreadName) == before);
}

// ---- Rollover ----

TEST_CASE("rollover: a file may end exactly at the limit; records are never split",
          "[writer][rollover]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  const size_t header = HeaderFrame(kKeys).size();
  // Steps 20..26 all encode to frames of the same size (varint widths agree).
  const size_t record = MakeRecord(20).frame.size();
  config.max_file_m_size = static_cast<double>(header + 3 * record) / 1e6;
  auto writer = OpenOrDie(config);
  for (int64_t step = 20; step < 27; ++step) {
    REQUIRE(MakeRecord(step).frame.size() == record);
    REQUIRE(writer->Submit(MakeRecord(step)).ok());
  }
  REQUIRE(writer->Close().ok());

  CHECK(writer->stats().files_written == 3);
  const std::vector<size_t> expected_records = {3, 3, 1};
  int64_t next_step = 20;
  for (int64_t index = 1; index <= 3; ++index) {
    const std::string path = DataFilePath(config, index);
    INFO(path);
    const std::string bytes = ReadFile(path);
    const DataFile data = ParseData(bytes);
    REQUIRE(data.clean);
    CHECK(data.header.key_size() == 2);  // Every file starts with the Header.
    REQUIRE(data.records.size() == expected_records[index - 1]);
    for (const auto& r : data.records) CHECK(r.gstep() == next_step++);
    CHECK(bytes.size() <= header + 3 * record);
    if (index < 3) CHECK(bytes.size() == header + 3 * record);  // Exactly at the limit.
    const xdl::proto::Meta meta = ReadMeta(path);
    CHECK(meta.file_index() == index);
    CHECK(meta.closed_cleanly());
    CheckMetaMatchesPrefix(path);
  }
  CHECK_FALSE(Exists(DataFilePath(config, 4)));
}

TEST_CASE("rollover: a record larger than the limit sits alone in its own file",
          "[writer][rollover]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.max_file_m_size = 0.001;  // 1000 bytes.
  auto writer = OpenOrDie(config);
  REQUIRE(writer->Submit(MakeRecord(0, 5000)).ok());  // Fresh file: goes in despite the size.
  REQUIRE(writer->Submit(MakeRecord(1, 100)).ok());
  REQUIRE(writer->Submit(MakeRecord(2, 5000)).ok());
  REQUIRE(writer->Submit(MakeRecord(3, 100)).ok());
  REQUIRE(writer->Submit(MakeRecord(4, 100)).ok());
  REQUIRE(writer->Close().ok());

  const std::vector<std::vector<int64_t>> expected = {{0}, {1}, {2}, {3, 4}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const std::string path = DataFilePath(config, static_cast<int64_t>(i + 1));
    INFO(path);
    const DataFile data = ParseData(ReadFile(path));
    REQUIRE(data.clean);
    REQUIRE(data.records.size() == expected[i].size());
    for (size_t j = 0; j < expected[i].size(); ++j) {
      CHECK(data.records[j].gstep() == expected[i][j]);
    }
    CheckMetaMatchesPrefix(path);
  }
  CHECK_FALSE(Exists(DataFilePath(config, 5)));
}

TEST_CASE("rollover with fsync on keeps every file and Meta consistent", "[writer][rollover]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.fsync = true;
  config.max_file_m_size = 0.002;
  auto writer = OpenOrDie(config);
  for (int64_t step = 0; step < 40; ++step) {
    REQUIRE(writer->Submit(MakeRecord(step, 200)).ok());
    if (step % 10 == 0) REQUIRE(writer->Flush().ok());
  }
  REQUIRE(writer->Close().ok());
  const int64_t files = writer->stats().files_written;
  CHECK(files > 3);
  int64_t total = 0;
  for (int64_t index = 1; index <= files; ++index) {
    const std::string path = DataFilePath(config, index);
    CheckMetaMatchesPrefix(path);
    CHECK(ReadMeta(path).closed_cleanly());
    CHECK(ReadMeta(path).data_bytes() == static_cast<int64_t>(ReadFile(path).size()));
    total += ReadMeta(path).record_count();
  }
  CHECK(total == 40);
}

// ---- Never overwrite ----

TEST_CASE("a second run continues after the highest index and leaves earlier files untouched",
          "[writer][naming]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.max_file_m_size = 0.001;
  {
    auto first = OpenOrDie(config);
    for (int64_t step = 0; step < 20; ++step) REQUIRE(first->Submit(MakeRecord(step, 300)).ok());
    REQUIRE(first->Close().ok());
  }
  // Files of other names/ranks/prefixes and junk must not influence the index.
  for (const char* other : {"train.trace.4.99", "test.trace.3.50", "train.other.3.70",
                            "train.trace.3.x", "train.trace.3.2.5"}) {
    std::ofstream(dir.path() + "/" + other) << "junk";
  }
  std::map<std::string, std::string> before;
  for (const std::string& name : ListDir(dir.path())) {
    before[name] = ReadFile(dir.path() + "/" + name);
  }
  int64_t first_run_files = 0;
  while (Exists(DataFilePath(config, first_run_files + 1))) ++first_run_files;
  REQUIRE(first_run_files >= 5);

  config.run_id = "second-run";
  auto second = OpenOrDie(config);
  REQUIRE(second->Submit(MakeRecord(100, 300)).ok());
  REQUIRE(second->Close().ok());

  for (const auto& [name, bytes] : before) {
    INFO(name);
    CHECK(ReadFile(dir.path() + "/" + name) == bytes);  // Byte for byte.
  }
  const std::string path = DataFilePath(config, first_run_files + 1);
  const DataFile data = ReadData(path);
  REQUIRE(data.records.size() == 1);
  CHECK(data.records[0].gstep() == 100);
  CHECK(ReadMeta(path).run_id() == "second-run");
  CHECK(ReadMeta(path).file_index() == first_run_files + 1);
}

TEST_CASE("a leftover meta without its data file still reserves its index", "[writer][naming]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  std::ofstream(dir.path() + "/train.trace.3.6.meta") << "";
  auto writer = OpenOrDie(config);
  REQUIRE(writer->Close().ok());
  CHECK(Exists(DataFilePath(config, 7)));
  CHECK_FALSE(Exists(DataFilePath(config, 1)));
}

// ---- Meta replacement ----

TEST_CASE("Meta is replaced atomically: a concurrent reader always sees a valid prefix",
          "[writer][meta]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  auto writer = OpenOrDie(config);
  const std::string path = DataFilePath(config, 1);

  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, bad_parses{0}, bad_prefixes{0};
  std::thread reader([&] {  // No Catch2 assertion on this thread: it only counts.
    while (!stop.load()) {
      xdl::proto::Meta meta;
      // Read the meta first: the data file only grows, so the prefix must be there.
      std::string meta_bytes, data;
      if (!TryReadFile(MetaPath(path), &meta_bytes) || !TryReadFile(path, &data) ||
          !meta.ParseFromString(meta_bytes) || meta.data_bytes() == 0) {
        ++bad_parses;
        continue;
      }
      const bool ok =
          meta.data_bytes() <= static_cast<int64_t>(data.size()) &&
          crc32c::Value(data.data(), static_cast<size_t>(meta.data_bytes())) == meta.crc32c();
      if (!ok) ++bad_prefixes;
      ++reads;
    }
  });
  for (int64_t step = 0; step < 300; ++step) {
    REQUIRE(writer->Submit(MakeRecord(step, 500)).ok());
    if (step % 3 == 0) REQUIRE(writer->Flush().ok());
  }
  REQUIRE(writer->Close().ok());
  REQUIRE(Eventually([&] { return reads.load() > 10; }));
  stop = true;
  reader.join();
  CHECK(bad_parses.load() == 0);
  CHECK(bad_prefixes.load() == 0);
  CHECK(ListDir(dir.path()) == std::vector<std::string>{"train.trace.3.1", "train.trace.3.1.meta"});
  CheckMetaMatchesPrefix(path);
}

TEST_CASE("Flush makes every earlier record visible in the data file and Meta", "[writer][meta]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  auto writer = OpenOrDie(config);
  const std::string path = DataFilePath(config, 1);
  for (int round = 1; round <= 5; ++round) {
    for (int i = 0; i < 7; ++i) REQUIRE(writer->Submit(MakeRecord(round * 100 + i)).ok());
    REQUIRE(writer->Flush().ok());
    const DataFile data = ReadData(path);
    REQUIRE(data.clean);
    CHECK(data.records.size() == static_cast<size_t>(round * 7));
    CHECK(data.records.back().gstep() == round * 100 + 6);
    const xdl::proto::Meta meta = ReadMeta(path);
    CHECK(meta.record_count() == round * 7);
    CHECK_FALSE(meta.closed_cleanly());
    CheckMetaMatchesPrefix(path);
  }
  REQUIRE(writer->Close().ok());
}

TEST_CASE("Meta is refreshed every meta_interval_s without a flush", "[writer][meta]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.meta_interval_s = 0.02;
  auto writer = OpenOrDie(config);
  const std::string path = DataFilePath(config, 1);
  for (int64_t step = 0; step < 25; ++step) REQUIRE(writer->Submit(MakeRecord(step)).ok());
  // No Flush: the IO thread's timed wait refreshes Meta on its own.
  CHECK(Eventually([&] { return ReadMeta(path).record_count() == 25; }));
  CheckMetaMatchesPrefix(path);
  CHECK_FALSE(ReadMeta(path).closed_cleanly());
  REQUIRE(writer->Close().ok());
  CHECK(ReadMeta(path).closed_cleanly());
}

// ---- Overflow policies ----

TEST_CASE("kBlock with a slow sink loses nothing and keeps the queue bound", "[writer][queue]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.overflow = OverflowPolicy::kBlock;
  config.max_pending_mb = 0.01;  // 10 kB: about 8 records.
  WriterTestHooks hooks;
  hooks.before_record_write = [] { std::this_thread::sleep_for(std::chrono::microseconds(300)); };
  auto writer = OpenOrDie(config, hooks);
  constexpr int64_t kRecords = 300;
  for (int64_t step = 0; step < kRecords; ++step) {
    REQUIRE(writer->Submit(MakeRecord(step, 1200)).ok());
  }
  REQUIRE(writer->Close().ok());
  const TraceStats stats = writer->stats();
  CHECK(stats.records_written == kRecords);
  CHECK(stats.records_dropped == 0);
  CHECK(stats.queue_high_water_bytes <= 10000);
  CHECK(stats.queue_high_water_bytes > 5000);  // The producer did fill the queue.
  const DataFile data = ReadData(DataFilePath(config, 1));
  REQUIRE(data.records.size() == kRecords);
  for (int64_t i = 0; i < kRecords; ++i) CHECK(data.records[i].gstep() == i);
  CHECK(ReadMeta(DataFilePath(config, 1)).dropped_records() == 0);
}

TEST_CASE("kDrop with a stalled sink drops what does not fit, counts it, and Meta reports it",
          "[writer][queue]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.overflow = OverflowPolicy::kDrop;
  // Steps 20..119 all encode to frames of the same size.
  const size_t record = MakeRecord(20, 1000).frame.size();
  config.max_pending_mb = static_cast<double>(10 * record) / 1e6;  // Exactly 10 records.
  Gate gate;
  WriterTestHooks hooks;
  hooks.before_record_write = [&gate] { gate.Wait(); };
  auto writer = OpenOrDie(config, hooks);
  constexpr int64_t kRecords = 100;
  for (int64_t step = 20; step < 20 + kRecords; ++step) {
    REQUIRE(MakeRecord(step, 1000).frame.size() == record);
    // Never blocks.
    const absl::StatusOr<SubmitResult> queued = writer->Submit(MakeRecord(step, 1000));
    REQUIRE(queued.ok());
    CHECK(*queued == (step < 30 ? SubmitResult::kQueued : SubmitResult::kDropped));
  }
  // The sink held every byte: exactly 10 records fit, the rest were dropped.
  CHECK(writer->stats().records_dropped == kRecords - 10);
  CHECK(writer->stats().pending_bytes == static_cast<int64_t>(10 * record));
  gate.Open();
  REQUIRE(writer->Close().ok());

  const TraceStats stats = writer->stats();
  CHECK(stats.records_written == 10);
  CHECK(stats.records_dropped == kRecords - 10);
  const std::string path = DataFilePath(config, 1);
  const DataFile data = ReadData(path);
  REQUIRE(data.records.size() == 10);
  for (int64_t i = 0; i < 10; ++i) CHECK(data.records[i].gstep() == 20 + i);
  const xdl::proto::Meta meta = ReadMeta(path);
  CHECK(meta.dropped_records() == kRecords - 10);
  CHECK(meta.record_count() == 10);
  CheckMetaMatchesPrefix(path);
}

TEST_CASE("kBlock admits a record larger than the whole queue bound", "[writer][queue]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.max_pending_mb = 0.001;  // 1000 bytes.
  auto writer = OpenOrDie(config);
  for (int64_t step = 0; step < 5; ++step) REQUIRE(writer->Submit(MakeRecord(step, 8000)).ok());
  REQUIRE(writer->Close().ok());
  CHECK(writer->stats().records_written == 5);
  CHECK(ReadData(DataFilePath(config, 1)).records.size() == 5);
}

// ---- Errors ----

TEST_CASE("Submit rejects malformed frames with InvalidArgument", "[writer][errors]") {
  TempDir dir;
  auto writer = OpenOrDie(SmallConfig(dir.path()));
  EncodedRecord short_frame;
  short_frame.frame = "ab";
  CHECK(writer->Submit(std::move(short_frame)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  EncodedRecord bad_prefix = MakeRecord(1);
  bad_prefix.frame[0] = static_cast<char>(bad_prefix.frame[0] + 1);
  const absl::Status s = writer->Submit(std::move(bad_prefix)).status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("length prefix"));
  REQUIRE(writer->Close().ok());
  CHECK(writer->stats().records_written == 0);
}

TEST_CASE("Open fails with an error naming the path when output_dir cannot be created",
          "[writer][errors]") {
  TempDir dir;
  std::ofstream(dir.path() + "/file") << "x";
  TraceConfig config = SmallConfig(dir.path() + "/file/sub");
  auto writer = TraceWriter::Open(config, kKeys);
  REQUIRE_FALSE(writer.ok());
  CHECK_THAT(std::string(writer.status().message()), Catch::Contains(dir.path() + "/file"));
}

TEST_CASE("EFBIG (RLIMIT_FSIZE) becomes a sticky error; nothing hangs", "[writer][errors]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.max_pending_mb = 0.005;  // Small: the producer is blocked when the error hits.
  config.overflow = OverflowPolicy::kBlock;
  absl::Status submit_error;
  int64_t submitted = 0;
  std::unique_ptr<TraceWriter> writer;
  {
    FileSizeLimit limit(20000);
    writer = OpenOrDie(config);
    for (int64_t step = 0; step < 200; ++step) {
      absl::Status s = writer->Submit(MakeRecord(step, 1000)).status();
      ++submitted;
      if (!s.ok()) {
        submit_error = s;
        break;
      }
    }
    // Either Submit already saw the error or Flush does.
    const absl::Status flush = writer->Flush();
    REQUIRE_FALSE(flush.ok());
    // Later submits never block and are counted as dropped.
    for (int i = 0; i < 50; ++i) {
      CHECK_FALSE(writer->Submit(MakeRecord(1000 + i, 1000)).ok());
      ++submitted;
    }
    const absl::Status close = writer->Close();
    CHECK(close == flush);
    CHECK(writer->Close() == flush);  // Idempotent.
  }
  const std::string path = DataFilePath(config, 1);
  const TraceStats stats = writer->stats();
  INFO(stats.last_error.ToString());
  CHECK(stats.last_error.code() == absl::StatusCode::kOutOfRange);  // EFBIG.
  CHECK_THAT(std::string(stats.last_error.message()), Catch::Contains(path));
  CHECK_THAT(std::string(stats.last_error.message()), Catch::Contains("write"));
  if (!submit_error.ok()) CHECK(submit_error == stats.last_error);
  CHECK(stats.records_written + stats.records_dropped == submitted);
  CHECK(stats.records_dropped >= 50);
  CHECK(stats.pending_bytes == 0);
  // The last Meta written still describes a prefix that checks out.
  CheckMetaMatchesPrefix(path);
  CHECK_FALSE(ReadMeta(path).closed_cleanly());
  CHECK(ReadData(path).records.size() >= static_cast<size_t>(ReadMeta(path).record_count()));
  // Closed after the failure: the Meta still says how many records were lost (issue 34).
  CHECK(ReadMeta(path).dropped_records() == stats.records_dropped);
}

TEST_CASE("a removed output directory surfaces at Flush naming the file; Close never hangs",
          "[writer][errors]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path() + "/out");
  auto writer = OpenOrDie(config);
  REQUIRE(writer->Submit(MakeRecord(1)).ok());
  REQUIRE(writer->Flush().ok());
  std::filesystem::remove_all(config.output_dir);
  REQUIRE_FALSE(Exists(config.output_dir));

  for (int64_t step = 2; step < 10; ++step) (void)writer->Submit(MakeRecord(step));
  const absl::Status flush = writer->Flush();
  REQUIRE_FALSE(flush.ok());
  CHECK(flush.code() == absl::StatusCode::kNotFound);  // ENOENT.
  CHECK_THAT(std::string(flush.message()), Catch::Contains("train.trace.3.1.meta.tmp"));
  CHECK_THAT(std::string(flush.message()), Catch::Contains("open"));

  const int64_t dropped_before = writer->stats().records_dropped;
  CHECK(writer->Submit(MakeRecord(20)).status() == flush);  // Sticky, immediate.
  CHECK(writer->stats().records_dropped == dropped_before + 1);
  CHECK(writer->Flush() == flush);
  CHECK(writer->Close() == flush);
  CHECK(writer->Close() == flush);
  CHECK(writer->stats().last_error == flush);
}

// ---- Lifecycle ----

TEST_CASE("Close is idempotent, Submit after Close fails, the destructor closes",
          "[writer][lifecycle]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  {
    auto writer = OpenOrDie(config);
    REQUIRE(writer->Submit(MakeRecord(1)).ok());
    CHECK(writer->Close().ok());
    CHECK(writer->Close().ok());
    CHECK(writer->Flush().ok());
    CHECK(writer->Submit(MakeRecord(2)).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  {
    auto writer = OpenOrDie(config);  // Index 2; destroyed without Close.
    REQUIRE(writer->Submit(MakeRecord(3)).ok());
  }
  const std::string second = DataFilePath(config, 2);
  CHECK(ReadMeta(second).closed_cleanly());
  CHECK(ReadMeta(second).record_count() == 1);
  CheckMetaMatchesPrefix(second);
}

TEST_CASE("stats can be read from another thread while writing", "[writer][lifecycle]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.max_file_m_size = 0.05;
  auto writer = OpenOrDie(config);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> max_seen{0};
  std::thread poller([&] {
    while (!stop.load()) {
      const TraceStats s = writer->stats();
      if (s.records_written > max_seen.load()) max_seen = s.records_written;
    }
  });
  for (int64_t step = 0; step < 2000; ++step) REQUIRE(writer->Submit(MakeRecord(step, 256)).ok());
  REQUIRE(writer->Close().ok());
  stop = true;
  poller.join();
  CHECK(writer->stats().records_written == 2000);
  CHECK(max_seen.load() <= 2000);
  CHECK(writer->stats().files_written > 5);
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace

namespace xdl_trace {
namespace internal {
namespace {

// ---- Hostile configuration and file names (issue 9) ----

namespace hostile {

bool IsSymlink(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

absl::Status OpenStatus(const TraceConfig& config) {
  return TraceWriter::Open(config, kKeys).status();
}

}  // namespace hostile

TEST_CASE("impossible names are refused at Open naming the key, before any file exists",
          "[writer][config]") {
  TempDir dir;
  const std::string out = dir.path() + "/out";
  struct Case {
    const char* what;
    std::function<void(TraceConfig*)> change;
    const char* key;
  };
  const std::vector<Case> cases = {
      {"NUL in output_file_name",
       [](TraceConfig* c) { c->output_file_name = std::string("a\0b", 3); }, "'output_file_name'"},
      {"NUL in output_dir", [&](TraceConfig* c) { c->output_dir = out + std::string("\0x", 2); },
       "'output_dir'"},
      {"empty output_file_name", [](TraceConfig* c) { c->output_file_name = ""; },
       "'output_file_name'"},
      {"'/' in output_file_name", [](TraceConfig* c) { c->output_file_name = "a/b"; },
       "'output_file_name'"},
      {"output_file_name '.'", [](TraceConfig* c) { c->output_file_name = "."; },
       "'output_file_name'"},
      {"output_file_name '..'", [](TraceConfig* c) { c->output_file_name = ".."; },
       "'output_file_name'"},
      {"output_file_name past NAME_MAX",
       [](TraceConfig* c) { c->output_file_name = std::string(kMaxOutputFileNameBytes + 1, 'n'); },
       "'output_file_name'"},
      {"output_dir past PATH_MAX",
       [&](TraceConfig* c) { c->output_dir = out + "/" + std::string(PATH_MAX, 'd'); },
       "'output_dir'"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    TraceConfig config = SmallConfig(out);
    c.change(&config);
    const absl::Status status = hostile::OpenStatus(config);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(status.message()), Catch::Contains(c.key));
    CHECK(ListDir(dir.path()).empty());  // Not even output_dir was created.
  }
  // The longest accepted name works: its Meta temp file fits NAME_MAX.
  TraceConfig longest = SmallConfig(out);
  longest.output_file_name = std::string(kMaxOutputFileNameBytes, 'n');
  longest.rank = std::numeric_limits<int32_t>::max();
  auto writer = OpenOrDie(longest);
  REQUIRE(writer->Submit(MakeRecord(1)).ok());
  REQUIRE(writer->Close().ok());
  CHECK(ReadMeta(DataFilePath(longest, 1)).record_count() == 1);
}

TEST_CASE("non-finite sizes and intervals are refused naming the key", "[writer][config]") {
  TempDir dir;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double bad : {inf, -inf, nan}) {
    for (const char* key : {"max_file_m_size", "max_pending_mb", "meta_interval_s"}) {
      INFO(key << " = " << bad);
      TraceConfig config = SmallConfig(dir.path() + "/out");
      if (std::string(key) == "max_file_m_size") config.max_file_m_size = bad;
      if (std::string(key) == "max_pending_mb") config.max_pending_mb = bad;
      if (std::string(key) == "meta_interval_s") config.meta_interval_s = bad;
      const absl::Status status = config.Validate();
      CHECK(status.code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(status.message()), Catch::Contains(absl::StrCat("'", key, "'")));
    }
  }
}

TEST_CASE("huge finite sizes saturate: no rollover at every record, no lost bound",
          "[writer][config][rollover]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  config.max_file_m_size = 1e13;  // 10^19 bytes: past INT64_MAX.
  config.max_pending_mb = 1e300;
  auto writer = OpenOrDie(config);
  for (int64_t step = 0; step < 20; ++step) REQUIRE(writer->Submit(MakeRecord(step)).ok());
  REQUIRE(writer->Close().ok());
  CHECK(writer->stats().files_written == 1);
  CHECK(ReadMeta(DataFilePath(config, 1)).record_count() == 20);
  CHECK(MegabytesToBytes(1e13) == std::numeric_limits<int64_t>::max());
  CHECK(MegabytesToBytes(1e300) == std::numeric_limits<int64_t>::max());
  CHECK(MegabytesToBytes(0.0015) == 1500);
  CHECK(MegabytesToBytes(-1) == 0);
}

TEST_CASE("every file-system failure of the writer is marked as an I/O error", "[writer][errors]") {
  SECTION("EFBIG") {
    TempDir dir;
    const TraceConfig config = SmallConfig(dir.path());
    absl::Status status;
    {
      FileSizeLimit limit(2000);
      auto writer = OpenOrDie(config);
      for (int64_t step = 0; step < 10; ++step) (void)writer->Submit(MakeRecord(step, 1000));
      status = writer->Close();
    }
    CHECK(status.code() == absl::StatusCode::kOutOfRange);  // errno's code is kept...
    CHECK(IsIoError(status));                               // ...and marked as I/O.
    CHECK_THAT(std::string(status.message()), Catch::Contains(DataFilePath(config, 1)));
    CHECK_THAT(std::string(status.message()), Catch::Contains("File too large"));
  }
  SECTION("a removed output directory") {
    TempDir dir;
    const TraceConfig config = SmallConfig(dir.path() + "/out");
    auto writer = OpenOrDie(config);
    std::filesystem::remove_all(config.output_dir);
    (void)writer->Submit(MakeRecord(1));
    const absl::Status status = writer->Close();
    CHECK(status.code() == absl::StatusCode::kNotFound);
    CHECK(IsIoError(status));
    CHECK_THAT(std::string(status.message()), Catch::Contains(DataFilePath(config, 1)));
  }
  SECTION("output_dir below a regular file") {
    TempDir dir;
    std::ofstream(dir.path() + "/file") << "x";
    const absl::Status status = hostile::OpenStatus(SmallConfig(dir.path() + "/file/sub"));
    CHECK(IsIoError(status));
  }
  SECTION("but not a bad config value") {
    TraceConfig config = SmallConfig("/tmp/unused");
    config.rank = -1;
    CHECK_FALSE(IsIoError(hostile::OpenStatus(config)));
  }
}

TEST_CASE(
    "Meta temp names are unique, readers skip them, leftovers reserve their index and are removed",
    "[writer][naming]") {
  const std::string data = "/d/train.trace.3.7";
  CHECK(MetaTempPath(data, 5) == absl::StrCat(data, ".meta.tmp-", getpid(), "-5"));
  CHECK(MetaTempPath(data, 5) != MetaTempPath(data, 6));
  CHECK(ParseFileIndex("train.trace.3", "train.trace.3.7.meta.tmp-123-4") == 7);
  CHECK(ParseFileIndex("train.trace.3", "train.trace.3.7.meta.tmp") == 7);
  CHECK_FALSE(ParseFileIndex("train.trace.3", "train.trace.3.7.metax").has_value());
  CHECK_FALSE(ParseFileIndex("train.trace.3", "train.trace.3.7.meta.tmpx").has_value());
  // Not a data file for the C++ (and so the Python) reader.
  TraceFileInfo info;
  CHECK_FALSE(ParseTraceFileName("train.trace.3.7.meta.tmp-123-4", &info));

  TempDir dir;
  const TraceConfig config = SmallConfig(dir.path());
  std::ofstream(dir.path() + "/train.trace.3.4.meta.tmp-99999-0") << "leftover of a crash";
  std::ofstream(dir.path() + "/train.trace.3.2.meta.tmp") << "leftover of an older version";
  std::ofstream(dir.path() + "/train.trace.4.4.meta.tmp-99999-0") << "another rank's";
  std::ofstream(dir.path() + "/train.trace.3.4.meta.tmpx") << "not a temp name";
  auto writer = OpenOrDie(config);
  REQUIRE(writer->Close().ok());
  CHECK(Exists(DataFilePath(config, 5)));
  // The writer holds rank 3's lock: its leftover temps are stale and removed.
  CHECK_FALSE(Exists(dir.path() + "/train.trace.3.4.meta.tmp-99999-0"));
  CHECK_FALSE(Exists(dir.path() + "/train.trace.3.2.meta.tmp"));
  CHECK(Exists(dir.path() + "/train.trace.4.4.meta.tmp-99999-0"));
  CHECK(Exists(dir.path() + "/train.trace.3.4.meta.tmpx"));
}

TEST_CASE("a link planted at any name the writer uses is never followed", "[writer][security]") {
  TempDir dir;
  TempDir outside_dir("outside");
  const std::string outside = outside_dir.path() + "/precious";
  const std::string precious = "not for the writer";
  test::WriteFile(outside, precious);
  TraceConfig config = SmallConfig(dir.path());
  const int64_t record = static_cast<int64_t>(MakeRecord(1).frame.size());
  const int64_t header = static_cast<int64_t>(HeaderFrame(kKeys).size());
  config.max_file_m_size = static_cast<double>(header + record) / 1e6;  // A file per record.
  auto writer = OpenOrDie(config);
  REQUIRE(writer->Submit(MakeRecord(1)).ok());
  REQUIRE(writer->Flush().ok());
  // Record 2 goes to file 2: plant links at its names after the writer listed the directory.
  const std::string next = DataFilePath(config, 2);

  SECTION("the next data file: an error naming it") {
    REQUIRE(symlink(outside.c_str(), next.c_str()) == 0);
    REQUIRE(writer->Submit(MakeRecord(2)).ok());
    const absl::Status status = writer->Flush();
    CHECK(status.code() == absl::StatusCode::kPermissionDenied);
    CHECK(IsIoError(status));
    CHECK_THAT(std::string(status.message()), Catch::Contains(next + "' is a symbolic link"));
    CHECK(hostile::IsSymlink(next));
  }
  SECTION("its Meta: an error naming it") {
    REQUIRE(symlink(outside.c_str(), MetaPath(next).c_str()) == 0);
    REQUIRE(writer->Submit(MakeRecord(2)).ok());
    const absl::Status status = writer->Flush();
    CHECK(IsIoError(status));
    CHECK_THAT(std::string(status.message()),
               Catch::Contains(MetaPath(next) + "' is a symbolic link"));
    CHECK(hostile::IsSymlink(MetaPath(next)));
  }
  SECTION("its Meta temp names: other names are used, the links are left alone") {
    std::vector<std::string> planted;
    for (uint64_t serial = PeekMetaTempSerial(); planted.size() < 20; ++serial) {
      planted.push_back(MetaTempPath(next, serial));
      REQUIRE(symlink(outside.c_str(), planted.back().c_str()) == 0);
    }
    REQUIRE(writer->Submit(MakeRecord(2)).ok());
    REQUIRE(writer->Flush().ok());
    CHECK(ReadMeta(next).record_count() == 1);
    for (const std::string& link : planted) CHECK(hostile::IsSymlink(link));
  }
  SECTION("a link to a directory at the next data file's Meta temp name is never entered") {
    const std::string link = MetaTempPath(next, PeekMetaTempSerial());
    REQUIRE(symlink(outside_dir.path().c_str(), link.c_str()) == 0);
    REQUIRE(writer->Submit(MakeRecord(2)).ok());
    REQUIRE(writer->Flush().ok());
    CHECK(ListDir(outside_dir.path()) == std::vector<std::string>{"precious"});
  }
  (void)writer->Close();
  CHECK(ReadFile(outside) == precious);
  CHECK(ListDir(outside_dir.path()) == std::vector<std::string>{"precious"});
}

TEST_CASE("output_dir may itself be a symbolic link to a directory", "[writer][security]") {
  TempDir dir;
  REQUIRE(mkdir((dir.path() + "/real").c_str(), 0755) == 0);
  REQUIRE(symlink((dir.path() + "/real").c_str(), (dir.path() + "/link").c_str()) == 0);
  const TraceConfig config = SmallConfig(dir.path() + "/link");
  auto writer = OpenOrDie(config);
  REQUIRE(writer->Submit(MakeRecord(1)).ok());
  REQUIRE(writer->Close().ok());
  CHECK(ReadData(dir.path() + "/real/train.trace.3.1").records.size() == 1);
  CHECK(ReadMeta(dir.path() + "/real/train.trace.3.1").closed_cleanly());
}

// ---- Write-through (write mode "inline") ----

// `record`'s frame split into pieces: owned runs of its own frame string
// around external runs that point into `*external` (a copy of those bytes the
// test keeps, so equal bytes prove the pieces were read, not the original).
EncodedRecord InPieces(EncodedRecord record, const std::vector<std::pair<size_t, size_t>>& cuts,
                       std::string* external) {
  const std::string whole = std::move(record.frame);
  *external = whole;
  record.frame.clear();
  size_t at = 0;
  for (const auto& [begin, size] : cuts) {
    record.pieces.push_back({nullptr, record.frame.size(), begin - at});
    record.frame.append(whole, at, begin - at);
    record.pieces.push_back({external->data() + begin, 0, size});
    record.external_bytes += size;
    at = begin + size;
  }
  if (at < whole.size()) {
    record.pieces.push_back({nullptr, record.frame.size(), whole.size() - at});
    record.frame.append(whole, at, whole.size() - at);
  }
  return record;
}

TEST_CASE("WriteThrough writes a record in pieces byte for byte and returns once written",
          "[writer][inline]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  auto writer = OpenOrDie(config);
  std::string expected = HeaderFrame(kKeys);
  int64_t records = 0;
  for (int64_t step = 1; step <= 20; ++step) {
    EncodedRecord record = MakeRecord(step, 5000 + static_cast<size_t>(step));
    expected += record.frame;
    const size_t n = record.frame.size();
    std::string external;
    // Pieces in the middle, and one that ends the frame.
    EncodedRecord pieces = step % 2 == 0
                               ? InPieces(std::move(record), {{10, 100}, {200, n - 300}}, &external)
                               : InPieces(std::move(record), {{20, n - 20}}, &external);
    REQUIRE(writer->WriteThrough(std::move(pieces)).ok());
    ++records;
    // Written (with everything queued before it) by the time it returns: the
    // external bytes may change now.
    CHECK(writer->stats().records_written == records);
    std::fill(external.begin(), external.end(), 'X');
    if (step % 5 == 0) {  // Mixed with contiguous records.
      EncodedRecord contiguous = MakeRecord(100 + step);
      expected += contiguous.frame;
      REQUIRE(writer->Submit(std::move(contiguous)).ok());
      ++records;
    }
  }
  REQUIRE(writer->Close().ok());
  const std::string path = DataFilePath(config, 1);
  const std::string bytes = ReadFile(path);
  CHECK(bytes.size() == expected.size());
  CHECK(bytes == expected);
  CheckMetaMatchesPrefix(path);
  CHECK(ReadMeta(path).record_count() == 24);
  CHECK(writer->stats().pending_bytes == 0);
}

TEST_CASE("WriteThrough rejects pieces that do not add up to the frame", "[writer][inline]") {
  TempDir dir;
  auto writer = OpenOrDie(SmallConfig(dir.path()));
  std::string external;
  EncodedRecord good = InPieces(MakeRecord(1, 500), {{10, 400}}, &external);
  {
    EncodedRecord outside = good;
    outside.pieces.back().offset = outside.frame.size();
    const absl::Status s = writer->WriteThrough(std::move(outside));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("outside"));
  }
  {
    EncodedRecord miscounted = good;
    miscounted.external_bytes -= 1;  // The prefix no longer matches either.
    CHECK(writer->WriteThrough(std::move(miscounted)).code() == absl::StatusCode::kInvalidArgument);
  }
  {
    EncodedRecord dropped_piece = good;
    dropped_piece.pieces.erase(dropped_piece.pieces.begin() + 1);
    const absl::Status s = writer->WriteThrough(std::move(dropped_piece));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("add up"));
  }
  REQUIRE(writer->WriteThrough(std::move(good)).ok());
  REQUIRE(writer->Close().ok());
  CHECK(writer->stats().records_written == 1);
}

TEST_CASE("WriteThrough after a write error returns it at once and never hangs",
          "[writer][inline][errors]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  std::unique_ptr<TraceWriter> writer;
  absl::Status first_error;
  int64_t written_through = 0;
  {
    FileSizeLimit limit(20000);
    writer = OpenOrDie(config);
    for (int64_t step = 1; step <= 40; ++step) {
      std::string external;
      const absl::Status s =
          writer->WriteThrough(InPieces(MakeRecord(step, 3000), {{50, 2900}}, &external));
      std::fill(external.begin(), external.end(), 'X');  // Nothing refers to it any more.
      ++written_through;
      if (!s.ok() && first_error.ok()) first_error = s;
    }
    REQUIRE_FALSE(first_error.ok());
    CHECK(first_error.code() == absl::StatusCode::kOutOfRange);  // EFBIG.
    CHECK(writer->Close() == first_error);
  }
  const TraceStats stats = writer->stats();
  CHECK(stats.records_written + stats.records_dropped == written_through);
  CHECK(stats.records_written < written_through);
  CHECK(stats.pending_bytes == 0);
  CheckMetaMatchesPrefix(DataFilePath(config, 1));
}

TEST_CASE("a write-through queued behind a failing write is answered and never read",
          "[writer][inline][errors]") {
  TempDir dir;
  TraceConfig config = SmallConfig(dir.path());
  Gate gate;
  WriterTestHooks hooks;
  hooks.before_record_write = [&gate] { gate.Wait(); };  // Holds the first record's write.
  std::unique_ptr<TraceWriter> writer;
  absl::Status through;
  {
    FileSizeLimit limit(5000);  // The first 8 KB record fails with EFBIG.
    writer = OpenOrDie(config, hooks);
    REQUIRE(writer->Submit(MakeRecord(1, 8000)).ok());
    REQUIRE(Eventually([&] { return gate.waiting() == 1; }));
    // Queued behind the stalled record; its external bytes live on the heap
    // so ASan reports any read after they are freed.
    auto external = std::make_unique<std::string>();
    // Built here: Catch assertions (MakeRecord's) are not for other threads.
    EncodedRecord pieces = InPieces(MakeRecord(2, 3000), {{40, 2900}}, external.get());
    std::atomic<bool> returned{false};
    std::thread stepper([&] {
      through = writer->WriteThrough(std::move(pieces));
      returned = true;
    });
    REQUIRE(Eventually([&] { return writer->stats().pending_bytes > 8000; }));
    CHECK_FALSE(returned.load());  // Waits for its own write.
    gate.Open();
    stepper.join();
    external.reset();  // What Step does once WriteThrough returned.
    CHECK(through.code() == absl::StatusCode::kOutOfRange);  // The first record's EFBIG.
    CHECK(writer->Close() == through);
  }
  const TraceStats stats = writer->stats();
  CHECK(stats.records_written == 0);
  CHECK(stats.records_dropped == 2);
  CHECK(stats.pending_bytes == 0);
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
