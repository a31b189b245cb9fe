// ComputeKeyFacts: one pass over a chunk's stats grid, per key.
#include "analysis/key_facts.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "summary/summary.h"

namespace xdl_trace {
namespace internal {
namespace {

// Equal, NaN included (a row's min/max/mean are NaN when it has no finite value).
bool SameRow(const double* a, const double* b) {
  for (int f = 0; f < kStatsSize; ++f) {
    if (!(a[f] == b[f] || (std::isnan(a[f]) && std::isnan(b[f])))) return false;
  }
  return true;
}

}  // namespace

KeyFacts ComputeKeyFacts(const double* grid, size_t records, size_t keys) {
  KeyFacts facts;
  facts.records.assign(keys, 0.0);
  facts.elements.assign(keys, 0.0);
  facts.bad.assign(keys, 0.0);
  facts.constant.assign(keys, true);
  facts.first.assign(keys * kStatsSize, std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < records; ++i) {
    for (size_t k = 0; k < keys; ++k) {
      const double* row = grid + (i * keys + k) * kStatsSize;
      if (std::isnan(row[kStatsCount])) continue;  // No value at this record.
      double* first = &facts.first[k * kStatsSize];
      if (facts.records[k] == 0) {
        std::copy(row, row + kStatsSize, first);
      } else if (facts.constant[k] && !SameRow(row, first)) {
        facts.constant[k] = false;
      }
      facts.records[k] += 1;
      facts.elements[k] = std::max(facts.elements[k], row[kStatsCount]);
      if (row[kStatsNanCount] > 0 || row[kStatsInfCount] > 0) facts.bad[k] += 1;
    }
  }
  return facts;
}

}  // namespace internal
}  // namespace xdl_trace
