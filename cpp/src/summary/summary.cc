// Stats and histogram over any numeric dtype, read in place (one typed loop per dtype).
#include "summary/summary.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/numeric.h"
#include "summary/digest.h"

namespace xdl_trace {
namespace internal {
namespace {

// Loads element `i` of a packed array as double. kMayBeNonFinite is false for
// integer types, so their loops skip the finiteness test.
template <typename T>
struct Plain {
  static constexpr bool kMayBeNonFinite = std::is_floating_point<T>::value;
  static double Get(const char* base, int64_t i) {
    T v;
    std::memcpy(&v, base + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return static_cast<double>(v);
  }
};

struct Bool {
  static constexpr bool kMayBeNonFinite = false;
  static double Get(const char* base, int64_t i) { return base[i] != 0 ? 1.0 : 0.0; }
};

struct Half {
  static constexpr bool kMayBeNonFinite = true;
  static double Get(const char* base, int64_t i) {
    uint16_t bits;
    std::memcpy(&bits, base + 2 * i, 2);
    return HalfToFloat(bits);
  }
};

struct BFloat {
  static constexpr bool kMayBeNonFinite = true;
  static double Get(const char* base, int64_t i) {
    uint16_t bits;
    std::memcpy(&bits, base + 2 * i, 2);
    return BFloat16ToFloat(bits);
  }
};

// Runs the visitor on Plain<T> of the integer type of `size` bytes (1, 2, 4, 8).
template <typename T1, typename T2, typename T4, typename T8, typename Visitor>
void RunBySize(size_t size, const char* data, int64_t n, Visitor& visitor) {
  if (size == 1) return visitor.template Run<Plain<T1>>(data, n);
  if (size == 2) return visitor.template Run<Plain<T2>>(data, n);
  if (size == 4) return visitor.template Run<Plain<T4>>(data, n);
  if (size == 8) return visitor.template Run<Plain<T8>>(data, n);
}

// Calls visitor.template Run<Loader>(data, n) with the loader of view.dtype's
// kind and size (the dtype table's row); n is view.NumElements(). A kOpaque
// dtype (no built-in summary) runs nothing.
template <typename Visitor>
void Dispatch(const TensorView& view, int64_t n, Visitor& visitor) {
  const char* data = static_cast<const char*>(view.data);
  if (n <= 0 || !IsValidDType(static_cast<int32_t>(view.dtype))) return;
  const DTypeInfo& info = GetDTypeInfo(view.dtype);
  switch (info.kind) {
    case DTypeKind::kInt:
      return RunBySize<int8_t, int16_t, int32_t, int64_t>(info.size, data, n, visitor);
    case DTypeKind::kUInt:
      return RunBySize<uint8_t, uint16_t, uint32_t, uint64_t>(info.size, data, n, visitor);
    case DTypeKind::kFloat:
      if (info.size == 2) return visitor.template Run<Half>(data, n);
      if (info.size == 4) return visitor.template Run<Plain<float>>(data, n);
      if (info.size == 8) return visitor.template Run<Plain<double>>(data, n);
      return;
    case DTypeKind::kBool:
      return visitor.template Run<Bool>(data, n);
    case DTypeKind::kBFloat16:
      return visitor.template Run<BFloat>(data, n);
    case DTypeKind::kOpaque:
      return;
  }
}

// Float32 stats on AVX2 (picked at run time; the portable loop below is the
// fallback): blocks of 8 finite values are accumulated in 8 double lanes
// (min, max, shifted sums, sum of squares), with the same operations per lane
// as the scalar loop and no fused multiply-add. Stops before the first block
// holding a NaN or inf and returns how many elements it consumed.
struct Float32Lanes {
  double min[8], max[8], d1[8], d2[8], sq[8];
};

// The 8 double lanes of the AVX2 float32 stats, two registers per quantity,
// and the loop body both AVX2 paths share.
struct Avx2Lanes {
  __m256d min0, min1, max0, max1, d10, d11, d20, d21, sq0, sq1;

  // Adds the 8 values at `p` (their sums shifted by `s`); false, having added
  // nothing, when one of them is NaN or inf.
  __attribute__((target("avx2"), always_inline)) bool AddFinite8(const float* p, __m256d s) {
    const __m256 x = _mm256_loadu_ps(p);
    // x - x is 0 for finite x, NaN for NaN and inf.
    if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(x, x), _mm256_setzero_ps(), _CMP_EQ_OQ)) !=
        0xFF) {
      return false;
    }
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    min0 = _mm256_min_pd(lo, min0);
    min1 = _mm256_min_pd(hi, min1);
    max0 = _mm256_max_pd(lo, max0);
    max1 = _mm256_max_pd(hi, max1);
    const __m256d dlo = _mm256_sub_pd(lo, s), dhi = _mm256_sub_pd(hi, s);
    d10 = _mm256_add_pd(d10, dlo);
    d11 = _mm256_add_pd(d11, dhi);
    d20 = _mm256_add_pd(d20, _mm256_mul_pd(dlo, dlo));
    d21 = _mm256_add_pd(d21, _mm256_mul_pd(dhi, dhi));
    sq0 = _mm256_add_pd(sq0, _mm256_mul_pd(lo, lo));
    sq1 = _mm256_add_pd(sq1, _mm256_mul_pd(hi, hi));
    return true;
  }
};

__attribute__((target("avx2"))) int64_t AccumulateFiniteFloat32Avx2(const char* data, int64_t n,
                                                                    double shift,
                                                                    Float32Lanes* lanes) {
  Avx2Lanes l;
  l.min0 = _mm256_loadu_pd(lanes->min), l.min1 = _mm256_loadu_pd(lanes->min + 4);
  l.max0 = _mm256_loadu_pd(lanes->max), l.max1 = _mm256_loadu_pd(lanes->max + 4);
  l.d10 = _mm256_loadu_pd(lanes->d1), l.d11 = _mm256_loadu_pd(lanes->d1 + 4);
  l.d20 = _mm256_loadu_pd(lanes->d2), l.d21 = _mm256_loadu_pd(lanes->d2 + 4);
  l.sq0 = _mm256_loadu_pd(lanes->sq), l.sq1 = _mm256_loadu_pd(lanes->sq + 4);
  const __m256d s = _mm256_set1_pd(shift);
  const float* x = reinterpret_cast<const float*>(data);
  int64_t i = 0;
  for (; i + 8 <= n && l.AddFinite8(x + i, s); i += 8) {
  }
  _mm256_storeu_pd(lanes->min, l.min0), _mm256_storeu_pd(lanes->min + 4, l.min1);
  _mm256_storeu_pd(lanes->max, l.max0), _mm256_storeu_pd(lanes->max + 4, l.max1);
  _mm256_storeu_pd(lanes->d1, l.d10), _mm256_storeu_pd(lanes->d1 + 4, l.d11);
  _mm256_storeu_pd(lanes->d2, l.d20), _mm256_storeu_pd(lanes->d2 + 4, l.d21);
  _mm256_storeu_pd(lanes->sq, l.sq0), _mm256_storeu_pd(lanes->sq + 4, l.sq1);
  return i;
}

// One pass: counts, min/max, and sums shifted by the first finite value
// (var = (S2 - S1^2 / n) / n stays accurate when the mean is far from 0).
// Four independent lanes keep the adds pipelined (no -ffast-math needed).
struct StatsPass {
  static constexpr int kLanes = 4;
  int64_t finite = 0, nan = 0, inf = 0;
  double min = kInf, max = -kInf;
  double shift = 0, sum_d = 0, sum_d2 = 0, sum_sq = 0;

  void AddNonFinite(double x) { std::isnan(x) ? ++nan : ++inf; }

  template <typename Loader>
  void Run(const char* data, int64_t n) {
    int64_t i = 0;
    // Shift: the first finite value.
    for (; i < n; ++i) {
      const double x = Loader::Get(data, i);
      if (Loader::kMayBeNonFinite && !std::isfinite(x)) {
        AddNonFinite(x);
        continue;
      }
      shift = x;
      break;
    }
    // Four lanes; non-finite values (rare) take a branch and are counted.
    double lane_min[kLanes], lane_max[kLanes], d1[kLanes] = {}, d2[kLanes] = {}, sq[kLanes] = {};
    for (int k = 0; k < kLanes; ++k) lane_min[k] = shift, lane_max[k] = shift;
    int64_t skipped = 0;
    const int64_t start = i;
    auto add = [&](int k, double x) {
      if (Loader::kMayBeNonFinite && !(x - x == 0)) {  // NaN or inf.
        AddNonFinite(x);
        ++skipped;
        return;
      }
      lane_min[k] = x < lane_min[k] ? x : lane_min[k];
      lane_max[k] = x > lane_max[k] ? x : lane_max[k];
      const double d = x - shift;
      d1[k] += d;
      d2[k] += d * d;
      sq[k] += x * x;
    };
    if constexpr (std::is_same_v<Loader, Plain<float>>) {
      if (HaveAvx2()) {
        Float32Lanes fast;
        for (int k = 0; k < 8; ++k) {
          fast.min[k] = fast.max[k] = shift;
          fast.d1[k] = fast.d2[k] = fast.sq[k] = 0;
        }
        while (i + 8 <= n) {
          i += AccumulateFiniteFloat32Avx2(data + i * 4, n - i, shift, &fast);
          if (i + 8 > n) break;
          for (int k = 0; k < 8; ++k) add(k % kLanes, Loader::Get(data, i + k));  // Non-finite.
          i += 8;
        }
        for (int k = 0; k < 8; ++k) {
          lane_min[k % kLanes] = std::min(lane_min[k % kLanes], fast.min[k]);
          lane_max[k % kLanes] = std::max(lane_max[k % kLanes], fast.max[k]);
          d1[k % kLanes] += fast.d1[k];
          d2[k % kLanes] += fast.d2[k];
          sq[k % kLanes] += fast.sq[k];
        }
      }
    }
    for (; i + kLanes <= n; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) add(k, Loader::Get(data, i + k));
    }
    for (; i < n; ++i) add(0, Loader::Get(data, i));
    if (start == n) return;  // No finite value.
    finite += (n - start) - skipped;
    for (int k = 0; k < kLanes; ++k) {
      min = std::min(min, lane_min[k]);
      max = std::max(max, lane_max[k]);
      sum_d += d1[k];
      sum_d2 += d2[k];
      sum_sq += sq[k];
    }
  }
};

// The whole of StatsPass::Run<Plain<float>> on AVX2 for a tensor of finite
// values (the common case: small weights, gradients and activations, where the
// general loop's setup and lane bookkeeping cost more than the values), with
// its lanes in registers. It does the same operations in the same order, so
// the result is bit for bit that of the general path: the shift is element 0;
// blocks of 8 go into 8 lanes as in AccumulateFiniteFloat32Avx2; lanes k and
// k + 4 fold into lane k % 4 (std::min(a, b) is _mm256_min_pd(b, a), and
// std::max likewise); then groups of 4 into those 4 lanes, the rest into
// lane 0, and the lanes reduce in order 0..3. Returns false, having written
// nothing, when an element is NaN or inf: the general path handles that.
__attribute__((target("avx2"))) bool StatsOfFiniteFloat32Avx2(const char* data, int64_t n,
                                                              StatsPass* pass) {
  // Mapped columns sit at any byte offset: scalars are read with memcpy, blocks with loadu.
  const float* x = reinterpret_cast<const float*>(data);
  if (n <= 0) return false;
  const double shift = Plain<float>::Get(data, 0);
  if (!std::isfinite(shift)) return false;
  const __m256d s = _mm256_set1_pd(shift);
  const __m256d z = _mm256_setzero_pd();
  Avx2Lanes l{s, s, s, s, z, z, z, z, z, z};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {  // The loop of AccumulateFiniteFloat32Avx2.
    if (!l.AddFinite8(x + i, s)) return false;
  }
  // Fold into the general path's 4 lanes (min/max start at the shift, sums at 0).
  __m256d lane_min = _mm256_min_pd(l.min1, _mm256_min_pd(l.min0, s));
  __m256d lane_max = _mm256_max_pd(l.max1, _mm256_max_pd(l.max0, s));
  __m256d d1 = _mm256_add_pd(_mm256_add_pd(z, l.d10), l.d11);
  __m256d d2 = _mm256_add_pd(_mm256_add_pd(z, l.d20), l.d21);
  __m256d sq = _mm256_add_pd(_mm256_add_pd(z, l.sq0), l.sq1);
  if (i + 4 <= n) {  // One group of 4 at most (fewer than 8 are left).
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    if (_mm256_movemask_pd(_mm256_cmp_pd(_mm256_sub_pd(v, v), z, _CMP_EQ_OQ)) != 0xF) {
      return false;
    }
    lane_min = _mm256_min_pd(v, lane_min);  // x < lane ? x : lane.
    lane_max = _mm256_max_pd(v, lane_max);  // x > lane ? x : lane.
    const __m256d d = _mm256_sub_pd(v, s);
    d1 = _mm256_add_pd(d1, d);
    d2 = _mm256_add_pd(d2, _mm256_mul_pd(d, d));
    sq = _mm256_add_pd(sq, _mm256_mul_pd(v, v));
    i += 4;
  }
  alignas(32) double mins[4], maxs[4], d1s[4], d2s[4], sqs[4];
  _mm256_store_pd(mins, lane_min);
  _mm256_store_pd(maxs, lane_max);
  _mm256_store_pd(d1s, d1);
  _mm256_store_pd(d2s, d2);
  _mm256_store_pd(sqs, sq);
  for (; i < n; ++i) {  // The last 0-3 into lane 0.
    const double v = Plain<float>::Get(data, i);
    if (!(v - v == 0)) return false;
    mins[0] = v < mins[0] ? v : mins[0];
    maxs[0] = v > maxs[0] ? v : maxs[0];
    const double d = v - shift;
    d1s[0] += d;
    d2s[0] += d * d;
    sqs[0] += v * v;
  }
  pass->finite = n;
  pass->shift = shift;
  for (int k = 0; k < StatsPass::kLanes; ++k) {
    pass->min = std::min(pass->min, mins[k]);
    pass->max = std::max(pass->max, maxs[k]);
    pass->sum_d += d1s[k];
    pass->sum_d2 += d2s[k];
    pass->sum_sq += sqs[k];
  }
  return true;
}

struct MinMaxPass {
  int64_t finite = 0;
  double min = kInf, max = -kInf;

  template <typename Loader>
  void Run(const char* data, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double x = Loader::Get(data, i);
      if (Loader::kMayBeNonFinite && !std::isfinite(x)) continue;
      ++finite;
      min = std::min(min, x);
      max = std::max(max, x);
    }
  }
};

struct CountPass {
  double lo = 0, scale = 0;  // bin = floor((x - lo) * scale).
  double hi = 0;
  int bins = 1;
  double* counts = nullptr;

  template <typename Loader>
  void Run(const char* data, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double x = Loader::Get(data, i);
      if (Loader::kMayBeNonFinite && !std::isfinite(x)) continue;
      int64_t bin = static_cast<int64_t>((x - lo) * scale);
      bin = std::min<int64_t>(std::max<int64_t>(bin, 0), bins - 1);
      counts[bin] += 1;
    }
  }
};

// Log buckets of consecutive float32 values on AVX2, 8 at a time, counted into
// kLogBucketTables interleaved tables (lane j into table j % 4): the bucket
// of LogBucketPass::Float32Bucket, from the bits. Stops before the first block
// of 8 holding a NaN or inf and returns how many values it counted.
__attribute__((target("avx2"))) int64_t CountFloat32BucketsAvx2(const char* data, int64_t n,
                                                                uint64_t* tables) {
  static_assert(kLogBucketTables == 4, "lanes j and j + 4 share table j % 4");
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i largest_finite = _mm256_set1_epi32(0x7F7FFFFF);
  const __m256i zero_bound = _mm256_set1_epi32((127 + kLogBucketMinExponent) << 23);
  const __m256i first_offset =
      _mm256_set1_epi32((127 + kLogBucketMinExponent) * kLogBucketsPerOctave);
  const __m256i last_offset = _mm256_set1_epi32(kLogBucketsPerSign - 1);
  const __m256i zero_bucket = _mm256_set1_epi32(kLogBucketsPerSign);
  const __m256i positive_base = _mm256_set1_epi32(kLogBucketsPerSign + 1);
  const __m256i negative_base = _mm256_set1_epi32(kLogBucketsPerSign - 1);
  const __m256i table_base =
      _mm256_setr_epi32(0, kNumLogBuckets, 2 * kNumLogBuckets, 3 * kNumLogBuckets, 0,
                        kNumLogBuckets, 2 * kNumLogBuckets, 3 * kNumLogBuckets);
  alignas(32) int32_t index[8];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + 4 * i));
    const __m256i magnitude = _mm256_and_si256(bits, magnitude_mask);
    const __m256i non_finite = _mm256_cmpgt_epi32(magnitude, largest_finite);
    if (!_mm256_testz_si256(non_finite, non_finite)) break;
    // Exponent and top 2 mantissa bits, from the first bucket's, clamped to the last.
    const __m256i offset = _mm256_min_epi32(
        _mm256_sub_epi32(_mm256_srli_epi32(magnitude, 21), first_offset), last_offset);
    __m256i bucket =
        _mm256_blendv_epi8(_mm256_add_epi32(positive_base, offset),
                           _mm256_sub_epi32(negative_base, offset), _mm256_srai_epi32(bits, 31));
    bucket = _mm256_blendv_epi8(bucket, zero_bucket, _mm256_cmpgt_epi32(zero_bound, magnitude));
    _mm256_store_si256(reinterpret_cast<__m256i*>(index), _mm256_add_epi32(bucket, table_base));
    for (int j = 0; j < 8; ++j) ++tables[index[j]];
  }
  return i;
}

// Every k-th element of a tensor of more than `max_samples` (AccumulateLogBuckets).
int64_t SampleStride(const TensorView& view, int64_t max_samples) {
  const int64_t n = view.NumElements();
  if (max_samples <= 0 || n <= max_samples) return 1;
  int64_t stride = (n + max_samples - 1) / max_samples;
  const int64_t last = view.shape.empty() ? 1 : view.shape.back();
  while (std::gcd(stride, last) != 1) ++stride;
  return stride;
}

struct LogBucketPass {
  double* counts = nullptr;
  uint64_t* tables = nullptr;  // When set, counts into these instead.
  int64_t stride = 1;

  static int Bucket(double x) {
    constexpr double kZeroBound = 0x1p-40;
    static_assert(kLogBucketMinExponent == -40, "kZeroBound must be 2^kLogBucketMinExponent");
    static_assert(kLogBucketsPerOctave == 4, "the sub-bucket takes the top 2 mantissa bits");
    const double magnitude = std::fabs(x);
    if (magnitude < kZeroBound) return kLogBucketsPerSign;
    uint64_t bits;
    std::memcpy(&bits, &magnitude, sizeof(bits));
    const int exponent = static_cast<int>((bits >> 52) & 0x7FF) - 1023;
    const int sub = static_cast<int>((bits >> 50) & 3);
    const int offset = std::min((exponent - kLogBucketMinExponent) * kLogBucketsPerOctave + sub,
                                kLogBucketsPerSign - 1);
    return x > 0 ? kLogBucketsPerSign + 1 + offset : kLogBucketsPerSign - 1 - offset;
  }

  // The same bucket read from a float32's bits (exponent and top mantissa bits
  // are those of its double), without converting; -1 for NaN and inf.
  static int Float32Bucket(const char* data, int64_t i) {
    constexpr uint32_t kZeroBound = uint32_t{127 + kLogBucketMinExponent} << 23;  // 2^-40.
    constexpr int kFirstOffset = (127 + kLogBucketMinExponent) * kLogBucketsPerOctave;
    uint32_t bits;
    std::memcpy(&bits, data + 4 * i, 4);
    const uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude >= 0x7F800000u) return -1;
    if (magnitude < kZeroBound) return kLogBucketsPerSign;
    // Exponent and the top 2 mantissa bits: (e + 127) * 4 + sub.
    const int offset =
        std::min(static_cast<int>(magnitude >> 21) - kFirstOffset, kLogBucketsPerSign - 1);
    return (bits >> 31) == 0 ? kLogBucketsPerSign + 1 + offset : kLogBucketsPerSign - 1 - offset;
  }

  // Element i's bucket, -1 when it is not finite.
  template <typename Loader>
  static int BucketAt(const char* data, int64_t i) {
    if constexpr (std::is_same_v<Loader, Plain<float>>) {
      return Float32Bucket(data, i);
    } else {
      const double x = Loader::Get(data, i);
      if (Loader::kMayBeNonFinite && !std::isfinite(x)) return -1;
      return Bucket(x);
    }
  }

  // Counts the sampled finite values into kLogBucketTables interleaved tables:
  // neighbouring values often share a bucket, and separate tables keep the
  // increments independent (no store-to-load chain on one counter).
  template <typename Loader>
  void CountIntoTables(const char* data, int64_t n, uint64_t* out) const {
    constexpr int kTables = kLogBucketTables;
    const int64_t stride = this->stride;  // A local: `out` may alias the member.
    int64_t i = 0;
    if constexpr (std::is_same_v<Loader, Plain<float>>) {
      if (stride == 1 && HaveAvx2()) {
        // Blocks of 8 on AVX2; a block holding NaN or inf goes through the loop below.
        while (i + 8 <= n) {
          i += CountFloat32BucketsAvx2(data + 4 * i, n - i, out);
          if (i + 8 > n) break;
          for (int k = 0; k < 8; ++k) {
            const int b = BucketAt<Loader>(data, i + k);
            if (b >= 0) ++out[(k % kTables) * kNumLogBuckets + b];
          }
          i += 8;
        }
      }
    }
    for (; i + (kTables - 1) * stride < n; i += kTables * stride) {
      for (int t = 0; t < kTables; ++t) {
        const int b = BucketAt<Loader>(data, i + t * stride);
        if (b >= 0) ++out[t * kNumLogBuckets + b];
      }
    }
    for (; i < n; i += stride) {
      const int b = BucketAt<Loader>(data, i);
      if (b >= 0) ++out[b];
    }
  }

  template <typename Loader>
  void Run(const char* data, int64_t n) {
    if (tables != nullptr) {  // The caller's tables, cleared once for many tensors.
      CountIntoTables<Loader>(data, n, tables);
      return;
    }
    // A small tensor counts straight into `counts`: tables of its own would
    // cost clearing and summing 4 x kNumLogBuckets counters per call, more
    // than a few thousand values take.
    constexpr int64_t kTablesFrom = 4096;
    if (n / stride < kTablesFrom) {
      double* const counts = this->counts;
      const int64_t stride = this->stride;
      for (int64_t i = 0; i < n; i += stride) {
        const int b = BucketAt<Loader>(data, i);
        if (b >= 0) counts[b] += 1;
      }
      return;
    }
    std::vector<uint64_t> local(kLogBucketTables * kNumLogBuckets, 0);
    CountIntoTables<Loader>(data, n, local.data());
    AddLogBucketTables(local.data(), counts);
  }
};

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0x1F) {  // inf / NaN
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // Subnormal: mantissa * 2^-24, exact in float.
      const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
      return sign ? -magnitude : magnitude;
    }
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

// ComputeStats' output from a finished pass over `n` elements.
void WriteStats(const StatsPass& pass, int64_t n, double out[kStatsSize]) {
  out[kStatsCount] = static_cast<double>(std::max<int64_t>(n, 0));
  out[kStatsNanCount] = static_cast<double>(pass.nan);
  out[kStatsInfCount] = static_cast<double>(pass.inf);
  if (pass.finite == 0) {
    out[kStatsMin] = out[kStatsMax] = out[kStatsMean] = out[kStatsStd] = kNaN;
    out[kStatsL2] = 0;
    return;
  }
  const double count = static_cast<double>(pass.finite);
  out[kStatsMin] = pass.min;
  out[kStatsMax] = pass.max;
  out[kStatsMean] = pass.shift + pass.sum_d / count;
  const double variance = (pass.sum_d2 - pass.sum_d * pass.sum_d / count) / count;
  out[kStatsStd] = std::sqrt(std::max(variance, 0.0));
  out[kStatsL2] = std::sqrt(pass.sum_sq);
}

}  // namespace

void ComputeStats(const TensorView& view, double out[kStatsSize]) {
  const int64_t n = view.NumElements();
  StatsPass pass;
  if (view.dtype == DType::kFloat32 && HaveAvx2() &&
      StatsOfFiniteFloat32Avx2(static_cast<const char*>(view.data), n, &pass)) {
    WriteStats(pass, n, out);
    return;
  }
  Dispatch(view, n, pass);
  WriteStats(pass, n, out);
}

void ComputeStatsWithoutFastPath(const TensorView& view, double out[kStatsSize]) {
  const int64_t n = view.NumElements();
  StatsPass pass;
  Dispatch(view, n, pass);
  WriteStats(pass, n, out);
}

void ComputeHistogram(const TensorView& view, int bins, double* out) {
  double* edges = out + 2;
  double* counts = out + 2 + bins;
  std::fill(counts, counts + bins, 0.0);
  MinMaxPass range;
  Dispatch(view, view.NumElements(), range);
  if (range.finite == 0) {
    std::fill(out, out + 2 + bins, kNaN);
    return;
  }
  double lo = range.min, hi = range.max;
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  out[0] = lo;
  out[1] = hi;
  const double width = hi - lo;
  for (int k = 0; k < bins - 1; ++k) edges[k] = lo + width * (k + 1) / bins;
  edges[bins - 1] = hi;
  CountPass count;
  count.lo = lo;
  count.hi = hi;
  count.scale = bins / width;
  count.bins = bins;
  count.counts = counts;
  Dispatch(view, view.NumElements(), count);
}

void AccumulateLogBuckets(const TensorView& view, double* counts, int64_t max_samples) {
  LogBucketPass pass;
  pass.counts = counts;
  pass.stride = SampleStride(view, max_samples);
  Dispatch(view, view.NumElements(), pass);
}

void AccumulateLogBucketTables(const TensorView& view, uint64_t* tables, int64_t max_samples) {
  LogBucketPass pass;
  pass.tables = tables;
  pass.stride = SampleStride(view, max_samples);
  Dispatch(view, view.NumElements(), pass);
}

void AddLogBucketTables(const uint64_t* tables, double* counts) {
  for (int t = 0; t < kLogBucketTables; ++t) {
    for (int b = 0; b < kNumLogBuckets; ++b) {
      counts[b] += static_cast<double>(tables[t * kNumLogBuckets + b]);
    }
  }
}

std::vector<double> LogBucketEdges() {
  // Positive edges: the zero bound, then 2^e * (1 + k / kLogBucketsPerOctave).
  std::vector<double> positive;
  positive.reserve(kLogBucketsPerSign + 1);
  positive.push_back(std::ldexp(1.0, kLogBucketMinExponent));
  for (int e = kLogBucketMinExponent; e < kLogBucketMaxExponent; ++e) {
    for (int k = 1; k <= kLogBucketsPerOctave; ++k) {
      positive.push_back(std::ldexp(1.0 + static_cast<double>(k) / kLogBucketsPerOctave, e));
    }
  }
  std::vector<double> edges;
  edges.reserve(kNumLogBuckets + 1);
  for (auto it = positive.rbegin(); it != positive.rend(); ++it) edges.push_back(-*it);
  edges.insert(edges.end(), positive.begin(), positive.end());
  return edges;
}

absl::Status ComputeBuiltinSummary(const Summary& summary, const TensorView& view,
                                   std::vector<double>* values) {
  if (summary.builtin == BuiltinSummary::kDigest) {  // Any dtype: its bits.
    values->resize(kDigestSize);
    DigestToValues(ComputeDigest(view), values->data());
    return absl::OkStatus();
  }
  if (summary.builtin != BuiltinSummary::kNone && IsValidDType(static_cast<int32_t>(view.dtype)) &&
      GetDTypeInfo(view.dtype).kind == DTypeKind::kOpaque) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(view.dtype), " has no built-in summary"));
  }
  switch (summary.builtin) {
    case BuiltinSummary::kStats:
      values->resize(kStatsSize);
      ComputeStats(view, values->data());
      return absl::OkStatus();
    case BuiltinSummary::kHistogram:
      if (summary.histogram_bins < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("histogram_bins ", summary.histogram_bins, " must be >= 1"));
      }
      values->resize(HistogramSize(summary.histogram_bins));
      ComputeHistogram(view, summary.histogram_bins, values->data());
      return absl::OkStatus();
    case BuiltinSummary::kNone:
    case BuiltinSummary::kDigest:
      break;
  }
  return absl::InvalidArgumentError("no built-in summary selected");
}

}  // namespace internal
}  // namespace xdl_trace
