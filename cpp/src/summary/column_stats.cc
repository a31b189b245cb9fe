// Splits a batch of tensors across threads for ComputeStats and AccumulateLogBuckets.
#include "summary/column_stats.h"

#include <algorithm>
#include <thread>

namespace xdl_trace {
namespace internal {
namespace {

constexpr int64_t kElementsPerThread = int64_t{4} << 20;

}  // namespace

void ComputeColumnStats(const std::vector<TensorView>& views, const std::vector<bool>& histogram,
                        double* stats, double* buckets, int max_threads) {
  const size_t n = views.size();
  std::vector<double*> bucket_rows(n, nullptr);
  int64_t total = 0;
  size_t flagged = 0;
  for (size_t i = 0; i < n; ++i) {
    total += std::max<int64_t>(views[i].NumElements(), 0);
    if (histogram[i]) bucket_rows[i] = buckets + (flagged++) * kNumLogBuckets;
  }
  std::fill(buckets, buckets + flagged * kNumLogBuckets, 0.0);
  auto work = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      ComputeStats(views[i], stats + i * kStatsSize);
      if (bucket_rows[i] != nullptr) {
        AccumulateLogBuckets(views[i], bucket_rows[i], kMaxHistogramSamples);
      }
    }
  };
  const int64_t wanted = std::max<int64_t>(1, total / kElementsPerThread);
  const int threads = static_cast<int>(std::min<int64_t>({wanted, max_threads, int64_t(n)}));
  if (threads <= 1) {
    work(0, n);
    return;
  }
  // Contiguous shares of about total / threads elements each.
  std::vector<size_t> bounds{0};
  int64_t seen = 0;
  for (size_t i = 0; i < n && static_cast<int>(bounds.size()) < threads; ++i) {
    seen += std::max<int64_t>(views[i].NumElements(), 0);
    if (seen * threads >= total * static_cast<int64_t>(bounds.size())) bounds.push_back(i + 1);
  }
  bounds.push_back(n);
  std::vector<std::thread> helpers;
  for (size_t t = 1; t + 1 < bounds.size(); ++t) {
    helpers.emplace_back(work, bounds[t], bounds[t + 1]);
  }
  work(bounds[0], bounds[1]);
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace internal
}  // namespace xdl_trace
