// Tests of CRC-32C: standard check values, Extend composition, hardware vs table agreement.
#include "core/crc32c.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace xdl_trace {
namespace internal {
namespace {

TEST_CASE("crc32c matches the standard check values", "[crc32c]") {
  const std::string check = "123456789";
  CHECK(crc32c::Value(check.data(), check.size()) == 0xE3069283u);
  CHECK(crc32c::ExtendPortable(0, check.data(), check.size()) == 0xE3069283u);
  CHECK(crc32c::ExtendHardware(0, check.data(), check.size()) == 0xE3069283u);
  CHECK(crc32c::Value("", 0) == 0u);

  // RFC 3720 (iSCSI) B.4 test vectors.
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  CHECK(crc32c::Value(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(crc32c::Value(ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(crc32c::Value(inc.data(), inc.size()) == 0x46DD794Eu);
  CHECK(crc32c::Value(dec.data(), dec.size()) == 0x113FDB5Cu);
}

TEST_CASE("crc32c Extend composes over any split", "[crc32c]") {
  std::string data(1000, '\0');
  std::mt19937 rng(7);
  for (auto& c : data) c = static_cast<char>(rng());
  const uint32_t whole = crc32c::Value(data.data(), data.size());
  for (size_t split :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{33}, size_t{999}, size_t{1000}}) {
    const uint32_t head = crc32c::Value(data.data(), split);
    CHECK(crc32c::Extend(head, data.data() + split, data.size() - split) == whole);
  }
}

TEST_CASE("crc32c Combine joins the CRCs of two parts without their bytes", "[crc32c]") {
  std::string data(70000, '\0');
  std::mt19937 rng(11);
  for (auto& c : data) c = static_cast<char>(rng());
  const uint32_t whole = crc32c::Value(data.data(), data.size());
  for (size_t split :
       {size_t{0}, size_t{1}, size_t{8}, size_t{4096}, size_t{69999}, size_t{70000}}) {
    const uint32_t head = crc32c::Value(data.data(), split);
    const uint32_t tail = crc32c::Value(data.data() + split, data.size() - split);
    CHECK(crc32c::Combine(head, tail, data.size() - split) == whole);
  }
  // A long tail: the operator is squared up through every bit of the length.
  const std::string zeros(uint64_t{3} << 20, '\0');
  const uint32_t head = crc32c::Value(data.data(), 100);
  std::string joined = data.substr(0, 100) + zeros;
  CHECK(crc32c::Combine(head, crc32c::Value(zeros.data(), zeros.size()), zeros.size()) ==
        crc32c::Value(joined.data(), joined.size()));
}

TEST_CASE("crc32c hardware and table implementations agree", "[crc32c]") {
  INFO("SSE4.2 available: " << crc32c::HardwareAvailable());
  std::mt19937 rng(42);
  std::vector<uint8_t> buf(4096 + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  // Every alignment offset and a spread of lengths, including the tails.
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t len : {0, 1, 3, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 65, 255, 1024, 4096}) {
      const uint8_t* p = buf.data() + offset;
      const uint32_t seed = static_cast<uint32_t>(rng());
      REQUIRE(crc32c::ExtendHardware(seed, p, len) == crc32c::ExtendPortable(seed, p, len));
    }
  }
}

TEST_CASE("crc32c three-stream hardware path agrees on long inputs", "[crc32c]") {
  INFO("SSE4.2 available: " << crc32c::HardwareAvailable());
  std::mt19937 rng(7);
  std::vector<uint8_t> buf((3 << 16) + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  // Lengths around the 3 x 256 and 3 x 8192 stream blocks, at odd offsets.
  for (size_t len : {767, 768, 769, 1536, 24575, 24576, 24577, 24576 + 768 + 9, 3 << 16}) {
    for (size_t offset : {0, 5}) {
      const uint8_t* p = buf.data() + offset;
      const uint32_t seed = static_cast<uint32_t>(rng());
      INFO("len " << len << " offset " << offset);
      REQUIRE(crc32c::ExtendHardware(seed, p, len) == crc32c::ExtendPortable(seed, p, len));
    }
  }
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
