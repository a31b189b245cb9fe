// Built-in summaries: stats and histogram over every dtype, non-finite values, edge cases.
#include "summary/summary.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace xdl_trace {
namespace internal {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
TensorView ViewOf(const std::vector<T>& values, DType dtype) {
  return TensorView{dtype, {static_cast<int64_t>(values.size())}, values.data()};
}

std::vector<double> Stats(const TensorView& view) {
  std::vector<double> out(kStatsSize);
  ComputeStats(view, out.data());
  return out;
}

// Reference: two passes in long double over the finite values.
std::vector<double> ReferenceStats(const std::vector<double>& values) {
  long double sum = 0, sq = 0;
  double min = kInf, max = -kInf;
  int64_t finite = 0, nan = 0, inf = 0;
  for (double x : values) {
    if (std::isnan(x)) {
      ++nan;
    } else if (std::isinf(x)) {
      ++inf;
    } else {
      ++finite;
      sum += x;
      sq += static_cast<long double>(x) * x;
      min = std::min(min, x);
      max = std::max(max, x);
    }
  }
  const long double mean = sum / finite;
  long double var = 0;
  for (double x : values) {
    if (std::isfinite(x)) var += (x - mean) * (x - mean);
  }
  var /= finite;
  return {static_cast<double>(values.size()),
          min,
          max,
          static_cast<double>(mean),
          static_cast<double>(std::sqrt(var)),
          static_cast<double>(std::sqrt(sq)),
          static_cast<double>(nan),
          static_cast<double>(inf)};
}

void CheckClose(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("field " << i);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else {
      CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-12));
    }
  }
}

template <typename T>
void CheckIntegerDtype(DType dtype) {
  std::vector<T> values;
  std::vector<double> as_double;
  const T lo = std::numeric_limits<T>::min();
  const T hi = std::numeric_limits<T>::max();
  for (int i = 0; i < 257; ++i) {
    const T offset = static_cast<T>(i % 100);
    const T x = (i % 3 == 0) ? static_cast<T>(lo + offset) : static_cast<T>(hi - offset);
    values.push_back(x);
    as_double.push_back(static_cast<double>(x));
  }
  INFO("dtype " << DTypeName(dtype));
  CheckClose(Stats(ViewOf(values, dtype)), ReferenceStats(as_double));
}

}  // namespace

TEST_CASE("stats match a reference for every integer dtype", "[summary]") {
  CheckIntegerDtype<int8_t>(DType::kInt8);
  CheckIntegerDtype<int16_t>(DType::kInt16);
  CheckIntegerDtype<int32_t>(DType::kInt32);
  CheckIntegerDtype<int64_t>(DType::kInt64);
  CheckIntegerDtype<uint8_t>(DType::kUInt8);
  CheckIntegerDtype<uint8_t>(DType::kByte);
  CheckIntegerDtype<uint16_t>(DType::kUInt16);
  CheckIntegerDtype<uint32_t>(DType::kUInt32);
  CheckIntegerDtype<uint64_t>(DType::kUInt64);
}

TEST_CASE("stats over floats count NaN and inf and skip them", "[summary]") {
  const std::vector<double> values = {1.5, -2, kNaN, 3.25, kInf, -kInf, 0, 1e3, kNaN};
  CheckClose(Stats(ViewOf(values, DType::kFloat64)), ReferenceStats(values));
  std::vector<float> floats(values.begin(), values.end());
  const std::vector<double> stats = Stats(ViewOf(floats, DType::kFloat32));
  CheckClose(stats, ReferenceStats(values));
  CHECK(stats[kStatsCount] == 9);
  CHECK(stats[kStatsNanCount] == 2);
  CHECK(stats[kStatsInfCount] == 2);
  CHECK(stats[kStatsMin] == -2);
  CHECK(stats[kStatsMax] == 1000);
}

TEST_CASE("stats of bool count true as 1", "[summary]") {
  const std::vector<uint8_t> flags = {1, 0, 1, 1};
  const std::vector<double> stats = Stats(ViewOf(flags, DType::kBool));
  CHECK(stats[kStatsMean] == 0.75);
  CHECK(stats[kStatsMax] == 1);
  CHECK(stats[kStatsL2] == Approx(std::sqrt(3.0)));
}

TEST_CASE("half precision converts exactly", "[summary]") {
  CHECK(HalfToFloat(0x3C00) == 1.0f);
  CHECK(HalfToFloat(0xC000) == -2.0f);
  CHECK(HalfToFloat(0x7BFF) == 65504.0f);
  CHECK(HalfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(HalfToFloat(0x83FF) == -std::ldexp(1023.0f, -24));
  CHECK(HalfToFloat(0x3555) == Approx(0.333251953125));
  CHECK(std::isinf(HalfToFloat(0x7C00)));
  CHECK(HalfToFloat(0xFC00) < 0);
  CHECK(std::isnan(HalfToFloat(0x7E00)));
  CHECK(std::signbit(HalfToFloat(0x8000)));
  CHECK(BFloat16ToFloat(0x3F80) == 1.0f);
  CHECK(BFloat16ToFloat(0xC0A0) == -5.0f);
  CHECK(std::isnan(BFloat16ToFloat(0x7FC0)));

  const std::vector<uint16_t> halves = {0x3C00, 0xC000, 0x7E00, 0x7C00, 0x3800};  // 1 -2 nan inf .5
  CheckClose(Stats(ViewOf(halves, DType::kFloat16)), ReferenceStats({1, -2, kNaN, kInf, 0.5}));
  const std::vector<uint16_t> bf = {0x3F80, 0xC0A0, 0x7FC0};  // 1 -5 nan
  CheckClose(Stats(ViewOf(bf, DType::kBFloat16)), ReferenceStats({1, -5, kNaN}));
}

TEST_CASE("stats of empty and all-NaN tensors", "[summary]") {
  const TensorView empty{DType::kFloat32, {0, 4}, nullptr};
  std::vector<double> stats = Stats(empty);
  CHECK(stats[kStatsCount] == 0);
  CHECK(std::isnan(stats[kStatsMin]));
  CHECK(std::isnan(stats[kStatsMean]));
  CHECK(stats[kStatsL2] == 0);
  const std::vector<float> nans = {NAN, NAN};
  stats = Stats(ViewOf(nans, DType::kFloat32));
  CHECK(stats[kStatsCount] == 2);
  CHECK(stats[kStatsNanCount] == 2);
  CHECK(std::isnan(stats[kStatsStd]));
}

TEST_CASE("std stays accurate far from zero", "[summary]") {
  std::vector<double> values;
  for (int i = 0; i < 10000; ++i) values.push_back(1e9 + (i % 2 == 0 ? 0.5 : -0.5));
  const std::vector<double> stats = Stats(ViewOf(values, DType::kFloat64));
  CHECK(stats[kStatsStd] == Approx(0.5).epsilon(1e-9));
  CHECK(stats[kStatsMean] == Approx(1e9).epsilon(1e-15));
}

TEST_CASE("scalar stats", "[summary]") {
  const int32_t value = -7;
  const std::vector<double> stats = Stats(TensorView{DType::kInt32, {}, &value});
  CheckClose(stats, {1, -7, -7, -7, 0, 7, 0, 0});
}

TEST_CASE("the float32 fast path matches the general loop bit for bit", "[summary]") {
  // Lengths around the 8-wide blocks and 4-wide groups, views at every float offset,
  // and values that test the order of operations: far from 0 (the shift), -0 and +0
  // (min/max pick by operand order), denormals, huge magnitudes; some tensors hold a
  // NaN or inf (the fast path gives them back to the general loop).
  std::mt19937 rng(20261124);
  std::normal_distribution<float> normal(0.25f, 3.0f);
  std::uniform_int_distribution<int> kind(0, 15);
  const float specials[] = {0.0f,  -0.0f,  std::numeric_limits<float>::denorm_min(), -1e-40f,
                            3e38f, -3e38f, std::numeric_limits<float>::min(),        1e7f};
  const float zeros_low[] = {0.0f, -0.0f, 1.0f, 2.5f};
  std::vector<float> buffer(4096 + 8);
  int fast = 0, general = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t n =
        trial < 3000 ? 1 + trial % 75 : std::uniform_int_distribution<int>(1, 4096)(rng);
    const int64_t offset = trial % 3;
    const float far = trial % 5 == 0 ? 1e6f : 0.0f;
    float* values = buffer.data() + offset;
    for (int64_t i = 0; i < n; ++i) {
      const int k = kind(rng);
      values[i] = k < 12 ? far + normal(rng) : specials[(k + i) % 8];
      // Signed zeros as the min (or max): which one is kept depends on the comparisons' order.
      if (trial % 4 == 1) values[i] = zeros_low[k % 4];
      if (trial % 4 == 2) values[i] = -zeros_low[k % 4];
    }
    if (trial % 7 == 0) {  // A NaN or inf somewhere.
      const float bad[] = {NAN, INFINITY, -INFINITY};
      values[std::uniform_int_distribution<int64_t>(0, n - 1)(rng)] = bad[trial % 3];
    }
    const TensorView view{DType::kFloat32, {n}, values};
    std::vector<double> got(kStatsSize), want(kStatsSize);
    ComputeStats(view, got.data());
    ComputeStatsWithoutFastPath(view, want.data());
    INFO("trial " << trial << ", " << n << " elements at offset " << offset);
    for (int f = 0; f < kStatsSize; ++f) {
      INFO("field " << f << ": " << got[f] << " vs " << want[f]);
      CHECK(std::memcmp(&got[f], &want[f], sizeof(double)) == 0);
    }
    (got[kStatsNanCount] + got[kStatsInfCount] == 0 ? fast : general) += 1;
  }
  CHECK(fast > 3000);  // Both paths were exercised.
  CHECK(general > 400);
}

TEST_CASE("histogram bins like numpy", "[summary]") {
  // numpy.histogram([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, nan, inf], bins=5):
  // counts [2 2 2 2 3], edges [0 2 4 6 8 10].
  std::vector<float> values;
  for (int i = 0; i <= 10; ++i) values.push_back(static_cast<float>(i));
  values.push_back(NAN);
  values.push_back(INFINITY);
  std::vector<double> out(HistogramSize(5));
  ComputeHistogram(ViewOf(values, DType::kFloat32), 5, out.data());
  CHECK(out == std::vector<double>{0, 10, 2, 4, 6, 8, 10, 2, 2, 2, 2, 3});

  // Integer input, one bin.
  const std::vector<int64_t> ints = {-3, 4, 4};
  out.resize(HistogramSize(1));
  ComputeHistogram(ViewOf(ints, DType::kInt64), 1, out.data());
  CHECK(out == std::vector<double>{-3, 4, 4, 3});
}

TEST_CASE("histogram of constant, empty and non-finite tensors", "[summary]") {
  const std::vector<double> same = {2, 2, 2};
  std::vector<double> out(HistogramSize(2));
  ComputeHistogram(ViewOf(same, DType::kFloat64), 2, out.data());
  CHECK(out == std::vector<double>{1.5, 2.5, 2, 2.5, 0, 3});  // numpy: range +-0.5.

  const std::vector<double> bad = {kNaN, kInf};
  ComputeHistogram(ViewOf(bad, DType::kFloat64), 2, out.data());
  for (int i = 0; i < 4; ++i) CHECK(std::isnan(out[i]));
  CHECK(out[4] == 0);
  CHECK(out[5] == 0);
  ComputeHistogram(TensorView{DType::kFloat16, {0}, nullptr}, 2, out.data());
  CHECK(out[4] + out[5] == 0);
}

TEST_CASE("ComputeBuiltinSummary runs the selected builtin", "[summary]") {
  const std::vector<float> values = {1, 2, 3, 4};
  const TensorView view = ViewOf(values, DType::kFloat32);
  std::vector<double> out;
  Summary stats;
  stats.builtin = BuiltinSummary::kStats;
  REQUIRE(ComputeBuiltinSummary(stats, view, &out).ok());
  REQUIRE(out.size() == kStatsSize);
  CHECK(out[kStatsMean] == 2.5);

  Summary histogram;
  histogram.builtin = BuiltinSummary::kHistogram;
  histogram.histogram_bins = 3;
  REQUIRE(ComputeBuiltinSummary(histogram, view, &out).ok());
  CHECK(out.size() == static_cast<size_t>(HistogramSize(3)));

  CHECK(ComputeBuiltinSummary(Summary{}, view, &out).code() == absl::StatusCode::kInvalidArgument);
  histogram.histogram_bins = 0;
  CHECK(ComputeBuiltinSummary(histogram, view, &out).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("builtin summaries reuse the output buffer", "[summary]") {
  std::vector<float> values(1000, 1.0f);
  Summary histogram;
  histogram.builtin = BuiltinSummary::kHistogram;
  histogram.histogram_bins = 30;
  std::vector<double> out;
  REQUIRE(ComputeBuiltinSummary(histogram, ViewOf(values, DType::kFloat32), &out).ok());
  const double* first = out.data();
  for (int i = 0; i < 10; ++i) {
    values[i] = static_cast<float>(i);
    REQUIRE(ComputeBuiltinSummary(histogram, ViewOf(values, DType::kFloat32), &out).ok());
  }
  CHECK(out.data() == first);
  CHECK(out.size() == 62u);
}

}  // namespace internal
}  // namespace xdl_trace
