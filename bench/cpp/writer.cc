// Writer figures: records through TraceWriter's queue and IO thread into real files (three
// payload sizes, fsync off and on) in $XDL_TRACE_BENCH_DIR (default: the system's temporary
// directory), then CRC-32C by table and by SSE4.2. Prints figures and never judges them
// (docs/benchmarks.md):
//   build/bench/xdl_trace_bench_writer
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/crc32c.h"
#include "io/trace_writer.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

// Exits with `what` and the status when `status` is not ok (a figure run has no test to fail).
void CheckOk(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

// A record of one float column of `payload_bytes` bytes, framed ([4-byte length][body]) as the
// writer receives it, with no checksum field to fill.
EncodedRecord MakeRecord(int64_t gstep, size_t payload_bytes) {
  EncodedRecord r;
  r.gstep = gstep;
  r.lstep = gstep * 10;
  r.timestamp_ms = 1'700'000'000'000 + gstep;
  xdl::proto::Record record;
  record.set_gstep(r.gstep);
  record.set_lstep(r.lstep);
  record.set_timestamp(r.timestamp_ms);
  xdl::proto::Column* column = record.add_column();
  column->set_dtype(xdl::proto::Float);
  column->add_shape(static_cast<int32_t>(payload_bytes / 4));
  column->set_data(std::string(payload_bytes, static_cast<char>('a' + gstep % 26)));
  const std::string body = record.SerializeAsString();
  const auto n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) r.frame.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  r.frame += body;
  return r;
}

void WriterThroughput() {
  const char* env_dir = std::getenv("XDL_TRACE_BENCH_DIR");
  const std::filesystem::path base =
      env_dir != nullptr ? std::filesystem::path(env_dir) : std::filesystem::temp_directory_path();
  std::printf("writer figures in %s\n", base.c_str());
  for (const size_t payload : {size_t{1024}, size_t{64 * 1024}, size_t{1024 * 1024}}) {
    for (const bool fsync : {false, true}) {
      std::string dir = base / "xdl_bench_writer.XXXXXX";
      if (::mkdtemp(dir.data()) == nullptr) {
        std::perror("mkdtemp");
        std::exit(1);
      }
      TraceConfig config;
      config.output_dir = dir;
      config.output_file_name = "trace";
      config.rank = 3;
      config.meta_interval_s = 0;
      config.run_id = "bench";
      config.fsync = fsync;
      config.max_file_m_size = 64;
      config.max_pending_mb = 64;
      const int64_t total_bytes = int64_t{256} << 20;
      const int64_t records = total_bytes / static_cast<int64_t>(payload);
      std::vector<EncodedRecord> prepared;
      prepared.reserve(static_cast<size_t>(records));
      for (int64_t i = 0; i < records; ++i) prepared.push_back(MakeRecord(i, payload));
      auto writer = TraceWriter::Open(config, {"scope/a", "scope/b"});
      CheckOk(writer.status(), "TraceWriter::Open");
      const auto t0 = Clock::now();
      double submit_s = 0;
      for (auto& r : prepared) {
        const auto s0 = Clock::now();
        CheckOk((*writer)->Submit(std::move(r)).status(), "Submit");
        submit_s += std::chrono::duration<double>(Clock::now() - s0).count();
      }
      CheckOk((*writer)->Close(), "Close");
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      const TraceStats stats = (*writer)->stats();
      std::printf(
          "payload %7zu B fsync=%d: %6lld records, %.0f MB in %.3f s = %7.1f MB/s end to end; "
          "Submit mean %.2f us (incl. waits when full); files %lld\n",
          payload, fsync ? 1 : 0, static_cast<long long>(stats.records_written),
          stats.bytes_written / 1e6, s, stats.bytes_written / 1e6 / s,
          submit_s / static_cast<double>(records) * 1e6,
          static_cast<long long>(stats.files_written));
      std::filesystem::remove_all(dir);
    }
  }
}

void Crc32cThroughput() {
  std::vector<char> buf(64 << 20, 'x');
  for (int hw = 0; hw < 2; ++hw) {
    const auto t0 = Clock::now();
    uint32_t crc = 0;
    for (int i = 0; i < 4; ++i) {
      crc = hw ? crc32c::ExtendHardware(crc, buf.data(), buf.size())
               : crc32c::ExtendPortable(crc, buf.data(), buf.size());
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("crc32c %s: %.0f MB/s (crc %08x)\n", hw ? "sse4.2 " : "table  ",
                4 * buf.size() / 1e6 / s, crc);
  }
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace

int main() {
  xdl_trace::internal::WriterThroughput();
  xdl_trace::internal::Crc32cThroughput();
  return 0;
}
