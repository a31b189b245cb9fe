// CopyJob: chunks copied by the owner and a helper add up to one memcpy; the owner never waits for
// a helper that does not come.
#include "record/copy_job.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "record/record_encoder.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace internal {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

}  // namespace

TEST_CASE("a copy job copies every range, with or without a helper", "[copy_job]") {
  const std::vector<size_t> sizes = {1, CopyJob::kChunkBytes - 1, CopyJob::kChunkBytes,
                                     CopyJob::kChunkBytes + 1, 3 * CopyJob::kChunkBytes + 17};
  for (const int helpers : {0, 1, 2}) {
    INFO("helpers " << helpers);
    std::vector<std::string> sources;
    std::vector<std::string> targets;
    for (size_t i = 0; i < sizes.size(); ++i) {
      sources.push_back(RandomBytes(sizes[i], static_cast<uint32_t>(i + 10 * helpers)));
      targets.emplace_back(sizes[i], '\0');
    }
    auto job = std::make_shared<CopyJob>();
    size_t expected_chunks = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      job->Add(targets[i].data(), sources[i].data(), sizes[i]);
      expected_chunks += (sizes[i] + CopyJob::kChunkBytes - 1) / CopyJob::kChunkBytes;
    }
    CHECK(job->chunks() == expected_chunks);
    std::vector<std::thread> threads;
    for (int h = 0; h < helpers; ++h) threads.emplace_back([job] { job->Help(); });
    job->RunAndWait();
    // Every byte is in place when RunAndWait returns, whoever copied it.
    CHECK(targets == sources);
    for (std::thread& t : threads) t.join();
    CHECK(job->helped_chunks() <= job->chunks());
    job->Help();  // A late helper finds nothing to claim.
    CHECK(targets == sources);
  }
}

TEST_CASE("a record in pieces made contiguous equals the encoder's contiguous frame",
          "[copy_job]") {
  std::vector<std::string> data;
  std::vector<TensorView> columns;
  for (size_t bytes : {size_t{12}, size_t{70000}, size_t{1} << 20, size_t{3000}}) {
    data.push_back(RandomBytes(bytes, static_cast<uint32_t>(bytes)));
  }
  for (const std::string& bytes : data) {
    columns.push_back({DType::kUInt8, {static_cast<int64_t>(bytes.size())}, bytes.data()});
  }
  absl::StatusOr<EncodedRecord> contiguous = EncodeRecord(1, 2, 3, columns, {}, "");
  REQUIRE(contiguous.ok());
  EncodeOptions options;
  options.reference_min_bytes = 65536;
  absl::StatusOr<EncodedRecord> record = EncodeRecord(
      1, 2, 3, columns, {}, "", [](size_t) { return std::string(); }, options);
  REQUIRE(record.ok());
  REQUIRE(record->pieces.size() == 5);  // Framing, 70000, framing, 1 MiB, framing.
  std::string buffer(record->FrameBytes(), 'Z');
  auto job = std::make_shared<CopyJob>();
  PlanContiguousFrame(*record, &buffer, job.get());
  std::thread helper([job] { job->Help(); });
  job->RunAndWait();
  helper.join();
  const size_t framing_bytes = record->frame.size();
  const std::string framing = AdoptFrame(&*record, std::move(buffer));
  CHECK(framing.size() == framing_bytes);
  CHECK(record->pieces.empty());
  CHECK(record->external_bytes == 0);
  CHECK(record->frame == contiguous->frame);
}

TEST_CASE("RunAndWait returns only after the chunks helpers claimed are copied", "[copy_job]") {
  // Helpers already running when the job is shared, so they claim chunks while
  // the owner copies; an owner that did not wait for them would see a chunk
  // not yet (or half) copied in some of the rounds.
  std::string source = RandomBytes(64 * CopyJob::kChunkBytes, 3);
  for (char& c : source) c = static_cast<char>(c | 1);  // Never the target's 0.
  std::string target(source.size(), '\0');
  for (int round = 0; round < 300; ++round) {
    std::fill(target.begin(), target.end(), '\0');
    auto job = std::make_shared<CopyJob>();
    job->Add(target.data(), source.data(), source.size());
    std::atomic<bool> go{false};
    std::vector<std::thread> helpers;
    for (int h = 0; h < 2; ++h) {
      helpers.emplace_back([&go, job] {
        while (!go.load()) std::this_thread::yield();
        job->Help();
      });
    }
    go = true;
    job->RunAndWait();
    // Sampled at once, in each chunk's second half (copied last): a full
    // comparison takes long enough for a late helper to finish meanwhile.
    bool complete = true;
    for (size_t at = CopyJob::kChunkBytes / 2; at < source.size(); at += CopyJob::kChunkBytes / 4) {
      complete = complete && target[at] == source[at] && target[at + 1] == source[at + 1];
    }
    complete = complete && target == source;
    for (std::thread& t : helpers) t.join();
    INFO("round " << round << ", helped chunks " << job->helped_chunks());
    REQUIRE(complete);
  }
}

}  // namespace internal
}  // namespace xdl_trace
