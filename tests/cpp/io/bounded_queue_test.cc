// Tests of ByteBoundedQueue: FIFO, byte accounting, block/drop overflow, abort.
#include "io/bounded_queue.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "test_util.h"

namespace xdl_trace {
namespace internal {
namespace {

using std::chrono::milliseconds;
using test::Eventually;
using Clock = std::chrono::steady_clock;

WriterMessage RecordOfSize(int64_t gstep, size_t bytes) {
  EncodedRecord r;
  r.gstep = gstep;
  r.frame.assign(bytes, 'x');
  return WriterMessage::Record(std::move(r));
}

TEST_CASE("queue keeps FIFO order of records and control messages", "[queue]") {
  ByteBoundedQueue q(1000);
  REQUIRE(q.Push(RecordOfSize(1, 10), OverflowPolicy::kBlock) ==
          ByteBoundedQueue::PushResult::kQueued);
  auto done = std::make_shared<Completion>();
  q.PushControl(WriterMessage::Control(WriterMessage::Kind::kFlush, done));
  REQUIRE(q.Push(RecordOfSize(2, 20), OverflowPolicy::kBlock) ==
          ByteBoundedQueue::PushResult::kQueued);
  q.PushControl(WriterMessage::Control(WriterMessage::Kind::kClose, done));

  std::deque<WriterMessage> out;
  REQUIRE(q.PopAll(&out, Clock::now()) == 4);
  REQUIRE(out[0].kind == WriterMessage::Kind::kRecord);
  CHECK(out[0].record.gstep == 1);
  CHECK(out[1].kind == WriterMessage::Kind::kFlush);
  REQUIRE(out[2].kind == WriterMessage::Kind::kRecord);
  CHECK(out[2].record.gstep == 2);
  CHECK(out[3].kind == WriterMessage::Kind::kClose);
  CHECK(out[1].bytes() == 0);

  // Popped bytes stay pending until released.
  CHECK(q.counters().pending_bytes == 30);
  q.Release(30);
  CHECK(q.counters().pending_bytes == 0);
  CHECK(q.counters().high_water_bytes == 30);
  CHECK(q.counters().queued_records == 2);
}

TEST_CASE("queue PopAll returns nothing when the deadline passes", "[queue]") {
  ByteBoundedQueue q(100);
  std::deque<WriterMessage> out;
  CHECK(q.PopAll(&out, Clock::now() + milliseconds(5)) == 0);
  CHECK(out.empty());
}

TEST_CASE("queue under kDrop drops what does not fit and counts it", "[queue]") {
  ByteBoundedQueue q(100);
  using R = ByteBoundedQueue::PushResult;
  CHECK(q.Push(RecordOfSize(1, 60), OverflowPolicy::kDrop) == R::kQueued);
  CHECK(q.Push(RecordOfSize(2, 40), OverflowPolicy::kDrop) == R::kQueued);  // Exactly full.
  CHECK(q.Push(RecordOfSize(3, 1), OverflowPolicy::kDrop) == R::kDropped);
  auto c = q.counters();
  CHECK(c.pending_bytes == 100);
  CHECK(c.dropped_records == 1);
  CHECK(c.queued_records == 2);
  q.Release(60);
  CHECK(q.Push(RecordOfSize(4, 60), OverflowPolicy::kDrop) == R::kQueued);
  CHECK(q.counters().high_water_bytes == 100);
}

TEST_CASE("queue admits a record larger than the bound once nothing is pending", "[queue]") {
  ByteBoundedQueue q(100);
  using R = ByteBoundedQueue::PushResult;
  // Empty queue: admitted under both policies.
  CHECK(q.Push(RecordOfSize(1, 500), OverflowPolicy::kDrop) == R::kQueued);
  CHECK(q.Push(RecordOfSize(2, 500), OverflowPolicy::kDrop) == R::kDropped);
  std::deque<WriterMessage> out;
  q.PopAll(&out, Clock::now());
  q.Release(500);
  // kBlock: a producer with an oversized record waits for the queue to empty, then goes.
  CHECK(q.Push(RecordOfSize(3, 10), OverflowPolicy::kBlock) == R::kQueued);
  std::atomic<bool> pushed{false};
  std::thread producer([&] {  // Catch2 assertions stay on the test thread.
    pushed = q.Push(RecordOfSize(4, 500), OverflowPolicy::kBlock) == R::kQueued;
  });
  REQUIRE(Eventually([&] { return q.counters().blocked_pushes == 1; }));
  CHECK_FALSE(pushed.load());
  out.clear();
  q.PopAll(&out, Clock::now());
  q.Release(10);
  producer.join();
  CHECK(pushed.load());
  CHECK(q.counters().pending_bytes == 500);
}

TEST_CASE("queue under kBlock waits for Release and loses nothing", "[queue]") {
  ByteBoundedQueue q(100);
  constexpr int kRecords = 200;
  std::atomic<int> not_queued{0};
  std::thread producer([&] {
    for (int i = 0; i < kRecords; ++i) {
      if (q.Push(RecordOfSize(i, 30), OverflowPolicy::kBlock) !=
          ByteBoundedQueue::PushResult::kQueued) {
        ++not_queued;
      }
    }
  });
  int64_t next = 0;
  while (next < kRecords) {
    std::deque<WriterMessage> out;
    if (q.PopAll(&out, Clock::now() + std::chrono::seconds(10)) == 0) break;  // Hang guard.
    for (auto& m : out) {
      REQUIRE(m.record.gstep == next);
      ++next;
      CHECK(q.counters().pending_bytes <= 100);
      q.Release(m.bytes());
    }
  }
  producer.join();
  CHECK(not_queued.load() == 0);
  const auto c = q.counters();
  CHECK(c.queued_records == kRecords);
  CHECK(c.dropped_records == 0);
  CHECK(c.high_water_bytes <= 100);
  CHECK(c.pending_bytes == 0);
}

TEST_CASE("queue Abort wakes a blocked producer; control messages still pass", "[queue]") {
  ByteBoundedQueue q(100);
  using R = ByteBoundedQueue::PushResult;
  REQUIRE(q.Push(RecordOfSize(1, 100), OverflowPolicy::kBlock) == R::kQueued);
  std::atomic<int> result{-1};
  std::thread producer(
      [&] { result = static_cast<int>(q.Push(RecordOfSize(2, 10), OverflowPolicy::kBlock)); });
  REQUIRE(Eventually([&] { return q.counters().blocked_pushes == 1; }));
  q.Abort();
  producer.join();
  CHECK(result.load() == static_cast<int>(R::kAborted));
  CHECK(q.Push(RecordOfSize(3, 1), OverflowPolicy::kBlock) == R::kAborted);
  CHECK(q.counters().dropped_records == 2);

  auto done = std::make_shared<Completion>();
  q.PushControl(WriterMessage::Control(WriterMessage::Kind::kFlush, done));
  std::deque<WriterMessage> out;
  REQUIRE(q.PopAll(&out, Clock::now()) == 2);
  CHECK(out.back().kind == WriterMessage::Kind::kFlush);
}

TEST_CASE("Completion hands a status across threads", "[queue]") {
  Completion done;
  std::thread io([&] { done.Notify(absl::DataLossError("disk gone")); });
  const absl::Status s = done.Wait();
  io.join();
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(s.message() == "disk gone");
  CHECK(done.Wait().code() == absl::StatusCode::kDataLoss);  // Stays answered.
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
