// The tensor digest (summary/digest.h): one pass over the elements, four independent sums so the
// multiplies of neighbouring elements overlap.
#include "summary/digest.h"

#include <cstring>

#include "xdl_trace/dtype.h"

namespace xdl_trace {
namespace internal {
namespace {

template <typename T>
uint64_t DigestOf(const char* data, size_t n) {
  uint64_t sums[4] = {0, 0, 0, 0};
  size_t i = 0;
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

}  // namespace

uint64_t DigestElements(const void* data, size_t n, size_t element_size) {
  const char* bytes = static_cast<const char*>(data);
  switch (element_size) {
    case 1:
      return DigestOf<uint8_t>(bytes, n);
    case 2:
      return DigestOf<uint16_t>(bytes, n);
    case 4:
      return DigestOf<uint32_t>(bytes, n);
    case 8:
      return DigestOf<uint64_t>(bytes, n);
    default:
      return DigestOf<uint8_t>(bytes, n * element_size);
  }
}

uint64_t ComputeDigest(const TensorView& view) {
  const size_t size = DTypeSize(view.dtype);
  if (size == 0) return 0;  // An invalid dtype: the caller read it as bytes.
  return DigestElements(view.data, static_cast<size_t>(view.NumElements()), size);
}

}  // namespace internal
}  // namespace xdl_trace
