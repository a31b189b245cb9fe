// HostRanges: the process-wide log of named host ranges (record/host_ranges.h).
#include "record/host_ranges.h"

#include "absl/strings/str_cat.h"

namespace xdl_trace {
namespace internal {
namespace {

// The calling thread's OS id, read once per thread (a forked child's copy of the
// forking thread keeps the parent's; a forked child writes nothing).
int64_t ThisThreadId() {
  thread_local const int64_t id = CurrentThreadId();
  return id;
}

}  // namespace

HostRanges& HostRanges::Global() {
  static HostRanges* const ranges = new HostRanges();  // Never destroyed: used at exit.
  return *ranges;
}

int HostRanges::Intern(absl::string_view name, absl::string_view category) {
  MutexLock lock(&mu_);
  auto [it, added] = ids_.try_emplace(absl::StrCat(category, absl::string_view("\0", 1), name),
                                      static_cast<int>(names_.size()));
  if (added) names_.emplace_back(std::string(name), std::string(category));
  return it->second;
}

bool HostRanges::Add(int id, int64_t start_ns, int64_t end_ns, int64_t thread_id) {
  if (listeners_.load(std::memory_order_relaxed) == 0) return false;
  const int64_t thread = thread_id != 0 ? thread_id : ThisThreadId();
  MutexLock lock(&mu_);
  if (id < 0 || static_cast<size_t>(id) >= names_.size()) return false;
  if (pending_.size() < kMaxRangesPerRecord) {
    pending_.push_back(Range{id, start_ns, end_ns, thread});
  } else {
    ++dropped_;
  }
  return true;
}

void HostRanges::Unlisten() {
  if (listeners_.fetch_sub(1, std::memory_order_relaxed) != 1) return;
  MutexLock lock(&mu_);  // The last tracer closed: what is pending has no record to ride.
  pending_.clear();
  dropped_ = 0;
}

void HostRanges::TakeInto(int64_t gstep, int64_t lstep, std::vector<HostSpanInfo>* out) {
  MutexLock lock(&mu_);
  for (const Range& range : pending_) {
    HostSpanInfo span;
    span.kind = HostSpanKind::kRange;
    span.start_ns = range.start_ns;
    span.end_ns = range.end_ns;
    span.gstep = gstep;
    span.lstep = lstep;
    span.thread_id = range.thread_id;
    span.name = &names_[range.id].first;
    span.category = &names_[range.id].second;
    out->push_back(span);
  }
  if (!pending_.empty()) out->back().spans_dropped += dropped_;
  pending_.clear();
  dropped_ = 0;
}

}  // namespace internal
}  // namespace xdl_trace
