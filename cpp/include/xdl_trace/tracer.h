// A tracing session: fixes the header, captures entries at each traced step, hands records to the
// IO thread.
#ifndef XDL_TRACE_TRACER_H_
#define XDL_TRACE_TRACER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/config.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/stats.h"

namespace xdl_trace {

namespace internal {
class TracerFactory;
}  // namespace internal

// Step errors caused by one entry (its callback failed, its gradient is
// missing, its tensor is invalid) carry that entry's full key as this payload
// (absl::Status::GetPayload), so callers can tell entries apart without
// parsing messages (the Python hook warns once per key).
inline constexpr char kEntryKeyPayload[] = "xdl_trace/entry_key";

// What a step wrote in place of an entry's value, for a caller that says so to
// its user: under TraceConfig::missing_gradient = kEmptyColumn, each gradient
// missing at the step has an empty column in the record and here the error
// kError would have returned (FailedPrecondition, kEntryKeyPayload and
// kMissingGradientPayload set), in column order.
struct StepNotes {
  std::vector<absl::Status> empty_columns;
};

// Threading: Step/Flush/Close are called from one thread at a time (the
// training thread); stats() from any thread. This is enforced, never a data
// race: a Step that finds another Step, Flush or Close of this tracer in
// progress on another thread returns FailedPrecondition and writes nothing
// (one uncontended try-lock per step); Flush and Close wait for a Step in
// progress. Serializing concurrent steps instead would hide a caller bug: two
// threads stepping one tracer race on the step numbers they pass.
//
// Fork: a tracer belongs to the process that started it. In a forked child
// (the IO thread does not exist there) Step, Flush and Close return
// FailedPrecondition naming the owning pid, stats() no longer reads the
// writer, and the destructor releases nothing the parent still uses (it
// leaks the writer and device tracing instead of joining threads that are not
// there). The parent goes on unaffected. The IO thread is owned by the tracer
// and joined by Close() (or the destructor).
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
  // buffer) and queues the record; under WriteMode::kInline, hands the IO
  // thread the tensors' memory itself and returns once the record is written
  // (docs/writer.md, "Write modes"). Either way the tensors are not read after
  // Step returns. Returns:
  //   - an entry's own error (callback failed, missing gradient, bad dtype or
  //     shape) naming the key; no record is queued for this step;
  //   - the sticky write error once the IO thread failed; the record is
  //     counted as dropped and the call never blocks (inline: the error of
  //     this record's own write, once the IO thread gave up on it);
  //   - FailedPrecondition after Close(), while another thread is inside
  //     Step/Flush/Close of this tracer, from inside this tracer's own Step
  //     (a callback or provider calling Step, Flush or Close of its tracer is
  //     refused, never left waiting for itself), or in a forked child.
  // Per entry: a view is read in place; a provider is called; a gradient is
  // taken from the registry's rendezvous (missing: see
  // TraceConfig::missing_gradient); a summary replaces the value; a
  // once-value is written in the first record this tracer queues and as an
  // empty float32 column of shape [0] afterwards. Keep-alives are released
  // before Step returns. A deferred capture (CapturedTensor::deferred, a
  // device copy in flight) is queued with its bytes to come: the IO thread
  // waits for them (xdl_trace/deferred.h), Step never does.
  // `notes`, when given, is cleared and then lists the columns written empty.
  absl::Status Step(int64_t gstep, int64_t lstep, StepNotes* notes = nullptr);
  // Same, with the timestamp (ms since epoch) given: for tests and replays.
  absl::Status StepAt(int64_t gstep, int64_t lstep, int64_t timestamp_ms,
                      StepNotes* notes = nullptr);
  // Notes a step the caller saw but does not trace (a filter skipped it): its
  // host span (STEP_NOT_TRACED, from the end of the previous step to now)
  // rides in the next record. One clock read; at most 4096 are kept between
  // two records (record/host_spans.h), the rest counted. No-op after Close().
  void NoteStepNotTraced(int64_t gstep, int64_t lstep);

  // Waits until every record queued so far is written and Meta is current.
  absl::Status Flush();
  // Flushes, writes final Meta (closed_cleanly), joins the IO thread.
  // Idempotent: later calls (and Flush) return the first call's status.
  absl::Status Close();
  // Any thread, meant for while Flush or Close wait (Ctrl-C): they stop waiting
  // for device copies and device tracers within 50 ms. Records whose device
  // copies are not complete are dropped (stats().deferred_failed and
  // last_deferred_error say so), a plugin still stopping is abandoned; every
  // other record is written and the final Meta too. For the rest of the
  // session: later fences are looked at once, not waited for.
  void AbandonWaits();

  // From the next Step on, the entry of full key `key` registered with a view
  // (memory read in place) reads `view` instead, kept alive by `keep_alive`:
  // its caller found the memory moved (a torch parameter given new storage,
  // `param.data = ...`), and the old memory no longer holds the values. The
  // view must have the entry's dtype and shape, which the Header declared
  // (InvalidArgument otherwise); nullopt makes the column empty (float32 [0])
  // from then on: the values went where no view reaches (another dtype, a
  // device). NotFound for a key without a view. One thread at a time, as Step
  // (FailedPrecondition while another thread is inside Step, Flush or Close).
  absl::Status Repoint(absl::string_view key, std::optional<TensorView> view,
                       std::shared_ptr<const void> keep_alive);

  const std::vector<std::string>& keys() const;
  const TraceConfig& config() const;
  TraceStats stats() const;

 private:
  friend class internal::TracerFactory;
  class Impl;  // The session's state and the step logic (tracer/tracer.cc).

  explicit Tracer(std::unique_ptr<Impl> impl);

  const std::unique_ptr<Impl> impl_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_TRACER_H_
