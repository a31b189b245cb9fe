// Tests of the element-wise comparison of xdl-trace diff (analysis/run_diff.h) and of the tensor
// digest (summary/digest.h): exactness, NaN bits, signed zeros, ULPs, tolerance, integers.
#include "analysis/run_diff.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "summary/digest.h"

namespace xdl_trace {
namespace internal {
namespace {

template <typename T>
ColumnView Column(const std::vector<T>& values, DType dtype) {
  ColumnView column;
  column.dtype = dtype;
  column.shape = {static_cast<int64_t>(values.size())};
  column.data =
      absl::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return column;
}

TEST_CASE("equal columns do not differ; one element found with its ULPs", "[run_diff]") {
  std::vector<float> a = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> b = a;
  DiffPoint point;
  CHECK_FALSE(DiffColumns(Column(a, DType::kFloat32), Column(b, DType::kFloat32), {}, &point));
  CHECK(point.elements == 4);
  b[2] = std::nextafter(std::nextafter(3.0f, 4.0f), 4.0f);  // Two ULPs up.
  REQUIRE(DiffColumns(Column(a, DType::kFloat32), Column(b, DType::kFloat32), {}, &point));
  CHECK(point.differing == 1);
  CHECK(point.first_index == 2);
  CHECK(point.max_ulp == 2);
  CHECK(point.max_abs == Approx(b[2] - 3.0f));
  CHECK(point.max_rel == Approx((b[2] - 3.0f) / 3.0f));
}

TEST_CASE("NaN agrees with the same NaN bits only; -0 and +0 differ exactly", "[run_diff]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint32_t other_bits = 0x7FC00001;  // Another quiet NaN payload.
  float other_nan;
  std::memcpy(&other_nan, &other_bits, 4);
  std::vector<float> a = {nan, 0.0f};
  std::vector<float> same = {nan, 0.0f};
  std::vector<float> b = {other_nan, -0.0f};
  DiffPoint point;
  CHECK_FALSE(DiffColumns(Column(a, DType::kFloat32), Column(same, DType::kFloat32), {}, &point));
  REQUIRE(DiffColumns(Column(a, DType::kFloat32), Column(b, DType::kFloat32), {}, &point));
  CHECK(point.differing == 2);
  CHECK(point.max_abs == 0);  // NaN vs NaN, and -0 vs +0: no magnitude.
  CHECK(point.max_ulp == 0);  // -0 and +0 sit at the same place; NaNs have none.
  DiffOptions tolerant;
  tolerant.atol = 1e-12;  // Any tolerance: any NaN agrees with any NaN, and -0 with +0.
  CHECK_FALSE(
      DiffColumns(Column(a, DType::kFloat32), Column(b, DType::kFloat32), tolerant, &point));
  std::vector<float> one_nan = {1.0f, 0.0f};
  REQUIRE(
      DiffColumns(Column(a, DType::kFloat32), Column(one_nan, DType::kFloat32), tolerant, &point));
  CHECK(std::isinf(point.max_abs));
}

TEST_CASE("tolerance is numpy.isclose with side A as the reference", "[run_diff]") {
  std::vector<double> a = {100.0, 1.0};
  std::vector<double> b = {100.5, 1.0};
  DiffOptions options;
  options.rtol = 0.01;  // |0.5| <= 0.01 * 100
  DiffPoint point;
  CHECK_FALSE(DiffColumns(Column(a, DType::kFloat64), Column(b, DType::kFloat64), options, &point));
  options.rtol = 0.004;
  CHECK(DiffColumns(Column(a, DType::kFloat64), Column(b, DType::kFloat64), options, &point));
  options.atol = 0.2;  // 0.5 <= 0.2 + 0.4
  CHECK_FALSE(DiffColumns(Column(a, DType::kFloat64), Column(b, DType::kFloat64), options, &point));
}

TEST_CASE("integers compare by value, no ULPs", "[run_diff]") {
  std::vector<int32_t> a = {-5, 7, 0};
  std::vector<int32_t> b = {-9, 7, 0};
  DiffPoint point;
  REQUIRE(DiffColumns(Column(a, DType::kInt32), Column(b, DType::kInt32), {}, &point));
  CHECK(point.max_abs == 4);
  CHECK(point.max_ulp == 0);
  CHECK(point.first_index == 0);
}

TEST_CASE("the digest sees one bit, a permutation, and is a sum of its elements", "[digest]") {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  const uint64_t d = DigestElements(x.data(), x.size(), 4);
  std::vector<float> y = x;
  uint32_t bits;
  std::memcpy(&bits, &y[500], 4);
  bits ^= 1;
  std::memcpy(&y[500], &bits, 4);
  CHECK(DigestElements(y.data(), y.size(), 4) != d);
  std::vector<float> swapped = x;
  std::swap(swapped[1], swapped[2]);
  CHECK(DigestElements(swapped.data(), swapped.size(), 4) != d);
  // The definition, element by element in any order.
  uint64_t sum = 0;
  for (size_t i = x.size(); i-- > 0;) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    sum += DigestMix(uint64_t{b} + (i + 1) * kDigestIndexStep);
  }
  CHECK(sum == d);
  double values[kDigestSize];
  DigestToValues(d, values);
  CHECK(DigestFromValues(values) == d);
  CHECK(values[0] == std::floor(values[0]));
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
