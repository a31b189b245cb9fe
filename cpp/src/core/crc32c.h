// CRC-32C (Castagnoli) of data-file bytes: SSE4.2 when available, else a table.
//
// Debian bookworm ships no crc32c library and absl 20220623 has no absl/crc,
// so this small implementation lives here. Values match RFC 3720 / leveldb's
// crc32c::Value: Value("123456789") == 0xE3069283.
#ifndef XDL_TRACE_CORE_CRC32C_H_
#define XDL_TRACE_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace xdl_trace {
namespace internal {
namespace crc32c {

// Returns the CRC-32C of the concatenation A + data[0, n), where `crc` is the
// CRC-32C of A (0 for the empty string). Picks the fastest implementation.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

// CRC-32C of A + B from crc_a = CRC-32C of A and crc_b = CRC-32C of B,
// `len_b` bytes long, without reading either (O(log len_b)).
uint32_t Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// CRC-32C of data[0, n).
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// Both implementations, exposed so tests can check that they agree.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);
// Only valid when HardwareAvailable(); otherwise falls back to ExtendPortable.
uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n);
// True when the CPU supports SSE4.2's crc32 instruction (checked once).
bool HardwareAvailable();

}  // namespace crc32c
}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_CRC32C_H_
