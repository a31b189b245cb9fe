// Record buffer recycling: the pool stays bounded, and reused buffers give byte-identical records.
#include "io/frame_pool.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/data_file_segment.h"
#include "io/trace_writer.h"
#include "record/record_encoder.h"
#include "test_util.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using test::SealedProtobufFrame;
using test::TempDir;

std::string WithCapacity(size_t capacity) {
  std::string s;
  s.reserve(capacity);
  s.assign(capacity / 2, 'x');  // Contents must not survive the pool.
  return s;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST_CASE("FramePool keeps at most max_buffers buffers and max_bytes of capacity", "[pool]") {
  FramePool pool(/*max_buffers=*/3, /*max_bytes=*/2500);
  for (int i = 0; i < 10; ++i) pool.Give(WithCapacity(1000));
  CHECK(pool.buffers() == 2);  // A third 1000-byte buffer would pass 2500 bytes.
  CHECK(pool.bytes() <= 2500);
  CHECK(pool.bytes() >= 2000);

  FramePool by_count(/*max_buffers=*/3, /*max_bytes=*/int64_t{1} << 30);
  for (int i = 0; i < 10; ++i) by_count.Give(WithCapacity(100 + i));
  CHECK(by_count.buffers() == 3);

  // A buffer larger than the byte bound is never kept.
  FramePool small(/*max_buffers=*/4, /*max_bytes=*/500);
  small.Give(WithCapacity(1000));
  CHECK(small.buffers() == 0);
  CHECK(small.bytes() == 0);

  FramePool none(/*max_buffers=*/0, /*max_bytes=*/1 << 20);
  none.Give(WithCapacity(1000));
  CHECK(none.buffers() == 0);
}

TEST_CASE("FramePool::Take returns the smallest fitting buffer, cleared", "[pool]") {
  FramePool pool(4, int64_t{1} << 30);
  pool.Give(WithCapacity(4000));
  pool.Give(WithCapacity(2000));
  pool.Give(WithCapacity(8000));
  const int64_t before = pool.bytes();

  std::string got = pool.Take(1500);
  CHECK(got.empty());
  CHECK(got.capacity() >= 2000);
  CHECK(got.capacity() < 4000);
  CHECK(pool.buffers() == 2);
  CHECK(pool.bytes() == before - static_cast<int64_t>(got.capacity()));
  CHECK(pool.reused() == 1);

  // Nothing fits: a fresh string, and the largest too-small buffer is freed so
  // sizes that stopped occurring do not hold memory.
  std::string fresh = pool.Take(100000);
  CHECK(fresh.empty());
  CHECK(fresh.capacity() < 100000);
  CHECK(pool.buffers() == 1);
  CHECK(pool.reused() == 1);
  std::string last = pool.Take(10);
  CHECK(last.capacity() >= 4000);
  CHECK(last.capacity() < 8000);
  CHECK(pool.buffers() == 0);
  CHECK(pool.bytes() == 0);
  CHECK(pool.Take(10).capacity() < 1000);  // Empty pool: fresh string.
}

TEST_CASE("records encoded through recycled buffers equal protobuf's serialization", "[pool]") {
  FramePool pool(2, int64_t{64} << 20);
  // Sizes go up and down so a buffer is reused for smaller records, grown for
  // larger ones, and holds stale bytes from a longer record before each reuse.
  const std::vector<size_t> sizes = {300000, 1000, 300000, 0, 1200000, 7, 1200000, 50000, 1};
  int reused_before_grow = 0;
  for (size_t round = 0; round < sizes.size(); ++round) {
    const size_t n = sizes[round];
    const std::vector<float> a = RandomFloats(n, static_cast<uint32_t>(round));
    const std::vector<float> b = RandomFloats(n / 3 + 1, static_cast<uint32_t>(round + 100));
    const std::vector<int64_t> c = {-1, 0, 1, static_cast<int64_t>(round) << 40};
    std::vector<TensorView> columns = {
        TensorView{DType::kFloat32, {static_cast<int64_t>(n)}, a.data()},
        TensorView{DType::kFloat32, {1, static_cast<int64_t>(b.size())}, b.data()},
        TensorView{DType::kInt64, {2, 2}, c.data()},
    };
    const int64_t gstep = static_cast<int64_t>(round) * 1000 - 3;  // Includes a negative.
    const char* reused_data = nullptr;
    size_t asked = 0;
    absl::StatusOr<EncodedRecord> record =
        EncodeRecord(gstep, static_cast<int64_t>(round), 1700000000000 + round, columns, {}, {},
                     [&](size_t frame_bytes) {
                       asked = frame_bytes;
                       std::string buffer = pool.Take(frame_bytes);
                       if (buffer.capacity() >= frame_bytes) reused_data = buffer.data();
                       return buffer;
                     });
    REQUIRE(record.ok());
    CHECK(asked == record->frame.size());
    if (reused_data != nullptr) {
      CHECK(record->frame.data() == reused_data);  // Written in place, not reallocated.
      ++reused_before_grow;
    }
    SealFrame(&*record);  // The IO thread's part: the checksum's value.
    CHECK(record->frame ==
          SealedProtobufFrame(gstep, static_cast<int64_t>(round), 1700000000000 + round, columns));
    pool.Give(std::move(record->frame));
  }
  CHECK(reused_before_grow >= 5);
  CHECK(pool.reused() == reused_before_grow);
  CHECK(pool.buffers() <= 2);
}

TEST_CASE("the writer recycles written frames, bounded by max_pending_mb", "[pool][writer]") {
  TempDir dir;
  TraceConfig config;
  config.output_dir = dir.path();
  config.max_pending_mb = 3;  // 3e6 bytes: pooled capacity never passes it.
  config.meta_interval_s = 0;
  absl::StatusOr<std::unique_ptr<TraceWriter>> opened = TraceWriter::Open(config, {"w"});
  REQUIRE(opened.ok());
  TraceWriter& writer = **opened;

  std::vector<std::string> expected;
  const std::vector<size_t> floats = {250000, 250000, 100, 600000, 250000, 600000, 5000, 2000000};
  int recycled = 0;
  for (size_t step = 0; step < floats.size(); ++step) {
    const std::vector<float> w = RandomFloats(floats[step], static_cast<uint32_t>(step));
    std::vector<TensorView> columns = {
        TensorView{DType::kFloat32, {static_cast<int64_t>(w.size())}, w.data()}};
    absl::StatusOr<EncodedRecord> record =
        EncodeRecord(static_cast<int64_t>(step), static_cast<int64_t>(step), 42, columns, {}, {},
                     [&](size_t frame_bytes) {
                       std::string buffer = writer.TakeBuffer(frame_bytes);
                       CHECK(buffer.empty());
                       CHECK(buffer.capacity() <= 3000000);
                       if (buffer.capacity() >= frame_bytes) ++recycled;
                       return buffer;
                     });
    REQUIRE(record.ok());
    expected.push_back(
        SealedProtobufFrame(static_cast<int64_t>(step), static_cast<int64_t>(step), 42, columns));
    REQUIRE(writer.Submit(std::move(*record)).ok());
    REQUIRE(writer.Flush().ok());  // The frame is written and back in the pool.
  }
  // Steps 2, 4, 5 and 6 reuse a written buffer. Fresh strings: step 0 (empty
  // pool), step 1 (4 bytes larger than step 0's frame, whose zero gstep and
  // lstep are omitted), step 3 (larger than any written frame) and step 7
  // (8 MB: no buffer within the 3 MB bound can hold it).
  CHECK(recycled == 4);
  REQUIRE(writer.Close().ok());

  std::ifstream in(DataFilePath(config, 1), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  size_t pos = 4 + static_cast<uint8_t>(bytes[0]) + (static_cast<uint8_t>(bytes[1]) << 8);
  for (const std::string& frame : expected) {
    REQUIRE(bytes.compare(pos, frame.size(), frame) == 0);
    pos += frame.size();
  }
  CHECK(pos == bytes.size());
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
