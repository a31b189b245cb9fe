// Stats and log-bucket histograms of many tensors in one call, split across threads (the kernel
// behind the report and find-nan).
#ifndef XDL_TRACE_SUMMARY_COLUMN_STATS_H_
#define XDL_TRACE_SUMMARY_COLUMN_STATS_H_

#include <cstdint>
#include <vector>

#include "summary/summary.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace internal {

// Tensors of more elements than this are sampled for their histogram (see
// AccumulateLogBuckets): the error of a sampled percentile is about 0.4% of the
// elements (its rank), below a bucket's width for a chart.
inline constexpr int64_t kMaxHistogramSamples = int64_t{1} << 14;

// For each view i: its stats into stats[i * kStatsSize ...], and when
// histogram[i], its log-bucket counts into the next row of `buckets`
// (kNumLogBuckets values per flagged view, in order; cleared here). Views are
// split by element count across up to `max_threads` threads when there is
// enough work (a few million elements per thread); the calling thread takes
// one share. The views must stay valid for the call.
void ComputeColumnStats(const std::vector<TensorView>& views, const std::vector<bool>& histogram,
                        double* stats, double* buckets, int max_threads);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_SUMMARY_COLUMN_STATS_H_
