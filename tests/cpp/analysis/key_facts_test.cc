// Tests of the per-key chunk facts (analysis/key_facts.h) the report's alerts use.
#include "analysis/key_facts.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "summary/summary.h"

namespace xdl_trace {
namespace internal {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A stats row: count, min, max, mean, std, l2, nan, inf.
std::vector<double> Row(double count, double value, double nan = 0, double inf = 0) {
  return {count, value, value, value, 0, std::fabs(value), nan, inf};
}

TEST_CASE("key facts count values, NaN/Inf records and constancy per key", "[analysis]") {
  // 4 records x 3 keys: key 0 constant (its min/max NaN: no finite value, NaN equal to NaN),
  // key 1 changing with a NaN at record 2, key 2 absent but at record 3.
  std::vector<double> none(kStatsSize, kNaN);
  std::vector<double> no_finite = {4, kNaN, kNaN, kNaN, kNaN, 0, 4, 0};
  std::vector<std::vector<double>> cells = {
      no_finite, Row(8, 1.0),       none,  //
      no_finite, Row(8, 2.0),       none,  //
      no_finite, Row(9, 3.0, 1),    none,  //
      no_finite, Row(8, 4.0, 0, 2), Row(1, 5.0),
  };
  std::vector<double> grid;
  for (const auto& cell : cells) grid.insert(grid.end(), cell.begin(), cell.end());
  const KeyFacts facts = ComputeKeyFacts(grid.data(), 4, 3);
  CHECK(facts.records == std::vector<double>{4, 4, 1});
  CHECK(facts.elements == std::vector<double>{4, 9, 1});
  CHECK(facts.bad == std::vector<double>{4, 2, 0});
  CHECK(facts.constant == std::vector<bool>{true, false, true});
  CHECK(facts.first[1 * kStatsSize + kStatsMean] == 1.0);
  CHECK(facts.first[2 * kStatsSize + kStatsMean] == 5.0);
  CHECK(std::isnan(facts.first[0 * kStatsSize + kStatsMin]));
}

TEST_CASE("key facts of an empty chunk", "[analysis]") {
  const KeyFacts facts = ComputeKeyFacts(nullptr, 0, 2);
  CHECK(facts.records == std::vector<double>{0, 0});
  CHECK(facts.constant == std::vector<bool>{true, true});
  CHECK(std::isnan(facts.first[0]));
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
