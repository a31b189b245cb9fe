// The report's kernels: log-bucket histograms (edges, placement, sampling) and batched stats
// split across threads.
#include "summary/column_stats.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "summary/summary.h"

namespace xdl_trace {
namespace internal {
namespace {

template <typename T>
TensorView ViewOf(const std::vector<T>& values, DType dtype, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  return TensorView{dtype, shape, values.data()};
}

// The bucket of x by search over the edges: [edge, next edge) for x >= 0, mirrored for x < 0
// (buckets hold magnitudes).
int BucketOf(const std::vector<double>& edges, double x) {
  if (x < 0) return kNumLogBuckets - 1 - BucketOf(edges, -x);
  for (int b = 0; b + 1 < static_cast<int>(edges.size()); ++b) {
    if (x >= edges[b] && x < edges[b + 1]) return b;
  }
  return x < edges.front() ? 0 : kNumLogBuckets - 1;
}

TEST_CASE("log bucket edges are ascending and symmetric around the zero bucket", "[analysis]") {
  const std::vector<double> edges = LogBucketEdges();
  REQUIRE(edges.size() == static_cast<size_t>(kNumLogBuckets + 1));
  for (size_t i = 1; i < edges.size(); ++i) REQUIRE(edges[i - 1] < edges[i]);
  for (size_t i = 0; i < edges.size(); ++i) REQUIRE(edges[i] == -edges[edges.size() - 1 - i]);
  CHECK(edges[kLogBucketsPerSign] == -std::ldexp(1.0, kLogBucketMinExponent));
  CHECK(edges[kLogBucketsPerSign + 1] == std::ldexp(1.0, kLogBucketMinExponent));
  CHECK(edges.back() == std::ldexp(1.0, kLogBucketMaxExponent));
}

TEST_CASE("each finite value lands in the bucket whose edges hold it", "[analysis]") {
  const std::vector<double> edges = LogBucketEdges();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {0.0,   1e-15, -1e-15, 1.0,  1.24,  1.25, -3.0,
                                      0.001, 7e5,   -2e-9,  1e30, -1e30, nan,  inf};
  std::vector<double> counts(kNumLogBuckets, 0.0);
  AccumulateLogBuckets(ViewOf(values, DType::kFloat64), counts.data(), 0);
  std::vector<double> expected(kNumLogBuckets, 0.0);
  for (double x : values) {
    if (std::isfinite(x)) expected[BucketOf(edges, x)] += 1;
  }
  CHECK(counts == expected);
  CHECK(counts[kLogBucketsPerSign] == 3);  // 0 and +-1e-15.
  CHECK(counts[kNumLogBuckets - 1] == 1);  // 1e30, beyond the last edge, is clamped.
  CHECK(counts[0] == 1);

  std::vector<int32_t> ints = {-5, 0, 3, 3};
  std::vector<double> int_counts(kNumLogBuckets, 0.0);
  AccumulateLogBuckets(ViewOf(ints, DType::kInt32), int_counts.data(), 0);
  CHECK(int_counts[BucketOf(edges, 3.0)] == 2);
  CHECK(int_counts[BucketOf(edges, -5.0)] == 1);
  CHECK(int_counts[kLogBucketsPerSign] == 1);
}

TEST_CASE("large tensors are sampled with a stride coprime with the last dimension", "[analysis]") {
  // A 1024 x 1024 matrix whose columns differ: column c holds c + 1.
  std::vector<float> matrix(1024 * 1024);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = static_cast<float>(i % 1024 + 1);
  std::vector<double> counts(kNumLogBuckets, 0.0);
  AccumulateLogBuckets(ViewOf(matrix, DType::kFloat32, {1024, 1024}), counts.data(), 1 << 16);
  const double sampled = std::accumulate(counts.begin(), counts.end(), 0.0);
  CHECK(sampled <= (1 << 16));
  CHECK(sampled > 0.9 * (1 << 16));
  // Every column value is reached: values 1..1024 cover buckets of 2^0 .. 2^10.
  const std::vector<double> edges = LogBucketEdges();
  for (double v : {1.0, 2.0, 3.0, 100.0, 513.0, 1024.0}) CHECK(counts[BucketOf(edges, v)] > 0);
}

TEST_CASE("float32 values land in the buckets of their float64 values", "[analysis]") {
  // The float32 path reads the bucket from the float's bits: every octave, both signs, the
  // zero bound, subnormals, the clamped ends, NaN and inf (not counted).
  std::vector<float> values;
  for (int e = -45; e <= 45; ++e) {
    for (float m : {1.0f, 1.2f, 1.25f, 1.49f, 1.5f, 1.74f, 1.75f, 1.99f}) {
      values.push_back(std::ldexp(m, e));
      values.push_back(-std::ldexp(m, e));
    }
  }
  values.insert(
      values.end(),
      {0.0f, -0.0f, 1e-45f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
       std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()});
  const std::vector<double> wide(values.begin(), values.end());
  std::vector<double> narrow_counts(kNumLogBuckets, 0.0), wide_counts(kNumLogBuckets, 0.0);
  AccumulateLogBuckets(ViewOf(values, DType::kFloat32), narrow_counts.data(), 0);
  AccumulateLogBuckets(ViewOf(wide, DType::kFloat64), wide_counts.data(), 0);
  CHECK(narrow_counts == wide_counts);
  CHECK(std::accumulate(narrow_counts.begin(), narrow_counts.end(), 0.0) == values.size() - 2);
}

TEST_CASE("counting many tensors into tables gives the direct counts", "[analysis]") {
  // Float32 tables are counted 8 values at a time on AVX2 (a block holding NaN or inf one by
  // one): the same counts as the direct loop, float64 too, whatever the values.
  std::vector<float> edge = {0.0f,
                             -0.0f,
                             1e-45f,
                             1e-30f,
                             std::ldexp(1.0f, -40),
                             -std::ldexp(1.0f, -40),
                             std::ldexp(1.99f, -41),
                             std::numeric_limits<float>::max(),
                             -std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::infinity(),
                             3e38f,
                             -1.25f,
                             1.5f,
                             7.0f};
  std::vector<double> direct(kNumLogBuckets, 0.0), summed(kNumLogBuckets, 0.0);
  std::vector<double> direct64(kNumLogBuckets, 0.0), summed64(kNumLogBuckets, 0.0);
  std::vector<uint64_t> tables(kLogBucketTables * kNumLogBuckets, 0);
  std::vector<uint64_t> tables64(kLogBucketTables * kNumLogBuckets, 0);
  size_t finite = 0;
  for (int t = 0; t < 50; ++t) {
    std::vector<float> v(67);  // Not a multiple of 8 nor of the 4 tables.
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(i * 0.37 + t) * t);
    if (t % 5 == 0) std::copy(edge.begin(), edge.end(), v.begin() + t % 40);
    for (float x : v) finite += std::isfinite(x) ? 1 : 0;
    const std::vector<double> wide(v.begin(), v.end());
    AccumulateLogBuckets(ViewOf(v, DType::kFloat32), direct.data(), 0);
    AccumulateLogBucketTables(ViewOf(v, DType::kFloat32), tables.data(), 0);
    AccumulateLogBuckets(ViewOf(wide, DType::kFloat64), direct64.data(), 0);
    AccumulateLogBucketTables(ViewOf(wide, DType::kFloat64), tables64.data(), 0);
  }
  AddLogBucketTables(tables.data(), summed.data());
  AddLogBucketTables(tables64.data(), summed64.data());
  CHECK(summed == direct);
  CHECK(summed64 == direct64);
  CHECK(summed == summed64);
  CHECK(std::accumulate(summed.begin(), summed.end(), 0.0) == finite);
}

TEST_CASE("batched stats are the same on one thread and on several", "[analysis]") {
  std::vector<std::vector<float>> data;
  for (int t = 0; t < 9; ++t) {
    std::vector<float> v(1 << 20);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(i * 0.001 + t));
    data.push_back(std::move(v));
  }
  std::vector<TensorView> views;
  for (const auto& v : data) views.push_back(ViewOf(v, DType::kFloat32));
  std::vector<bool> histogram = {true, false, true, false, false, true, false, false, true};
  std::vector<double> stats1(9 * kStatsSize), stats4(9 * kStatsSize);
  std::vector<double> buckets1(4 * kNumLogBuckets, -1.0), buckets4(4 * kNumLogBuckets, -1.0);
  ComputeColumnStats(views, histogram, stats1.data(), buckets1.data(), 1);
  ComputeColumnStats(views, histogram, stats4.data(), buckets4.data(), 4);
  CHECK(stats1 == stats4);
  CHECK(buckets1 == buckets4);
  for (int t = 0; t < 9; ++t) {
    std::vector<double> one(kStatsSize);
    ComputeStats(views[t], one.data());
    CHECK(std::vector<double>(stats1.begin() + t * kStatsSize,
                              stats1.begin() + (t + 1) * kStatsSize) == one);
  }
  // Row 2 of the buckets belongs to view 5 (the third flagged one).
  std::vector<double> row(kNumLogBuckets, 0.0);
  AccumulateLogBuckets(views[5], row.data(), kMaxHistogramSamples);
  CHECK(std::vector<double>(buckets1.begin() + 2 * kNumLogBuckets,
                            buckets1.begin() + 3 * kNumLogBuckets) == row);
}

TEST_CASE("float32 stats (vector path where the CPU has AVX2) match a long double reference",
          "[analysis]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int n : {3, 8, 13, 64, 1000, 100003}) {
    std::vector<float> values(n);
    for (int i = 0; i < n; ++i) values[i] = 1000.0f + std::sin(0.37f * i) * (i % 7);
    if (n > 50) {  // Non-finite values inside blocks, between finite blocks, and last.
      values[0] = nan;
      values[17] = inf;
      values[18] = -inf;
      values[n / 2] = nan;
      values[n - 1] = nan;
    }
    long double sum = 0, sq = 0;
    double min = std::numeric_limits<double>::infinity(), max = -min;
    int64_t finite = 0, nans = 0, infs = 0;
    for (float v : values) {
      if (std::isnan(v)) {
        ++nans;
      } else if (std::isinf(v)) {
        ++infs;
      } else {
        ++finite;
        sum += v;
        sq += static_cast<long double>(v) * v;
        min = std::min(min, static_cast<double>(v));
        max = std::max(max, static_cast<double>(v));
      }
    }
    const long double mean = sum / finite;
    long double var = 0;
    for (float v : values) {
      if (std::isfinite(v)) var += (v - mean) * (v - mean);
    }
    std::vector<double> out(kStatsSize);
    ComputeStats(ViewOf(values, DType::kFloat32), out.data());
    INFO("n = " << n);
    CHECK(out[kStatsCount] == n);
    CHECK(out[kStatsNanCount] == nans);
    CHECK(out[kStatsInfCount] == infs);
    CHECK(out[kStatsMin] == min);
    CHECK(out[kStatsMax] == max);
    CHECK(out[kStatsMean] == Approx(static_cast<double>(mean)).epsilon(1e-12));
    CHECK(out[kStatsStd] == Approx(static_cast<double>(std::sqrt(var / finite))).epsilon(1e-9));
    CHECK(out[kStatsL2] == Approx(static_cast<double>(std::sqrt(sq))).epsilon(1e-12));
  }
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
