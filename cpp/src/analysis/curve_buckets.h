// The report's downsampled curves over gstep (xdl_trace.read.analysis.Series and HistogramSeries):
// rows of consecutive records share a bucket that keeps the sum, count, min and max of each field
// (or a distribution's summed counts and its min and max); when every bucket is full, neighbours
// merge pairwise and a bucket spans twice as many records.
#ifndef XDL_TRACE_ANALYSIS_CURVE_BUCKETS_H_
#define XDL_TRACE_ANALYSIS_CURVE_BUCKETS_H_

#include <cstddef>
#include <cstdint>

namespace xdl_trace {
namespace internal {

// One curve's buckets, in arrays its owner keeps (a Series' numpy arrays).
// Bucket b's field f is element b * width + f. Unused buckets hold sum 0,
// valid 0, min +inf and max -inf.
struct CurveBuckets {
  int64_t capacity = 0;  // Even, >= 2.
  int64_t width = 0;
  int64_t span = 1;  // Records per full bucket.
  int64_t used = 0;  // Buckets in use; the last one holds `fill` records.
  int64_t fill = 0;
  int64_t records = 0;       // Rows added so far.
  int64_t* gstep = nullptr;  // [capacity]: the first gstep of each bucket.
  double* sum = nullptr;     // [capacity * width], NaN values skipped.
  double* valid = nullptr;   // [capacity * width]: how many values were not NaN.
  double* min = nullptr;     // [capacity * width]
  double* max = nullptr;     // [capacity * width]
};

// Rows to add: row i's field f is at data + i * row_stride + f * field_stride
// (bytes, float64), its gstep gsteps[i] (ascending within the curve).
struct CurveRows {
  const int64_t* gsteps = nullptr;
  const char* data = nullptr;
  int64_t rows = 0;
  ptrdiff_t row_stride = 0;
  ptrdiff_t field_stride = 0;
  // A row whose field `skip_field` is NaN is no record of this curve (a
  // column that holds no value there) and is not added; -1: every row is.
  int skip_field = -1;
};

// Adds `rows` to `curve` in order, merging buckets pairwise whenever all
// `capacity` are full. One pass.
// Rows of 8 contiguous fields (a stats row) take a faster path on AVX2.
void AddCurveRows(const CurveRows& rows, CurveBuckets* curve);
// AddCurveRows without that path: the general loop it must match bit for bit
// (curve_buckets_test compares).
void AddCurveRowsWithoutFastPath(const CurveRows& rows, CurveBuckets* curve);

// A distribution's buckets over gstep (a HistogramSeries' numpy arrays): per
// bucket of consecutive histogram rows the summed log-bucket counts (float32:
// exact up to 2^24 per bucket, plenty for percentiles) and the min and max of
// the finite values. Bucket b's count c is element b * width + c. Unused
// buckets hold counts 0, min +inf and max -inf.
struct HistogramBuckets {
  int64_t capacity = 0;  // Even, >= 2.
  int64_t width = 0;     // Counts per row.
  int64_t span = 1;      // Records per full bucket.
  int64_t used = 0;      // Buckets in use; the last one holds `fill` records.
  int64_t fill = 0;
  int64_t* gstep = nullptr;  // [capacity]: the first gstep of each bucket.
  float* counts = nullptr;   // [capacity * width]
  double* min = nullptr;     // [capacity]
  double* max = nullptr;     // [capacity]
};

// Histogram rows to add: row i's counts are counts[i * width, (i + 1) * width),
// its gstep gsteps[i] (ascending within the distribution), the min and max of
// its finite values min[i], max[i] (NaN: none), and `records` [rows] how many
// consecutive records it sums (nullptr: 1 each).
struct HistogramRows {
  const int64_t* gsteps = nullptr;
  const double* counts = nullptr;
  const double* min = nullptr;
  const double* max = nullptr;
  const int64_t* records = nullptr;
  int64_t rows = 0;
};

// Adds `rows` to `histogram` in order, merging buckets pairwise whenever all
// `capacity` are full. Rows of one record each fill a bucket with `span` of
// them, their counts summed in float64 before they are added to the bucket's
// float32 ones; when a row sums several records, every row goes whole into one
// bucket, which is full once it holds `span` records or more (the first row
// sets `span` to at least its records).
void AddHistogramRows(const HistogramRows& rows, HistogramBuckets* histogram);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_CURVE_BUCKETS_H_
