// The tensor digest: an exact, order-independent 64-bit checksum of a tensor's element bits and
// positions (docs/format.md "Digest columns"), computed on the host in one pass at memory speed.
#ifndef XDL_TRACE_SUMMARY_DIGEST_H_
#define XDL_TRACE_SUMMARY_DIGEST_H_

#include <cstddef>
#include <cstdint>

#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace internal {

// The digest of n elements of `element_size` bytes (1, 2, 4 or 8; anything
// else is read as n * element_size bytes) at `data`, little-endian:
//
//   digest = sum over i of Mix(bits_i + (i + 1) * kDigestIndexStep)   (mod 2^64)
//
// bits_i: element i's bits zero-extended to 64; Mix: splitmix64's finalizer.
// A sum, so any split of the elements (threads, blocks, a device reduction)
// gives the same value; the index makes it see a permutation. Equal tensors
// (bit for bit, NaN payloads included) have equal digests; different ones
// collide with probability about 2^-64.
inline constexpr uint64_t kDigestIndexStep = 0x9E3779B97F4A7C15ULL;
uint64_t DigestElements(const void* data, size_t n, size_t element_size);
// The digest of a tensor in place (an unknown dtype: its bytes).
uint64_t ComputeDigest(const TensorView& view);

// A digest column (BuiltinSummary::kDigest, ColumnDescriptor DIGEST) is
// float64[kDigestSize]: the digest's high and low 32 bits, each exact in a
// double, so the column is one more float64 summary for every reader.
inline constexpr int kDigestSize = 2;
inline void DigestToValues(uint64_t digest, double* out) {
  out[0] = static_cast<double>(digest >> 32);
  out[1] = static_cast<double>(digest & 0xFFFFFFFFULL);
}
inline uint64_t DigestFromValues(const double* values) {
  return (static_cast<uint64_t>(values[0]) << 32) | static_cast<uint64_t>(values[1]);
}

// splitmix64's finalizer (Steele, Lea, Flood 2014), the per-element mix.
inline uint64_t DigestMix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_SUMMARY_DIGEST_H_
