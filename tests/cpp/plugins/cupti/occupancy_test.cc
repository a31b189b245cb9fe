// Occupancy by NVIDIA's calculator against an H100's DEVICE record (cpp/plugins/cupti/occupancy.h),
// checked launch by launch against torch.profiler's (Kineto's) figures for the same H100 run; the
// same limits from the driver's attributes.
#include "occupancy.h"

#include <dlfcn.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cupti/activity_records.h"

namespace xdl_trace {
namespace cupti {
namespace {

// 128x8x128 -> 131072.
int64_t Product(const std::string& dims) {
  int64_t product = 1;
  std::stringstream in(dims);
  std::string part;
  while (std::getline(in, part, 'x')) product *= std::stoll(part);
  return product;
}

TEST_CASE("the calculator's blocks per SM give Kineto's est. achieved occupancy", "[cupti]") {
  // Every distinct launch of the H100 run (tests/data/h100_conv/kineto_launches.tsv, written by
  // reduce_kineto.py from Kineto's trace): grid, block, registers, shared memory, Kineto's blocks
  // per SM and est. achieved occupancy %, which is min(active blocks, blocks per SM) x block
  // threads / max threads per SM.
  std::ifstream tsv(std::string(XDL_TRACE_SOURCE_DIR) +
                    "/tests/data/h100_conv/kineto_launches.tsv");
  REQUIRE(tsv);
  const cudaOccDeviceProp h100 = DeviceLimits(testing::H100DeviceRecord());
  CHECK(h100.maxThreadsPerMultiprocessor == 2048);
  CHECK(h100.sharedMemPerBlockOptin == 232448);  // 227 KB, as cudaDeviceProp says.
  std::string line;
  std::getline(tsv, line);  // The header.
  int rows = 0, opted_in = 0;
  while (std::getline(tsv, line)) {
    std::stringstream in(line);
    std::string grid, block;
    int64_t registers = 0, shared = 0;
    double blocks_per_sm = 0, kineto_pct = 0;
    in >> grid >> block >> registers >> shared >> blocks_per_sm >> kineto_pct;
    INFO(line);
    const int64_t threads = Product(block);
    CHECK(static_cast<double>(Product(grid)) / h100.numSms == Approx(blocks_per_sm).margin(5e-7));
    const int32_t active =
        ActiveBlocksPerSm(h100, threads, registers, static_cast<size_t>(shared), 0);
    REQUIRE(active >= 0);
    const double estimated = 100.0 * std::min<double>(active, blocks_per_sm) * threads /
                             h100.maxThreadsPerMultiprocessor;
    if (shared > static_cast<int64_t>(h100.sharedMemPerBlock)) {
      // Kineto asks with the default 48 KB limit and reads 0; the launch ran, so it had opted
      // in: at least one block fits.
      CHECK(kineto_pct == 0);
      CHECK(active >= 1);
      ++opted_in;
    } else {
      CHECK(std::round(estimated) == kineto_pct);
    }
    ++rows;
  }
  CHECK(rows == 57);
  CHECK(opted_in > 0);
}

TEST_CASE("the driver's attributes give the limits derived from the DEVICE record", "[cupti]") {
  // The record lacks the opt-in and reserved shared memory (derived); the driver reports them.
  const cudaOccDeviceProp record = DeviceLimits(testing::H100DeviceRecord());
  const cudaOccDeviceProp driver = DeviceLimits(testing::H100DriverLimits());
  CHECK(driver.computeMajor == record.computeMajor);
  CHECK(driver.computeMinor == record.computeMinor);
  CHECK(driver.maxThreadsPerBlock == record.maxThreadsPerBlock);
  CHECK(driver.maxThreadsPerMultiprocessor == record.maxThreadsPerMultiprocessor);
  CHECK(driver.regsPerBlock == record.regsPerBlock);
  CHECK(driver.regsPerMultiprocessor == record.regsPerMultiprocessor);
  CHECK(driver.warpSize == record.warpSize);
  CHECK(driver.sharedMemPerBlock == record.sharedMemPerBlock);
  CHECK(driver.sharedMemPerMultiprocessor == record.sharedMemPerMultiprocessor);
  CHECK(driver.numSms == record.numSms);
  CHECK(driver.sharedMemPerBlockOptin == record.sharedMemPerBlockOptin);
  CHECK(driver.reservedSharedMemPerBlock == record.reservedSharedMemPerBlock);
}

TEST_CASE("without a CUDA driver loaded in the process, it reports no device", "[cupti]") {
  if (::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr) {
    WARN("SKIPPED: a CUDA driver is loaded in this process");
    return;
  }
  CHECK(QueryLoadedDriver().empty());
  // Asking never loads one.
  CHECK(::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == nullptr);
}

TEST_CASE("what limits a launch: warps, registers, shared memory, a block too large", "[cupti]") {
  const cudaOccDeviceProp h100 = DeviceLimits(testing::H100DeviceRecord());
  CHECK(ActiveBlocksPerSm(h100, 256, 32, 0, 0) == 8);        // 2048 threads an SM.
  CHECK(ActiveBlocksPerSm(h100, 256, 128, 0, 0) == 2);       // 65536 registers an SM.
  CHECK(ActiveBlocksPerSm(h100, 64, 16, 40000, 0) == 5);     // 228 KB: 5 blocks of 40 KB + 1 KB.
  CHECK(ActiveBlocksPerSm(h100, 384, 168, 0, 231424) == 1);  // 226 KB, opted in.
  CHECK(ActiveBlocksPerSm(h100, 2048, 16, 0, 0) == 0);       // Above 1024 threads a block.
}

}  // namespace
}  // namespace cupti
}  // namespace xdl_trace
