// A tracing session: fixes the header, captures entries at each traced step, hands records to the
// IO thread.
#ifndef XDL_TRACE_TRACER_H_
#define XDL_TRACE_TRACER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xdl_trace/config.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/stats.h"

namespace xdl_trace {

namespace internal {
class RecordExtras;
class TraceWriter;
class TracerFactory;
}  // namespace internal

// Threading: Step/Flush/Close are called from one thread at a time (the
// training thread); stats() from any thread. The IO thread is owned by the
// tracer and joined by Close() (or the destructor).
class Tracer {
 public:
  // Snapshots the entries of `scopes` from `registry` (header fixed here),
  // opens the first data file and starts the IO thread.
  static absl::StatusOr<std::unique_ptr<Tracer>> Start(const TraceConfig& config,
                                                       std::shared_ptr<Registry> registry,
                                                       std::vector<std::string> scopes = {""});

  ~Tracer();  // Close()s if needed; errors go to stats().last_error.
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Captures every entry (one copy of each tensor's bytes into the record
  // buffer) and queues the record. Returns:
  //   - an entry's own error (callback failed, missing gradient, bad dtype or
  //     shape) naming the key; no record is queued for this step;
  //   - the sticky write error once the IO thread failed; the record is
  //     counted as dropped and the call never blocks;
  //   - FailedPrecondition after Close().
  // Per entry: a view is read in place; a provider is called; a gradient is
  // taken from the registry's rendezvous (missing: see
  // TraceConfig::missing_gradient); a summary replaces the value; a
  // once-value is written in the first record this tracer queues and as an
  // empty float32 column of shape [0] afterwards. Keep-alives are released
  // before Step returns.
  absl::Status Step(int64_t gstep, int64_t lstep);
  // Same, with the timestamp (ms since epoch) given: for tests and replays.
  absl::Status StepAt(int64_t gstep, int64_t lstep, int64_t timestamp_ms);

  // Waits until every record queued so far is written and Meta is current.
  absl::Status Flush();
  // Flushes, writes final Meta (closed_cleanly), joins the IO thread.
  // Idempotent: later calls (and Flush) return the first call's status.
  absl::Status Close();

  const std::vector<std::string>& keys() const { return keys_; }
  const TraceConfig& config() const { return config_; }
  TraceStats stats() const;

 private:
  friend class internal::TracerFactory;
  struct Slot;  // Per-entry capture state, reused across steps.

  Tracer(TraceConfig config, std::shared_ptr<Registry> registry, std::vector<EntrySpec> entries,
         std::unique_ptr<internal::TraceWriter> writer,
         std::unique_ptr<internal::RecordExtras> extras);
  // Captures entry `i` into views_ (summary applied); errors name the key.
  absl::Status Capture(size_t i, int64_t gstep, int64_t* missing_gradients);
  // Releases this step's captured tensors (their keep-alives).
  void ReleaseCaptures();

  const TraceConfig config_;
  const std::shared_ptr<Registry> registry_;
  const std::vector<EntrySpec> entries_;
  std::vector<std::string> keys_;
  // kGradient entries: the first entry with the same gradient_name (itself if
  // none before it); that one takes the sent gradient, later ones share it.
  std::vector<size_t> gradient_taker_;
  // Training thread only:
  std::vector<Slot> slots_;        // One per entry.
  std::vector<TensorView> views_;  // This step's columns.
  int64_t last_gstep_ = 0;
  int64_t last_lstep_ = 0;
  bool closed_ = false;
  absl::Status close_status_;
  std::unique_ptr<internal::RecordExtras> extras_;  // Device tracing; may be null.
  std::unique_ptr<internal::TraceWriter> writer_;   // Thread-safe as documented.
  // Any thread (stats()):
  std::atomic<int64_t> steps_traced_{0};
  std::atomic<int64_t> missing_gradients_{0};
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_TRACER_H_
