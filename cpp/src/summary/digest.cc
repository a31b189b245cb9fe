// The tensor digest (summary/digest.h): one pass over the elements, in vector lanes where the CPU
// has them (each lane its own sum; the digest is their sum, so the lanes change nothing).
#include "summary/digest.h"

#include <cstring>

#include "xdl_trace/dtype.h"

namespace xdl_trace {
namespace internal {
namespace {

template <typename T>
uint64_t DigestOf(const char* data, size_t n, size_t begin = 0) {
  uint64_t sums[4] = {0, 0, 0, 0};
  size_t i = begin;
  for (; i + 4 <= n; i += 4) {
    for (size_t j = 0; j < 4; ++j) {
      T bits;
      std::memcpy(&bits, data + (i + j) * sizeof(T), sizeof(T));  // Any alignment.
      sums[j] += DigestMix(static_cast<uint64_t>(bits) + (i + j + 1) * kDigestIndexStep);
    }
  }
  for (; i < n; ++i) {
    T bits;
    std::memcpy(&bits, data + i * sizeof(T), sizeof(T));
    sums[0] += DigestMix(static_cast<uint64_t>(bits) + (i + 1) * kDigestIndexStep);
  }
  return sums[0] + sums[1] + sums[2] + sums[3];
}

// The same over 8 lanes of 64 bits (GCC vector extensions: AVX2 multiplies 64-bit lanes
// through 32-bit products, AVX-512DQ in one instruction): an element's zero-extended bits fill
// a lane. The tail is DigestOf's.
typedef uint64_t U64x8 __attribute__((vector_size(64)));

template <typename T>
__attribute__((always_inline)) inline uint64_t DigestOfVector(const char* data, size_t n) {
  U64x8 sums = {0, 0, 0, 0, 0, 0, 0, 0};
  U64x8 index = {1, 2, 3, 4, 5, 6, 7, 8};
  const U64x8 step = index * 0 + 8;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    T bits[8];
    std::memcpy(bits, data + i * sizeof(T), sizeof(bits));
    U64x8 x = {bits[0], bits[1], bits[2], bits[3], bits[4], bits[5], bits[6], bits[7]};
    x += index * kDigestIndexStep;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    sums += x ^ (x >> 31);
    index += step;
  }
  uint64_t total = DigestOf<T>(data, n, i);
  for (int lane = 0; lane < 8; ++lane) total += sums[lane];
  return total;
}

template <typename T>
__attribute__((target("avx2"))) uint64_t DigestOfAvx2(const char* data, size_t n) {
  return DigestOfVector<T>(data, n);
}

template <typename T>
__attribute__((target("avx512f,avx512dq"))) uint64_t DigestOfAvx512(const char* data, size_t n) {
  return DigestOfVector<T>(data, n);
}

// The fastest loop this CPU runs (the results are equal: a sum in any order).
template <typename T>
uint64_t DigestOfBest(const char* data, size_t n) {
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return DigestOfAvx512<T>(data, n);
  if (avx2) return DigestOfAvx2<T>(data, n);
  return DigestOf<T>(data, n);
}

}  // namespace

uint64_t DigestElements(const void* data, size_t n, size_t element_size) {
  const char* bytes = static_cast<const char*>(data);
  switch (element_size) {
    case 1:
      return DigestOfBest<uint8_t>(bytes, n);
    case 2:
      return DigestOfBest<uint16_t>(bytes, n);
    case 4:
      return DigestOfBest<uint32_t>(bytes, n);
    case 8:
      return DigestOfBest<uint64_t>(bytes, n);
    default:
      return DigestOfBest<uint8_t>(bytes, n * element_size);
  }
}

uint64_t ComputeDigest(const TensorView& view) {
  const size_t size = DTypeSize(view.dtype);
  if (size == 0) return 0;  // An invalid dtype: the caller read it as bytes.
  return DigestElements(view.data, static_cast<size_t>(view.NumElements()), size);
}

}  // namespace internal
}  // namespace xdl_trace
