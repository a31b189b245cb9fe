// Tests of the report's curve and distribution downsampling (analysis/curve_buckets.h) against a
// direct reference.
#include "analysis/curve_buckets.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace xdl_trace {
namespace internal {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A curve's buckets in vectors, as a Series holds them.
struct Curve {
  std::vector<int64_t> gstep;
  std::vector<double> sum, valid, min, max;
  CurveBuckets buckets;

  Curve(int64_t capacity, int64_t width)
      : gstep(capacity),
        sum(capacity * width, 0.0),
        valid(capacity * width, 0.0),
        min(capacity * width, kInf),
        max(capacity * width, -kInf) {
    buckets.capacity = capacity;
    buckets.width = width;
    buckets.gstep = gstep.data();
    buckets.sum = sum.data();
    buckets.valid = valid.data();
    buckets.min = min.data();
    buckets.max = max.data();
  }
};

TEST_CASE("curve buckets hold exact aggregates of consecutive records", "[analysis]") {
  // 1000 records of 3 fields, some NaN, a few rows absent (field 0 NaN), added in uneven
  // pieces through a strided view (every other row of a 2000-row matrix).
  constexpr int64_t kRecords = 1000, kWidth = 3;
  std::vector<double> matrix(2 * kRecords * kWidth, -7.0);
  std::vector<int64_t> gsteps(2 * kRecords);
  std::vector<std::vector<double>> kept;  // The rows that count, in order.
  std::vector<int64_t> kept_gsteps;
  for (int64_t i = 0; i < kRecords; ++i) {
    double* row = &matrix[2 * i * kWidth];
    for (int64_t f = 0; f < kWidth; ++f) row[f] = std::sin(0.1 * i + f) * (f + 1);
    if (i % 17 == 3) row[1] = kNaN;
    if (i % 101 == 50) row[0] = kNaN;  // Absent: not a record of the curve.
    gsteps[2 * i] = 10 + 2 * i;
    if (!std::isnan(row[0])) {
      kept.emplace_back(row, row + kWidth);
      kept_gsteps.push_back(10 + 2 * i);
    }
  }
  Curve curve(16, kWidth);
  for (int64_t start = 0; start < kRecords; start += 37) {
    CurveRows rows;
    rows.data = reinterpret_cast<const char*>(&matrix[2 * start * kWidth]);
    rows.rows = std::min<int64_t>(37, kRecords - start);
    rows.row_stride = 2 * kWidth * sizeof(double);
    rows.field_stride = sizeof(double);
    rows.skip_field = 0;
    // gsteps are contiguous (one per row of the view).
    std::vector<int64_t> view_gsteps;
    for (int64_t i = 0; i < rows.rows; ++i) view_gsteps.push_back(gsteps[2 * (start + i)]);
    rows.gsteps = view_gsteps.data();
    AddCurveRows(rows, &curve.buckets);
  }
  const int64_t n = static_cast<int64_t>(kept.size());  // 990 records: buckets of 64.
  REQUIRE(curve.buckets.records == n);
  REQUIRE(curve.buckets.span == 64);
  REQUIRE(curve.buckets.used == (n + 63) / 64);
  REQUIRE(curve.buckets.fill == n - 64 * (curve.buckets.used - 1));
  for (int64_t b = 0; b < curve.buckets.used; ++b) {
    CHECK(curve.gstep[b] == kept_gsteps[64 * b]);
    for (int64_t f = 0; f < kWidth; ++f) {
      double sum = 0, valid = 0, low = kInf, high = -kInf;
      for (int64_t r = 64 * b; r < std::min(n, 64 * (b + 1)); ++r) {
        const double x = kept[r][f];
        if (std::isnan(x)) continue;
        sum += x, valid += 1, low = std::min(low, x), high = std::max(high, x);
      }
      CHECK(curve.sum[b * kWidth + f] == Approx(sum).margin(1e-12));
      CHECK(curve.valid[b * kWidth + f] == valid);
      CHECK(curve.min[b * kWidth + f] == low);
      CHECK(curve.max[b * kWidth + f] == high);
    }
  }
}

TEST_CASE("a curve of fewer records than buckets keeps one record per bucket", "[analysis]") {
  Curve curve(8, 1);
  const std::vector<double> values = {3, 1, kNaN, 2};
  const std::vector<int64_t> gsteps = {0, 5, 6, 9};
  CurveRows rows;
  rows.gsteps = gsteps.data();
  rows.data = reinterpret_cast<const char*>(values.data());
  rows.rows = 4;
  rows.row_stride = rows.field_stride = sizeof(double);
  AddCurveRows(rows, &curve.buckets);  // No skip_field: the NaN row is a record without value.
  CHECK(curve.buckets.used == 4);
  CHECK(curve.buckets.span == 1);
  CHECK(curve.gstep == std::vector<int64_t>{0, 5, 6, 9, 0, 0, 0, 0});
  CHECK(curve.valid[2] == 0);
  CHECK(curve.sum[3] == 2);
  CHECK(curve.min[4] == kInf);  // Unused buckets stay cleared.
}

TEST_CASE("stats rows take a fast path with the general loop's results bit for bit", "[analysis]") {
  // One key's rows of a [records, keys, 8] grid, as the report adds them: some rows absent
  // (field 0 NaN), some fields NaN, signed zeros (min/max keep one by operand order), added
  // in uneven pieces across bucket boundaries and many halvings, with and without skip_field.
  constexpr int64_t kRecords = 20000, kKeys = 3, kWidth = 8;
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(1.0, 5.0);
  std::uniform_int_distribution<int> kind(0, 19);
  std::vector<int64_t> gsteps(kRecords);
  for (int64_t i = 0; i < kRecords; ++i) gsteps[i] = 3 * i + 1;
  std::vector<double> grid(kRecords * kKeys * kWidth);
  for (int variant = 0; variant < 4; ++variant) {
    const int skip_field = variant % 2 == 0 ? 0 : -1;
    const bool zeros = variant >= 2;  // Only 0, -0 and 1 (-1 in odd fields): ties at +-0.
    for (size_t j = 0; j < grid.size(); ++j) {
      const int k = kind(rng);
      const double one = j % 2 == 0 ? 1.0 : -1.0;
      grid[j] = k == 0 ? kNaN : k <= 6 ? 0.0 : k <= 12 ? -0.0 : zeros ? one : normal(rng);
    }
    for (int64_t i = 0; i < kRecords; i += 7) grid[(i * kKeys + 1) * kWidth] = kNaN;  // Absent.
    Curve fast(32, kWidth), general(32, kWidth);
    int64_t start = 0, piece = 1;
    while (start < kRecords) {
      CurveRows rows;
      rows.gsteps = gsteps.data() + start;
      rows.data = reinterpret_cast<const char*>(&grid[(start * kKeys + 1) * kWidth]);
      rows.rows = std::min(piece, kRecords - start);
      rows.row_stride = kKeys * kWidth * sizeof(double);
      rows.field_stride = sizeof(double);
      rows.skip_field = skip_field;
      AddCurveRows(rows, &fast.buckets);
      AddCurveRowsWithoutFastPath(rows, &general.buckets);
      start += rows.rows;
      piece = piece * 3 % 1009 + 1;
    }
    INFO("variant " << variant);
    REQUIRE(fast.buckets.records == general.buckets.records);
    int64_t records = 0;  // Rows with a value in field 0, or all of them.
    for (int64_t i = 0; i < kRecords; ++i) {
      records += skip_field < 0 || !std::isnan(grid[(i * kKeys + 1) * kWidth]) ? 1 : 0;
    }
    CHECK(fast.buckets.records == records);
    CHECK(fast.buckets.span == general.buckets.span);
    CHECK(fast.buckets.span >= 512);  // Halved many times.
    CHECK(fast.buckets.used == general.buckets.used);
    CHECK(fast.buckets.fill == general.buckets.fill);
    CHECK(fast.gstep == general.gstep);
    const auto same_bits = [](const std::vector<double>& a, const std::vector<double>& b) {
      return a.size() == b.size() &&
             std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
    };
    CHECK(same_bits(fast.sum, general.sum));
    CHECK(same_bits(fast.valid, general.valid));
    CHECK(same_bits(fast.min, general.min));
    CHECK(same_bits(fast.max, general.max));
  }
}

// A distribution's buckets in vectors, as a HistogramSeries holds them.
struct Distribution {
  std::vector<int64_t> gstep;
  std::vector<float> counts;
  std::vector<double> min, max;
  HistogramBuckets buckets;

  Distribution(int64_t capacity, int64_t width)
      : gstep(capacity), counts(capacity * width, 0.0f), min(capacity, kInf), max(capacity, -kInf) {
    buckets.capacity = capacity;
    buckets.width = width;
    buckets.gstep = gstep.data();
    buckets.counts = counts.data();
    buckets.min = min.data();
    buckets.max = max.data();
  }
};

TEST_CASE("histogram buckets sum consecutive rows and merge pairwise when full", "[analysis]") {
  // 20 rows of one record each (counts {1, i}, values in [-i, i], row 5 without finite values),
  // added in pieces of 3 into 4 buckets: halved twice, each bucket spans 8 records.
  constexpr int64_t kRows = 20, kWidth = 2;
  std::vector<int64_t> gsteps(kRows);
  std::vector<double> counts(kRows * kWidth), low(kRows), high(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    gsteps[i] = 100 + i;
    counts[i * kWidth] = 1;
    counts[i * kWidth + 1] = static_cast<double>(i);
    low[i] = i == 5 ? kNaN : -static_cast<double>(i);
    high[i] = i == 5 ? kNaN : static_cast<double>(i);
  }
  Distribution d(4, kWidth);
  for (int64_t at = 0; at < kRows; at += 3) {
    HistogramRows rows;
    rows.gsteps = gsteps.data() + at;
    rows.counts = counts.data() + at * kWidth;
    rows.min = low.data() + at;
    rows.max = high.data() + at;
    rows.rows = std::min<int64_t>(3, kRows - at);
    AddHistogramRows(rows, &d.buckets);
  }
  REQUIRE(d.buckets.span == 8);
  REQUIRE(d.buckets.used == 3);  // 8 + 8 + 4 records.
  CHECK(d.buckets.fill == 4);
  CHECK(d.gstep == std::vector<int64_t>{100, 108, 116, 112});  // Bucket 3's is stale: unused.
  CHECK(d.counts == std::vector<float>{8, 28, 8, 92, 4, 70, 0, 0});
  CHECK(d.min == std::vector<double>{-7, -15, -19, kInf});
  CHECK(d.max == std::vector<double>{7, 15, 19, -kInf});
}

TEST_CASE("histogram rows of several records go whole into one bucket", "[analysis]") {
  // Rows of 4 records (the last of 2) into 2 buckets: the first row sets the span to 4; the
  // third and the fifth row find both buckets full, which merge (spans 8, then 16).
  const std::vector<int64_t> gsteps{0, 4, 8, 12, 16}, records{4, 4, 4, 4, 2};
  const std::vector<double> counts{4, 0, 3, 1, 2, 2, 1, 3, 0, 2};
  const std::vector<double> low{0, 1, kNaN, 3, 4}, high{10, 11, kNaN, 13, 14};
  Distribution d(2, 2);
  HistogramRows rows;
  rows.gsteps = gsteps.data();
  rows.counts = counts.data();
  rows.min = low.data();
  rows.max = high.data();
  rows.records = records.data();
  rows.rows = 5;
  AddHistogramRows(rows, &d.buckets);
  CHECK(d.buckets.span == 16);
  CHECK(d.buckets.used == 2);
  CHECK(d.buckets.fill == 2);
  CHECK(d.gstep == std::vector<int64_t>{0, 16});
  CHECK(d.counts == std::vector<float>{10, 6, 0, 2});
  CHECK(d.min == std::vector<double>{0, 4});
  CHECK(d.max == std::vector<double>{13, 14});
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
