// Named host ranges (HostSpan RANGE): marks from any thread (a module's forward, its backward on
// autograd's thread, the optimizer step), held process-wide until a tracer's next record.
#ifndef XDL_TRACE_RECORD_HOST_RANGES_H_
#define XDL_TRACE_RECORD_HOST_RANGES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/mutex.h"
#include "record/host_spans.h"

namespace xdl_trace {
namespace internal {

// Ranges one record carries at most; the rest are counted (spans_dropped on the last kept).
inline constexpr size_t kMaxRangesPerRecord = 65536;

// The process's ranges waiting for a record. Ranges are process-wide (a model's modules
// belong to no tracer): while no tracer listens they are not kept; with several, the
// first to encode a record takes them. Names are interned once and never freed, so a
// span points at its strings.
//
// Threading: every method from any thread; Add takes one uncontended lock (the
// training thread and autograd's take turns).
class HostRanges {
 public:
  static HostRanges& Global();

  // The id of (name, category); the same pair gives the same id.
  int Intern(absl::string_view name, absl::string_view category) ABSL_LOCKS_EXCLUDED(mu_);
  // A range of `id` from `start_ns` to `end_ns` (CLOCK_REALTIME) on OS thread `thread_id`
  // (0: the calling thread). Not kept while no tracer listens or for an unknown id (false).
  bool Add(int id, int64_t start_ns, int64_t end_ns, int64_t thread_id = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Each tracer listens from its start to its close.
  void Listen() { listeners_.fetch_add(1, std::memory_order_relaxed); }
  void Unlisten() ABSL_LOCKS_EXCLUDED(mu_);
  // Appends the pending ranges to `out` with `gstep`/`lstep` (the record's) and forgets them.
  void TakeInto(int64_t gstep, int64_t lstep, std::vector<HostSpanInfo>* out)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Range {
    int id;
    int64_t start_ns, end_ns, thread_id;
  };
  std::atomic<int> listeners_{0};
  Mutex mu_;
  // (name, category) by id; a deque, so the strings never move.
  std::deque<std::pair<std::string, std::string>> names_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, int> ids_ ABSL_GUARDED_BY(mu_);  // category + '\0' + name.
  std::vector<Range> pending_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_HOST_RANGES_H_
