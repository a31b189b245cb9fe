// CRC-32C: SSE4.2 crc32 instruction in three interleaved streams (x86-64), slicing-by-8 table.
#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define XDL_TRACE_CRC32C_X86 1
#else
#define XDL_TRACE_CRC32C_X86 0
#endif

namespace xdl_trace {
namespace internal {
namespace crc32c {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;  // Castagnoli, bit-reversed.

// tables[k][b]: CRC of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ ((crc & 1u) ? kPolyReflected : 0u);
    t[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

// a * b modulo the polynomial, both reflected (bit 31 is x^0), as zlib's
// multmodp: what appending zero bytes does to a CRC register is a product
// with a power of x.
constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = uint32_t{1} << 31; m != 0; m >>= 1) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    b = (b & 1u) ? (b >> 1) ^ kPolyReflected : b >> 1;
  }
  return product;
}

// kX2n[k] = x^(2^k) mod P.
constexpr std::array<uint32_t, 64> MakeX2n() {
  std::array<uint32_t, 64> t{};
  t[0] = uint32_t{1} << 30;  // x^1.
  for (size_t k = 1; k < t.size(); ++k) t[k] = MultModP(t[k - 1], t[k - 1]);
  return t;
}
constexpr std::array<uint32_t, 64> kX2n = MakeX2n();

// x^(8 * len) mod P: the operator "append `len` zero bytes", O(log len).
uint32_t ZeroBytesOperator(uint64_t len) {
  uint32_t op = uint32_t{1} << 31;  // x^0.
  for (size_t k = 3; len != 0; len >>= 1, ++k) {
    if (len & 1u) op = MultModP(kX2n[k], op);
  }
  return op;
}

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#if XDL_TRACE_CRC32C_X86
// The crc32 instruction has a latency of 3 cycles and a throughput of 1, so
// one dependent chain runs at a third of the core's speed. Long inputs are cut
// into blocks of three streams computed together, then combined: appending n
// bytes to a CRC register is linear, applied through precomputed tables (as in
// Mark Adler's crc32c.c).
constexpr size_t kLongStream = 8192;
constexpr size_t kShortStream = 256;

// Tables applying "append `len` zero bytes" to a CRC register, by byte.
using ShiftTables = std::array<std::array<uint32_t, 256>, 4>;

ShiftTables MakeShiftTables(size_t len) {
  const uint32_t op = ZeroBytesOperator(len);
  ShiftTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    t[0][b] = MultModP(op, b);
    t[1][b] = MultModP(op, b << 8);
    t[2][b] = MultModP(op, b << 16);
    t[3][b] = MultModP(op, b << 24);
  }
  return t;
}

inline uint32_t Shift(const ShiftTables& t, uint32_t crc) {
  return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
}

// Three streams of `stream` bytes each from p; returns the register after all 3 * stream bytes.
__attribute__((target("sse4.2"))) uint64_t ThreeStreams(uint64_t c0, const uint8_t* p,
                                                        size_t stream, const ShiftTables& shift) {
  uint64_t c1 = 0;
  uint64_t c2 = 0;
  const uint8_t* end = p + stream;
  while (p < end) {
    c0 = _mm_crc32_u64(c0, LoadLE64(p));
    c1 = _mm_crc32_u64(c1, LoadLE64(p + stream));
    c2 = _mm_crc32_u64(c2, LoadLE64(p + 2 * stream));
    p += 8;
  }
  c0 = Shift(shift, static_cast<uint32_t>(c0)) ^ c1;
  return Shift(shift, static_cast<uint32_t>(c0)) ^ c2;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  static const ShiftTables* const long_shift = new ShiftTables(MakeShiftTables(kLongStream));
  static const ShiftTables* const short_shift = new ShiftTables(MakeShiftTables(kShortStream));
  uint64_t c = ~crc;
  // Align to 8 bytes, then three streams at a time, then 8 bytes per
  // instruction, then the tail.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 3 * kLongStream) {
    c = ThreeStreams(c, p, kLongStream, *long_shift);
    p += 3 * kLongStream;
    n -= 3 * kLongStream;
  }
  while (n >= 3 * kShortStream) {
    c = ThreeStreams(c, p, kShortStream, *short_shift);
    p += 3 * kShortStream;
    n -= 3 * kShortStream;
  }
  while (n >= 8) {
    c = _mm_crc32_u64(c, LoadLE64(p));
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<uint32_t>(c);
}
#endif

bool DetectHardware() {
#if XDL_TRACE_CRC32C_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint64_t v = LoadLE64(p) ^ c;
    c = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
    --n;
  }
  return ~c;
}

bool HardwareAvailable() {
  static const bool available = DetectHardware();
  return available;
}

uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n) {
#if XDL_TRACE_CRC32C_X86
  if (HardwareAvailable()) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) { return ExtendHardware(crc, data, n); }

uint32_t Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  if (len_b == 0) return crc_a;
  return MultModP(ZeroBytesOperator(len_b), crc_a) ^ crc_b;
}

}  // namespace crc32c
}  // namespace internal
}  // namespace xdl_trace
