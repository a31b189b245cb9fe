// Per-key facts of a chunk's stats grid for the report and find-nan: how many records hold a
// value, the largest element count, how many hold NaN or Inf, and whether every row is the same.
#ifndef XDL_TRACE_ANALYSIS_KEY_FACTS_H_
#define XDL_TRACE_ANALYSIS_KEY_FACTS_H_

#include <cstddef>
#include <vector>

namespace xdl_trace {
namespace internal {

struct KeyFacts {
  // Per key (size keys): records whose column holds a value (a non-NaN count).
  std::vector<double> records;
  std::vector<double> elements;  // The largest count among them (0: none).
  std::vector<double> bad;       // How many of them hold a NaN or an Inf.
  // Whether every such row equals the first one (NaN equal to NaN); true
  // when there is none.
  std::vector<bool> constant;
  std::vector<double> first;  // keys x kStatsSize: the first such row (NaN: none).
};

// Facts of `grid`: records x keys rows of kStatsSize (internal::StatsField
// order), NaN where a record's column holds no value (RecordScanChunk::stats).
KeyFacts ComputeKeyFacts(const double* grid, size_t records, size_t keys);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_KEY_FACTS_H_
