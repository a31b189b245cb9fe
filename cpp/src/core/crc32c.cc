// CRC-32C: SSE4.2 crc32 instruction in three interleaved streams (x86-64), slicing-by-8 table.
#include "core/crc32c.h"

#include <array>
#include <cstring>
#include <utility>

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

// GF(2) 32x32 matrix times vector.
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1u) sum ^= *mat;
  }
  return sum;
}

void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}

// op = the operator "append `len` zero bytes" on a CRC register (len > 0):
// squares the one-bit operator up to a byte, then by the bits of len (as in
// zlib's crc32_combine).
void ZeroBytesOperator(uint64_t len, uint32_t op[32]) {
  uint32_t even[32];
  uint32_t odd[32];
  odd[0] = kPolyReflected;  // Operator for one zero bit.
  for (int n = 1; n < 32; ++n) odd[n] = uint32_t{1} << (n - 1);
  Gf2Square(even, odd);  // Two zero bits.
  Gf2Square(odd, even);  // Four zero bits.
  Gf2Square(even, odd);  // One zero byte (8 bits) in `even`.
  bool have_op = false;
  uint32_t* cur = even;
  uint32_t* next = odd;
  for (uint64_t rest = len; rest != 0; rest >>= 1) {
    if (rest & 1u) {
      if (!have_op) {
        for (int n = 0; n < 32; ++n) op[n] = cur[n];
        have_op = true;
      } else {
        uint32_t combined[32];
        for (int n = 0; n < 32; ++n) combined[n] = Gf2Times(cur, op[n]);
        for (int n = 0; n < 32; ++n) op[n] = combined[n];
      }
    }
    Gf2Square(next, cur);
    std::swap(cur, next);
  }
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
  uint32_t op[32];
  ZeroBytesOperator(len, op);
  ShiftTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    t[0][b] = Gf2Times(op, b);
    t[1][b] = Gf2Times(op, b << 8);
    t[2][b] = Gf2Times(op, b << 16);
    t[3][b] = Gf2Times(op, b << 24);
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
  uint32_t op[32];
  ZeroBytesOperator(len_b, op);
  return Gf2Times(op, crc_a) ^ crc_b;
}

}  // namespace crc32c
}  // namespace internal
}  // namespace xdl_trace
