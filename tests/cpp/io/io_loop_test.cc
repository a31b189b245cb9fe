// Tests of IoLoop driven through its queue (no TraceWriter): ordering, slow sinks, rollover,
// errors.
#include "io/io_loop.h"

#include <time.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32c.h"
#include "io/file_set.h"
#include "io/limits.h"
#include "io/output_dir.h"
#include "test_util.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;
using test::Eventually;
using test::Gate;
using test::ReadFile;
using test::TempDir;

const std::vector<std::string> kKeys = {"k"};

// A record of one float32 column of 250 values (the same frame size for steps 1..127).
EncodedRecord MakeRecord(int64_t gstep) {
  const std::vector<float> values(250, static_cast<float>(gstep));
  const std::vector<TensorView> columns = {TensorView{DType::kFloat32, {250}, values.data()}};
  EncodedRecord r;
  r.gstep = gstep;
  r.lstep = gstep;
  r.timestamp_ms = 1000 + gstep;
  r.frame = test::ProtobufFrame(gstep, gstep, 1000 + gstep, columns);
  return r;
}

TraceConfig LoopConfig(const std::string& dir) {
  TraceConfig config;
  config.output_dir = dir;
  config.output_file_name = "loop";
  config.rank = 0;
  config.fsync = false;
  config.meta_interval_s = 0;
  config.run_id = "loop-run";
  return config;
}

xdl::proto::Meta ReadMeta(const std::string& data_path) {
  xdl::proto::Meta meta;
  REQUIRE(meta.ParseFromString(ReadFile(MetaPath(data_path))));
  return meta;
}

OutputDir OpenDirOrDie(const TraceConfig& config) {
  absl::StatusOr<OutputDir> dir = OutputDir::Open(config);
  INFO(dir.status().ToString());
  REQUIRE(dir.ok());
  return std::move(*dir);
}

// The loop with its output directory, queue and pool, as TraceWriter wires them, and a thread for
// Run().
class LoopUnderTest {
 public:
  explicit LoopUnderTest(const TraceConfig& config, std::function<void()> sink_hook = nullptr)
      : dir_(OpenDirOrDie(config)),
        queue_(std::llround(config.max_pending_mb * 1e6)),
        pool_(4, std::llround(config.max_pending_mb * 1e6)),
        loop_(IoLoopOptionsFromConfig(config, kKeys, {}), &queue_, &pool_, std::move(sink_hook)) {
    const absl::Status started = loop_.Start(dir_);
    INFO(started.ToString());
    REQUIRE(started.ok());
  }
  ~LoopUnderTest() {
    if (thread_.joinable()) (void)Close();
  }

  void Run() {
    thread_ = std::thread([this] { loop_.Run(); });
  }
  ByteBoundedQueue::PushResult Push(EncodedRecord record,
                                    OverflowPolicy policy = OverflowPolicy::kBlock) {
    return queue_.Push(WriterMessage::Record(std::move(record)), policy);
  }
  absl::Status Flush() { return Post(WriterMessage::Kind::kFlush); }
  // Returns once Run() has returned.
  absl::Status Close() {
    const absl::Status status = Post(WriterMessage::Kind::kClose);
    thread_.join();
    return status;
  }

  ByteBoundedQueue& queue() { return queue_; }
  FramePool& pool() { return pool_; }
  IoLoop& loop() { return loop_; }

 private:
  absl::Status Post(WriterMessage::Kind kind) {
    auto done = std::make_shared<Completion>();
    queue_.PushControl(WriterMessage::Control(kind, done));
    return done->Wait();
  }

  OutputDir dir_;  // Outlives loop_.
  ByteBoundedQueue queue_;
  FramePool pool_;
  IoLoop loop_;
  std::thread thread_;
};

TEST_CASE("a flush is answered once every record queued before it is written", "[loop]") {
  TempDir dir;
  const TraceConfig config = LoopConfig(dir.path());
  LoopUnderTest t(config);
  t.Run();
  const std::string path = DataFilePath(config, 1);
  std::string expected = DataFileSegment::HeaderFrame(kKeys);
  for (int64_t step = 1; step <= 20; ++step) {
    EncodedRecord r = MakeRecord(step);
    expected += r.frame;
    REQUIRE(t.Push(std::move(r)) == ByteBoundedQueue::PushResult::kQueued);
  }
  REQUIRE(t.Flush().ok());
  CHECK(ReadFile(path) == expected);
  const xdl::proto::Meta meta = ReadMeta(path);
  CHECK(meta.record_count() == 20);
  CHECK(meta.data_bytes() == static_cast<int64_t>(expected.size()));
  CHECK(meta.crc32c() == crc32c::Value(expected.data(), expected.size()));
  CHECK_FALSE(meta.closed_cleanly());
  const IoLoop::Counters c = t.loop().counters();
  CHECK(c.records_written == 20);
  CHECK(c.bytes_written == static_cast<int64_t>(expected.size()));
  CHECK(c.records_dropped == 0);
  CHECK(c.files_written == 1);
  CHECK(t.queue().counters().pending_bytes == 0);  // Written bytes went back to producers.
  CHECK(t.pool().buffers() > 0);                   // And their buffers to the pool.

  REQUIRE(t.Close().ok());  // Run() returned: the thread joined.
  CHECK(ReadMeta(path).closed_cleanly());
  CHECK(ReadFile(path) == expected);
}

TEST_CASE("a flush behind a stalled sink is answered only after the sink resumes", "[loop][slow]") {
  TempDir dir;
  const TraceConfig config = LoopConfig(dir.path());
  Gate gate;
  LoopUnderTest t(config, [&gate] { gate.Wait(); });
  t.Run();
  for (int64_t step = 1; step <= 3; ++step)
    REQUIRE(t.Push(MakeRecord(step)) == ByteBoundedQueue::PushResult::kQueued);
  std::atomic<bool> flushed{false};
  absl::Status flush_status = absl::UnknownError("not answered");
  std::thread flusher([&] {
    flush_status = t.Flush();
    flushed = true;
  });
  REQUIRE(Eventually([&] { return gate.waiting() == 1; }));
  // The IO thread is held inside the sink, so it cannot have answered.
  CHECK_FALSE(flushed.load());
  CHECK(ReadMeta(DataFilePath(config, 1)).record_count() == 0);
  gate.Open();
  flusher.join();
  CHECK(flushed.load());
  CHECK(flush_status.ok());
  CHECK(ReadMeta(DataFilePath(config, 1)).record_count() == 3);
  REQUIRE(t.Close().ok());
}

TEST_CASE("a stalled sink fills the queue; the drops producers count reach the Meta",
          "[loop][slow]") {
  TempDir dir;
  TraceConfig config = LoopConfig(dir.path());
  const size_t record = MakeRecord(1).frame.size();
  config.max_pending_mb = static_cast<double>(4 * record) / 1e6;  // Exactly 4 records.
  Gate gate;
  LoopUnderTest t(config, [&gate] { gate.Wait(); });
  t.Run();
  int64_t queued = 0, dropped = 0;
  for (int64_t step = 1; step <= 30; ++step) {
    if (t.Push(MakeRecord(step), OverflowPolicy::kDrop) == ByteBoundedQueue::PushResult::kQueued) {
      ++queued;
    } else {
      t.loop().CountDropped();  // What TraceWriter::Submit does for a kDropped push.
      ++dropped;
    }
  }
  // The sink held every byte: the queue bound let exactly 4 records in.
  CHECK(queued == 4);
  CHECK(t.queue().counters().pending_bytes == static_cast<int64_t>(4 * record));
  gate.Open();
  REQUIRE(t.Close().ok());
  const IoLoop::Counters c = t.loop().counters();
  CHECK(c.records_written == 4);
  CHECK(c.records_dropped == 26);
  const xdl::proto::Meta meta = ReadMeta(DataFilePath(config, 1));
  CHECK(meta.record_count() == 4);
  CHECK(meta.dropped_records() == 26);
  CHECK(meta.closed_cleanly());
}

TEST_CASE("kBlock with a slow sink keeps pending bytes within the bound and loses nothing",
          "[loop][slow]") {
  TempDir dir;
  TraceConfig config = LoopConfig(dir.path());
  const size_t record = MakeRecord(1).frame.size();
  config.max_pending_mb = static_cast<double>(5 * record) / 1e6;
  LoopUnderTest t(config, [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  t.Run();
  std::string expected = DataFileSegment::HeaderFrame(kKeys);
  for (int64_t step = 1; step <= 100; ++step) {
    EncodedRecord r = MakeRecord(step);
    expected += r.frame;
    REQUIRE(t.Push(std::move(r)) == ByteBoundedQueue::PushResult::kQueued);
  }
  REQUIRE(t.Close().ok());
  CHECK(t.queue().counters().high_water_bytes <= static_cast<int64_t>(5 * record));
  CHECK(t.queue().counters().blocked_pushes > 0);  // The producer did wait for the sink.
  CHECK(ReadFile(DataFilePath(config, 1)) == expected);
  CHECK(t.loop().counters().records_dropped == 0);
}

TEST_CASE("records of one batch roll over into new files, each Meta closed", "[loop][rollover]") {
  TempDir dir;
  TraceConfig config = LoopConfig(dir.path());
  const size_t header = DataFileSegment::HeaderFrame(kKeys).size();
  const size_t record = MakeRecord(1).frame.size();
  config.max_file_m_size = static_cast<double>(header + 3 * record) / 1e6;
  LoopUnderTest t(config);
  // Queued before Run(): the loop takes all seven in one batch.
  for (int64_t step = 1; step <= 7; ++step)
    REQUIRE(t.Push(MakeRecord(step)) == ByteBoundedQueue::PushResult::kQueued);
  t.Run();
  REQUIRE(t.Close().ok());
  CHECK(t.loop().counters().files_written == 3);
  const std::vector<int64_t> counts = {3, 3, 1};
  int64_t step = 1;
  for (int64_t index = 1; index <= 3; ++index) {
    const std::string path = DataFilePath(config, index);
    INFO(path);
    std::string expected = DataFileSegment::HeaderFrame(kKeys);
    for (int64_t i = 0; i < counts[index - 1]; ++i) expected += MakeRecord(step++).frame;
    CHECK(ReadFile(path) == expected);
    const xdl::proto::Meta meta = ReadMeta(path);
    CHECK(meta.record_count() == counts[index - 1]);
    CHECK(meta.file_index() == index);
    CHECK(meta.closed_cleanly());
  }
  CHECK_FALSE(test::Exists(DataFilePath(config, 4)));
}

TEST_CASE("Meta is refreshed at the deadline without a flush", "[loop][meta]") {
  TempDir dir;
  TraceConfig config = LoopConfig(dir.path());
  config.meta_interval_s = 0.02;
  LoopUnderTest t(config);
  t.Run();
  for (int64_t step = 1; step <= 10; ++step)
    REQUIRE(t.Push(MakeRecord(step)) == ByteBoundedQueue::PushResult::kQueued);
  const std::string path = DataFilePath(config, 1);
  CHECK(Eventually([&] { return ReadMeta(path).record_count() == 10; }));
  CHECK_FALSE(ReadMeta(path).closed_cleanly());
  REQUIRE(t.Close().ok());
}

TEST_CASE("a write error is sticky, aborts the queue, and every later record is dropped",
          "[loop][errors]") {
  TempDir dir;
  TraceConfig config = LoopConfig(dir.path() + "/out");
  LoopUnderTest t(config);
  t.Run();
  REQUIRE(t.Push(MakeRecord(1)) == ByteBoundedQueue::PushResult::kQueued);
  REQUIRE(t.Flush().ok());
  std::filesystem::remove_all(config.output_dir);  // The next Meta cannot be written.

  REQUIRE(t.Push(MakeRecord(2)) == ByteBoundedQueue::PushResult::kQueued);
  const absl::Status flush = t.Flush();
  REQUIRE_FALSE(flush.ok());
  CHECK(flush.code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(flush.message()), Catch::Contains("loop.0.1.meta.tmp"));
  CHECK(t.loop().failed());
  CHECK(t.loop().error() == flush);
  // The queue turns producers away at once instead of queueing for a dead sink.
  CHECK(t.Push(MakeRecord(3)) == ByteBoundedQueue::PushResult::kAborted);

  CHECK(t.Close() == flush);
  const IoLoop::Counters c = t.loop().counters();
  // Record 2 reached the (unlinked) data file before its Meta failed.
  CHECK(c.records_written == 2);
  CHECK(t.queue().counters().pending_bytes == 0);
}

TEST_CASE("records already queued behind a failure are dropped and counted", "[loop][errors]") {
  TempDir dir;
  TraceConfig config = LoopConfig(dir.path() + "/out");
  config.max_file_m_size = 0.001;  // Each record below gets its own file.
  LoopUnderTest t(config);
  std::filesystem::remove_all(config.output_dir);  // Rollover cannot create the next file.
  for (int64_t step = 1; step <= 3; ++step) {
    EncodedRecord r = MakeRecord(step);
    r.frame = test::Frame(std::string(900, static_cast<char>(step)));
    REQUIRE(t.Push(std::move(r)) == ByteBoundedQueue::PushResult::kQueued);
  }
  t.Run();
  const absl::Status close = t.Close();
  REQUIRE_FALSE(close.ok());
  CHECK_THAT(std::string(close.message()), Catch::Contains("meta"));
  const IoLoop::Counters c = t.loop().counters();
  CHECK(c.records_written == 1);  // Into the unlinked first file.
  CHECK(c.records_dropped == 2);
  CHECK(c.records_written + c.records_dropped == 3);
  CHECK(t.queue().counters().pending_bytes == 0);
}

double ProcessCpuSeconds() {
  timespec ts;
  REQUIRE(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST_CASE("a huge meta_interval_s saturates to no timed refresh and the idle IO thread sleeps",
          "[loop][meta][config]") {
  TempDir dir;
  TraceConfig config = LoopConfig(dir.path());
  config.meta_interval_s = 1e10;  // Past what steady_clock's nanoseconds hold from now.
  LoopUnderTest t(config);
  t.Run();
  REQUIRE(t.Push(MakeRecord(1)) == ByteBoundedQueue::PushResult::kQueued);
  REQUIRE(t.Flush().ok());
  const double cpu_before = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double cpu_used = ProcessCpuSeconds() - cpu_before;
  CHECK(cpu_used < 0.05);  // A spinning IO thread burns up to 0.5 s here.
  REQUIRE(t.Close().ok());
  CHECK(ReadMeta(DataFilePath(config, 1)).closed_cleanly());
}

TEST_CASE("IoLoopOptionsFromConfig takes what the IO side uses; a huge file size saturates",
          "[loop][config]") {
  TraceConfig config = LoopConfig("/x/y");
  config.is_training = false;
  config.rank = 3;
  config.fsync = true;
  config.max_file_m_size = 1e13;  // 10^19 bytes: past INT64_MAX.
  config.meta_interval_s = 2.5;
  const IoLoopOptions options = IoLoopOptionsFromConfig(config, kKeys, {});
  CHECK(options.segment.output_dir == "/x/y");
  CHECK(options.segment.stem == "test.loop.3");
  CHECK(options.segment.rank == 3);
  CHECK(options.segment.run_id == "loop-run");
  CHECK(options.segment.fsync);
  CHECK(options.segment.max_file_bytes == INT64_MAX);
  CHECK(options.segment.header_frame == DataFileSegment::HeaderFrame(kKeys, {}, config));
  CHECK(options.segment.dir_fd == -1);  // Set by Start from the OutputDir.
  CHECK(options.meta_interval_s == 2.5);
  config.max_file_m_size = 0.5;
  CHECK(IoLoopOptionsFromConfig(config, kKeys, {}).segment.max_file_bytes == 500000);
}

TEST_CASE("DeadlineAfter saturates instead of overflowing", "[loop][meta][config]") {
  const Clock::time_point now = Clock::now();
  CHECK(DeadlineAfter<Clock>(now, 0) == Clock::time_point::max());
  CHECK(DeadlineAfter<Clock>(now, -5) == Clock::time_point::max());
  CHECK(DeadlineAfter<Clock>(now, 1e10) == Clock::time_point::max());
  CHECK(DeadlineAfter<Clock>(now, 1e300) == Clock::time_point::max());
  CHECK(DeadlineAfter<Clock>(now, 2.5) - now == std::chrono::milliseconds(2500));
  const Clock::time_point far = DeadlineAfter<Clock>(now, 1e9);  // ~31 years: representable.
  CHECK(far > now);
  CHECK(far < Clock::time_point::max());
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
