// EventBlocks: events in pooled blocks, appended, compacted, read by index and handed back.
#include <catch2/catch.hpp>

#ifdef XDL_TRACE_HAVE_CUPTI

#include <thread>
#include <vector>

#include "device_trace_serializer.h"
#include "event_blocks.h"

namespace xdl_trace {
namespace cupti {
namespace {

TEST_CASE("event blocks: events never move, blocks go back to the pool and are reused", "[cupti]") {
  EventBlockPool pool;
  EventBlocks events(&pool);
  CHECK(events.empty());
  const size_t count = 3 * kEventsPerBlock + 5;
  std::vector<const DeviceEventData*> where;
  for (size_t i = 0; i < count; ++i) {
    DeviceEventData& e = events.emplace_back();
    CHECK(e.start_ns == 0);
    e.start_ns = static_cast<int64_t>(i);
    where.push_back(&e);
  }
  CHECK(pool.allocated() == 4);
  bool stayed = true;
  for (size_t i = 0; i < count; ++i) {
    stayed = stayed && &events[i] == where[i] && events[i].start_ns == static_cast<int64_t>(i);
  }
  CHECK(stayed);
  // Compacted in place as the join does, then appended to.
  size_t kept = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (i % 2 == 0) events[kept++] = events[i];
  }
  events.shrink(kept);
  events.pop_back();
  DeviceEventData last;
  last.start_ns = -1;
  events.push_back(last);
  REQUIRE(events.size() == kept);
  CHECK(events[kept - 2].start_ns == static_cast<int64_t>(2 * (kept - 2)));
  CHECK(events[kept - 1].start_ns == -1);
  CHECK(pool.allocated() == 4);
  // Taken by a collect (swap), then handed back: the next appends reuse the
  // blocks, and a reused slot starts as a default event.
  EventBlocks collected(&pool);
  collected.swap(events);
  CHECK(events.empty());
  CHECK(collected.size() == kept);
  collected.clear();
  CHECK(collected.empty());
  for (size_t i = 0; i < 2 * kEventsPerBlock; ++i) {
    DeviceEventData& e = events.emplace_back();
    if (i == 0) CHECK(e.start_ns == 0);
  }
  CHECK(pool.allocated() == 4);
  // Without a pool: blocks of its own.
  EventBlocks own;
  own.emplace_back().line = 7;
  CHECK(own[0].line == 7);
}

TEST_CASE("event blocks: the pool serves a filling and a clearing thread at once", "[cupti]") {
  EventBlockPool pool;
  EventBlocks a(&pool);
  std::thread filler([&pool] {
    EventBlocks b(&pool);
    for (int round = 0; round < 20; ++round) {
      for (size_t i = 0; i < kEventsPerBlock + 1; ++i) b.emplace_back().line = round;
      b.clear();
    }
  });
  for (int round = 0; round < 20; ++round) {
    for (size_t i = 0; i < kEventsPerBlock + 1; ++i) a.emplace_back().line = round;
    a.clear();
  }
  filler.join();
  CHECK(pool.allocated() <= 4);
}

}  // namespace
}  // namespace cupti
}  // namespace xdl_trace
#else
TEST_CASE("event block tests need the CUDA toolkit's CUPTI headers", "[cupti]") {
  WARN("SKIPPED: CUPTI headers not found at build time; the cupti plugin was not built");
}
#endif
