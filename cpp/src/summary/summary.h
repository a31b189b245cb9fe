// Built-in summaries (stats, histogram) over a tensor in place.
#ifndef XDL_TRACE_SUMMARY_SUMMARY_H_
#define XDL_TRACE_SUMMARY_SUMMARY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace internal {

// The layout version of the kStats and kHistogram columns below, written to
// the Header's ColumnDescriptor.layout_version (docs/format.md, "Summary
// columns"). A change of either layout is a new version.
inline constexpr int kSummaryLayoutVersion = 1;

// Layout of the kStats column (float64[kStatsSize]).
enum StatsField {
  kStatsCount = 0,  // Elements, all of them.
  kStatsMin,        // min/max/mean/std/l2 are over finite values only; with
  kStatsMax,        // none, min/max/mean/std are NaN and l2 is 0.
  kStatsMean,
  kStatsStd,  // Population standard deviation (numpy's ddof=0).
  kStatsL2,   // sqrt(sum of squares).
  kStatsNanCount,
  kStatsInfCount,  // +inf and -inf.
  kStatsSize,
};

// Number of float64 values of a kHistogram column with `bins` bins:
// lo, hi (the bin range), `bins` right edges, then `bins` counts.
inline int HistogramSize(int bins) { return 2 + 2 * bins; }

// Both read `view` in place, element by element, converting to double
// (float16/bfloat16 included, bool as 0/1). `view` must be valid: a known
// dtype and non-null data when it has elements.
void ComputeStats(const TensorView& view, double out[kStatsSize]);
// ComputeStats without its fast path for float32 tensors of finite values:
// the general loop that path must match bit for bit (summary_test compares).
void ComputeStatsWithoutFastPath(const TensorView& view, double out[kStatsSize]);
// Equal-width bins over [lo, hi] = [min, max] of the finite values, as numpy's
// histogram (when min == max: [min - 0.5, max + 0.5]); the last bin includes
// hi; NaN and inf are not counted. No finite values: lo, hi and the edges are
// NaN and the counts 0. `out` holds HistogramSize(bins) values; bins >= 1.
void ComputeHistogram(const TensorView& view, int bins, double* out);

// Log-scale buckets shared by every tensor and step, so histograms of many
// steps (and ranks) add up without a first pass to fix edges (the report's
// histogram-over-steps view; TensorBoard's histograms use the same idea).
// |x| < 2^kLogBucketMinExponent falls in the zero bucket; each octave
// [2^e, 2^(e+1)) above it splits into kLogBucketsPerOctave equal parts (the top
// mantissa bits), up to 2^kLogBucketMaxExponent (larger values land in the
// outermost bucket). Buckets run from the most negative to the most positive:
// index kLogBucketsPerSign is the zero bucket. A bucket holds magnitudes in
// [edge, next edge) on the positive side, mirrored on the negative side.
inline constexpr int kLogBucketsPerOctave = 4;
inline constexpr int kLogBucketMinExponent = -40;
inline constexpr int kLogBucketMaxExponent = 40;
inline constexpr int kLogBucketsPerSign =
    (kLogBucketMaxExponent - kLogBucketMinExponent) * kLogBucketsPerOctave;
inline constexpr int kNumLogBuckets = 2 * kLogBucketsPerSign + 1;

// Adds the finite values of `view` to `counts` (kNumLogBuckets values, not
// cleared). NaN and inf are not counted. A tensor of more than `max_samples`
// elements is sampled: every k-th element, k the smallest stride that keeps
// the sample within `max_samples` and is coprime with the last dimension (so
// every column of a matrix is visited evenly).
void AccumulateLogBuckets(const TensorView& view, double* counts, int64_t max_samples);
// The same counts, into kLogBucketTables interleaved integer tables of
// kNumLogBuckets each (not cleared): for a caller that adds many small tensors
// into one histogram, clearing the tables once. AddLogBucketTables adds their
// sums to `counts`.
inline constexpr int kLogBucketTables = 4;
void AccumulateLogBucketTables(const TensorView& view, uint64_t* tables, int64_t max_samples);
void AddLogBucketTables(const uint64_t* tables, double* counts);
// The kNumLogBuckets + 1 bucket edges, ascending.
std::vector<double> LogBucketEdges();

// Runs the built-in summary of `summary` over `view` into `values` (resized;
// its capacity is reused across steps, so a steady-state step allocates
// nothing). InvalidArgument for kNone or bins < 1.
absl::Status ComputeBuiltinSummary(const Summary& summary, const TensorView& view,
                                   std::vector<double>* values);

// Converts one IEEE binary16 / bfloat16 value to float.
float HalfToFloat(uint16_t bits);
float BFloat16ToFloat(uint16_t bits);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_SUMMARY_SUMMARY_H_
