// The tracer: fixes the header at Start, captures and encodes entries each step, submits records.
#include "xdl_trace/tracer.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/clock.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "io/run_info.h"
#include "io/trace_writer.h"
#include "record/host_ranges.h"
#include "record/host_spans.h"
#include "record/record_encoder.h"
#include "record/record_extras.h"
#include "registry/validate.h"
#include "summary/column_descriptor.h"
#include "summary/digest.h"
#include "summary/summary.h"
#include "tracer/tracer_internal.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace {

// The column XDL writes for a once-value after its first record, and this
// tracer for a missing gradient under kEmptyColumn.
TensorView EmptyFloatColumn() { return TensorView{DType::kFloat32, {0}, nullptr}; }

// Bumped in every forked child (pthread_atfork), so a tracer compares one
// relaxed atomic per call instead of calling getpid().
std::atomic<int64_t> fork_generation{0};

void BumpForkGeneration() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

// The current fork generation, with the atfork handler installed once per process.
int64_t CurrentForkGeneration() {
  static std::once_flag installed;
  std::call_once(installed, [] { pthread_atfork(nullptr, nullptr, &BumpForkGeneration); });
  return fork_generation.load(std::memory_order_relaxed);
}

// `status` with its message prefixed by the entry's kind and key.
absl::Status NameEntry(const EntrySpec& entry, const std::string& key, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(internal::EntryKindName(entry.kind), " '", key,
                                                  "': ", status.message()));
}

}  // namespace

namespace internal {

absl::StatusOr<std::unique_ptr<Tracer>> TracerFactory::Start(const TraceConfig& config,
                                                             std::shared_ptr<Registry> registry,
                                                             std::vector<std::string> scopes,
                                                             TracerOptions options) {
  XDL_RETURN_IF_ERROR(config.Validate());
  if (registry == nullptr) return absl::InvalidArgumentError("Tracer::Start: null registry");
  TraceConfig fixed = config;
  FillRunInfoDefaults(&fixed.run);
  std::vector<EntrySpec> entries = registry->Snapshot(scopes);
  std::vector<std::string> keys;
  keys.reserve(entries.size());
  for (const EntrySpec& entry : entries) keys.push_back(entry.FullKey());

  std::unique_ptr<RecordExtras> extras = std::move(options.extras);
  if (extras == nullptr && !fixed.device_tracers.empty()) {
    XDL_ASSIGN_OR_RETURN(extras, MakeDeviceRecordExtras(fixed));
  } else if (extras == nullptr) {
    extras = std::make_unique<HostSpanRecorder>();
  }
  XDL_ASSIGN_OR_RETURN(
      std::unique_ptr<TraceWriter> writer,
      TraceWriter::Open(fixed, keys, std::move(options.writer_hooks), DescribeColumns(entries)));
  fixed.run_id = writer->run_id();  // Named by the writer when the config left it empty.
  return std::unique_ptr<Tracer>(new Tracer(
      std::make_unique<Tracer::Impl>(std::move(fixed), std::move(registry), std::move(entries),
                                     std::move(writer), std::move(extras))));
}

}  // namespace internal

// The session behind a Tracer. Threading as documented on Tracer: step_mu_
// guards the step state and the extras (held by Step, Flush, Close and
// NoteStepNotTraced); the atomics are read by stats() from any thread; the
// writer is thread-safe as documented.
class Tracer::Impl {
 public:
  Impl(TraceConfig config, std::shared_ptr<Registry> registry, std::vector<EntrySpec> entries,
       std::unique_ptr<internal::TraceWriter> writer,
       std::unique_ptr<internal::RecordExtras> extras);
  ~Impl();

  absl::Status StepAt(int64_t gstep, int64_t lstep, int64_t timestamp_ms, StepNotes* notes);
  void NoteStepNotTraced(int64_t gstep, int64_t lstep);
  absl::Status Flush();
  absl::Status Close();
  absl::Status Repoint(absl::string_view key, std::optional<TensorView> view,
                       std::shared_ptr<const void> keep_alive);
  // extras_ is set at construction and released only by ~Impl; its
  // AbandonWaits, like the writer's, is for any thread (no step_mu_: Close
  // holds it while it waits).
  void AbandonWaits() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    writer_->AbandonWaits();
    extras_->AbandonWaits();
  }
  TraceStats stats() const;

  const TraceConfig& config() const { return config_; }
  // Whether the calling thread is inside Step of this tracer (a callback or
  // provider calling back into it), and the error refusing `call` there.
  bool InsideOwnStep() const;
  absl::Status ReentryError(absl::string_view call) const;
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  // Per-entry state, touched only by the training thread.
  struct Slot {
    CapturedTensor captured;      // This step's value; released after encoding.
    std::vector<double> builtin;  // Built-in summary output (capacity reused).
    Tensor user_summary;          // SummaryFn output of this step.
    bool once_done = false;       // kOnce: its value is in a queued record.
    bool has_gradient = false;    // kGradient: `captured` holds this step's gradient.
    // A view entry whose memory moved (Repoint): read `view` instead of the
    // entry's, kept alive by `view_keep_alive`.
    bool repointed = false;
    TensorView view;
    std::shared_ptr<const void> view_keep_alive;
  };

  // Captures entry `i` into views_ and deferred_ (summary applied); errors
  // name the key. A missing gradient counts in `missing_gradients` and, under
  // kEmptyColumn, is an empty column with its error in `notes` (if any).
  absl::Status Capture(size_t i, int64_t gstep, int64_t* missing_gradients, StepNotes* notes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // Capture of a value whose bytes arrive later (CapturedTensor::deferred).
  absl::Status CaptureDeferred(size_t i, const CapturedTensor& captured)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // InvalidArgument unless `view` has the shape of the entry's built-in summary.
  absl::Status CheckSummaryShape(const EntrySpec& entry, const std::string& key,
                                 const TensorView& view) const;
  // Releases this step's captured tensors (their keep-alives).
  void ReleaseCaptures() ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // StepAt with step_mu_ held.
  absl::Status StepLocked(int64_t gstep, int64_t lstep, int64_t timestamp_ms, StepNotes* notes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // True in a process forked from the one that started this tracer.
  bool InForkedChild() const {
    return fork_generation.load(std::memory_order_relaxed) != fork_generation_;
  }
  // The error every call but stats() returns in a forked child.
  absl::Status ForkedChildError(absl::string_view call) const;
  // Appends the spans other threads gathered since the previous record to
  // `fields` (Record field 6): the IO thread's writes, then the process's named
  // ranges (record/host_ranges.h) with the record's gstep/lstep.
  void AppendIoSpans(int64_t gstep, int64_t lstep, std::string* fields)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // The extras for stats(): FillStats is the one method any thread may call
  // (record/record_extras.h).
  const internal::RecordExtras& StatsExtras() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return *extras_;
  }

  // Inline write mode: column data of at least this many bytes is written
  // from the tensor's memory; smaller columns are copied into the framing
  // buffer (an iovec costs more than copying a few KiB).
  static constexpr size_t kInlineReferenceMinBytes = 4096;

  const TraceConfig config_;
  // config_.write_mode resolved to kInline: Step writes through (see StepLocked).
  const bool inline_write_;
  const std::shared_ptr<Registry> registry_;
  const std::vector<EntrySpec> entries_;
  std::vector<std::string> keys_;
  // kGradient entries: the first entry with the same gradient_name (itself if
  // none before it); that one takes the sent gradient, later ones share it.
  std::vector<size_t> gradient_taker_;
  const pid_t owner_pid_ = getpid();                         // The process that started it.
  const int64_t fork_generation_ = CurrentForkGeneration();  // Its fork generation.
  // Held by Step (try-lock: a concurrent Step is refused), Flush and Close
  // (they wait), so one thread at a time uses everything below.
  internal::Mutex step_mu_;
  // The thread inside Step (default id: none). A callback or provider that
  // calls Step, Flush or Close of this tracer runs on it while step_mu_ is
  // held: refused, where waiting for step_mu_ would wait forever.
  std::atomic<std::thread::id> stepping_thread_{};
  std::vector<Slot> slots_ ABSL_GUARDED_BY(step_mu_);        // One per entry.
  std::vector<TensorView> views_ ABSL_GUARDED_BY(step_mu_);  // This step's columns.
  // Per column up to the last deferred one: where its bytes will be when
  // deferred, else empty (EncodeOptions::deferred); empty when none is.
  std::vector<internal::DeferredSource> deferred_ ABSL_GUARDED_BY(step_mu_);
  int64_t last_gstep_ ABSL_GUARDED_BY(step_mu_) = 0;
  int64_t last_lstep_ ABSL_GUARDED_BY(step_mu_) = 0;
  // The IO spans of a record (capacity reused).
  std::vector<internal::HostSpanInfo> span_scratch_ ABSL_GUARDED_BY(step_mu_);
  bool closed_ ABSL_GUARDED_BY(step_mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(step_mu_);
  // The host-span recorder (the step spans, not-traced ones included, and
  // their timing), or DeviceTracing, which extends it; leaked in a forked
  // child (see ~Impl).
  std::unique_ptr<internal::RecordExtras> extras_ ABSL_PT_GUARDED_BY(step_mu_);
  // Thread-safe as documented; leaked in a forked child (see ~Impl).
  std::unique_ptr<internal::TraceWriter> writer_;
  // Any thread (stats()):
  std::atomic<int64_t> steps_traced_{0};
  std::atomic<int64_t> missing_gradients_{0};
};

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Start(const TraceConfig& config,
                                                      std::shared_ptr<Registry> registry,
                                                      std::vector<std::string> scopes) {
  return internal::TracerFactory::Start(config, std::move(registry), std::move(scopes), {});
}

Tracer::Tracer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tracer::~Tracer() = default;  // ~Impl closes.

absl::Status Tracer::Step(int64_t gstep, int64_t lstep, StepNotes* notes) {
  return impl_->StepAt(gstep, lstep, internal::WallClockMs(), notes);
}
absl::Status Tracer::StepAt(int64_t gstep, int64_t lstep, int64_t timestamp_ms, StepNotes* notes) {
  return impl_->StepAt(gstep, lstep, timestamp_ms, notes);
}
void Tracer::NoteStepNotTraced(int64_t gstep, int64_t lstep) {
  impl_->NoteStepNotTraced(gstep, lstep);
}
absl::Status Tracer::Flush() { return impl_->Flush(); }
absl::Status Tracer::Close() { return impl_->Close(); }
void Tracer::AbandonWaits() { impl_->AbandonWaits(); }
absl::Status Tracer::Repoint(absl::string_view key, std::optional<TensorView> view,
                             std::shared_ptr<const void> keep_alive) {
  return impl_->Repoint(key, std::move(view), std::move(keep_alive));
}
const std::vector<std::string>& Tracer::keys() const { return impl_->keys(); }
const TraceConfig& Tracer::config() const { return impl_->config(); }
TraceStats Tracer::stats() const { return impl_->stats(); }

Tracer::Impl::Impl(TraceConfig config, std::shared_ptr<Registry> registry,
                   std::vector<EntrySpec> entries, std::unique_ptr<internal::TraceWriter> writer,
                   std::unique_ptr<internal::RecordExtras> extras)
    : config_(std::move(config)),
      inline_write_(config_.ResolvedWriteMode() == WriteMode::kInline),
      registry_(std::move(registry)),
      entries_(std::move(entries)),
      slots_(entries_.size()),
      extras_(std::move(extras)),
      writer_(std::move(writer)) {
  keys_.reserve(entries_.size());
  gradient_taker_.reserve(entries_.size());
  std::map<std::string, size_t> first_with_name;  // gradient_name -> its first entry.
  for (size_t i = 0; i < entries_.size(); ++i) {
    const EntrySpec& entry = entries_[i];
    keys_.push_back(entry.FullKey());
    const bool sent = entry.kind == EntryKind::kGradient && !entry.gradient_name.empty();
    gradient_taker_.push_back(
        sent ? first_with_name.try_emplace(entry.gradient_name, i).first->second : i);
  }
  views_.reserve(entries_.size());
  internal::HostRanges::Global().Listen();  // Until Close.
}

Tracer::Impl::~Impl() {
  if (InForkedChild()) {
    // The IO thread (and any device tracer thread) exists only in the owner:
    // joining or closing them here would hang or abort, and the files are the
    // owner's. Leak them; the child's exit reclaims the memory.
    static_cast<void>(writer_.release());
    static_cast<void>(extras_.release());
    return;
  }
  Close().IgnoreError();
  // A device plugin that never returned still runs inside it: leaked.
  if (extras_->Abandoned()) static_cast<void>(extras_.release());
}

absl::Status Tracer::Impl::ForkedChildError(absl::string_view call) const {
  return absl::FailedPreconditionError(
      absl::StrCat(call, ": this tracer (writing ", config_.output_dir, ") belongs to process ",
                   owner_pid_, "; this is a forked child (pid ", getpid(),
                   "), which must not use it. Start a tracer in the child to trace there."));
}

absl::Status Tracer::Impl::Capture(size_t i, int64_t gstep, int64_t* missing_gradients,
                                   StepNotes* notes) {
  const EntrySpec& entry = entries_[i];
  const std::string& key = keys_[i];
  Slot& slot = slots_[i];
  if (entry.kind == EntryKind::kOnce && slot.once_done) {
    views_.push_back(EmptyFloatColumn());
    return absl::OkStatus();
  }

  TensorView view;
  if (entry.has_view) {
    // Registered memory, kept alive by the entry (or where it moved, by the slot).
    view = slot.repointed ? slot.view : entry.view;
  } else if (entry.kind == EntryKind::kGradient && !entry.gradient_name.empty()) {
    // One send serves every entry tracing that gradient name (say, raw and as stats).
    const size_t taker = gradient_taker_[i];
    absl::StatusOr<CapturedTensor> gradient =
        taker == i                   ? registry_->TakeGradient(entry.gradient_name)
        : slots_[taker].has_gradient ? absl::StatusOr<CapturedTensor>(slots_[taker].captured)
                                     : absl::NotFoundError(entry.gradient_name);
    if (!gradient.ok()) {
      ++*missing_gradients;
      // Names no API: the payload lets a binding say how its users send one.
      absl::Status missing = absl::FailedPreconditionError(
          absl::StrCat("gradient '", key, "': nothing was sent as '", entry.gradient_name,
                       "' for traced step gstep=", gstep));
      missing.SetPayload(kMissingGradientPayload, absl::Cord(entry.gradient_name));
      if (config_.missing_gradient == MissingGradientPolicy::kError) return missing;
      if (notes != nullptr) {
        missing.SetPayload(kEntryKeyPayload, absl::Cord(key));
        notes->empty_columns.push_back(std::move(missing));
      }
      views_.push_back(EmptyFloatColumn());
      return absl::OkStatus();
    }
    slot.captured = std::move(*gradient);
    slot.has_gradient = true;
    view = slot.captured.view;
  } else {
    absl::StatusOr<CapturedTensor> value = entry.provider();
    if (!value.ok()) return NameEntry(entry, key, value.status());
    slot.captured = std::move(*value);
    view = slot.captured.view;
  }
  if (slot.captured.deferred != nullptr) return CaptureDeferred(i, slot.captured);
  if (!internal::IsReadableView(view)) {
    return internal::ValidateView(
        view, absl::StrCat(internal::EntryKindName(entry.kind), " '", key, "'"));
  }
  absl::Status status;
  if (slot.captured.is_summary) {
    XDL_RETURN_IF_ERROR(CheckSummaryShape(entry, key, view));
    views_.push_back(std::move(view));
    return absl::OkStatus();
  }

  if (entry.summary.fn) {
    absl::StatusOr<Tensor> summary = entry.summary.fn(view);
    if (!summary.ok()) {
      return NameEntry(entry, key,
                       absl::Status(summary.status().code(),
                                    absl::StrCat("summary failed: ", summary.status().message())));
    }
    slot.user_summary = std::move(*summary);
    view = slot.user_summary.view();
    if (!internal::IsReadableView(view)) {
      return internal::ValidateView(
          view, absl::StrCat(internal::EntryKindName(entry.kind), " '", key, "': summary result"));
    }
    if (slot.user_summary.bytes.size() != view.NumBytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          internal::EntryKindName(entry.kind), " '", key, "': summary result holds ",
          slot.user_summary.bytes.size(), " bytes, its dtype and shape need ", view.NumBytes()));
    }
  } else if (entry.summary.builtin != BuiltinSummary::kNone) {
    status = internal::ComputeBuiltinSummary(entry.summary, view, &slot.builtin);
    if (!status.ok()) return NameEntry(entry, key, status);
    view = TensorView{
        DType::kFloat64, {static_cast<int64_t>(slot.builtin.size())}, slot.builtin.data()};
  }
  views_.push_back(std::move(view));
  return absl::OkStatus();
}

absl::Status Tracer::Impl::CheckSummaryShape(const EntrySpec& entry, const std::string& key,
                                             const TensorView& view) const {
  const BuiltinSummary kind = entry.summary.fn ? BuiltinSummary::kNone : entry.summary.builtin;
  const int64_t size = kind == BuiltinSummary::kStats ? internal::kStatsSize
                       : kind == BuiltinSummary::kHistogram
                           ? internal::HistogramSize(entry.summary.histogram_bins)
                       : kind == BuiltinSummary::kDigest ? internal::kDigestSize
                                                         : -1;
  if (size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(internal::EntryKindName(entry.kind), " '", key,
                     "': a value captured as its summary, but the entry has no built-in summary"));
  }
  if (view.dtype != DType::kFloat64 || view.shape.size() != 1 || view.shape[0] != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(internal::EntryKindName(entry.kind), " '", key, "': a summary captured as ",
                     DTypeName(view.dtype), " of ", view.shape.size(), " dims; the entry's ",
                     kind == BuiltinSummary::kStats       ? "stats"
                     : kind == BuiltinSummary::kHistogram ? "histogram"
                                                          : "digest",
                     " is float64 [", size, "]"));
  }
  return absl::OkStatus();
}

absl::Status Tracer::Impl::CaptureDeferred(size_t i, const CapturedTensor& captured) {
  const EntrySpec& entry = entries_[i];
  const std::string what = absl::StrCat(internal::EntryKindName(entry.kind), " '", keys_[i], "'");
  // Its dtype and dims are checked now; its bytes only exist later.
  TensorView shape_only = captured.view;
  shape_only.data = nullptr;
  XDL_RETURN_IF_ERROR(internal::ValidateShape(shape_only, what));
  if (captured.is_summary) {
    XDL_RETURN_IF_ERROR(CheckSummaryShape(entry, keys_[i], shape_only));
  } else if (!entry.summary.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        ": a deferred (device) value needs its summary computed by whoever captured it "
        "(CapturedTensor::is_summary); the tracer reads no device memory"));
  }
  deferred_.resize(views_.size());  // The columns before it are not deferred.
  views_.push_back(shape_only);
  deferred_.push_back({captured.deferred, captured.deferred_offset});
  return absl::OkStatus();
}

void Tracer::Impl::NoteStepNotTraced(int64_t gstep, int64_t lstep) {
  // A forked child writes nothing; a concurrent Step is refused there, so
  // this span is simply not noted.
  if (InForkedChild() || !step_mu_.TryLock()) return;
  if (!closed_) extras_->OnStepNotTraced(gstep, lstep);
  step_mu_.Unlock();
}

void Tracer::Impl::AppendIoSpans(int64_t gstep, int64_t lstep, std::string* fields) {
  span_scratch_.clear();
  writer_->TakeIoSpans(&span_scratch_);
  internal::HostRanges::Global().TakeInto(gstep, lstep, &span_scratch_);
  internal::AppendHostSpanFields(span_scratch_, fields);
}

void Tracer::Impl::ReleaseCaptures() {
  for (Slot& slot : slots_) {
    if (slot.captured.keep_alive != nullptr || slot.captured.deferred != nullptr) {
      slot.captured = CapturedTensor();
    }
    slot.has_gradient = false;
  }
}

absl::Status Tracer::Impl::StepAt(int64_t gstep, int64_t lstep, int64_t timestamp_ms,
                                  StepNotes* notes) {
  if (notes != nullptr) notes->empty_columns.clear();
  if (InForkedChild()) return ForkedChildError(absl::StrCat("Step(gstep=", gstep, ")"));
  if (InsideOwnStep()) return ReentryError(absl::StrCat("Step(gstep=", gstep, ")"));
  if (!step_mu_.TryLock()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Step(gstep=", gstep,
        "): another thread is inside Step, Flush or Close of the tracer "
        "writing ",
        config_.output_dir,
        "; a tracer is stepped by one thread at a time. Nothing was written for this step."));
  }
  stepping_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  absl::Status status = StepLocked(gstep, lstep, timestamp_ms, notes);
  stepping_thread_.store(std::thread::id(), std::memory_order_relaxed);
  step_mu_.Unlock();
  return status;
}

bool Tracer::Impl::InsideOwnStep() const {
  return stepping_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

absl::Status Tracer::Impl::ReentryError(absl::string_view call) const {
  return absl::FailedPreconditionError(absl::StrCat(
      call, " called from inside Step of the same tracer (writing ", config_.output_dir,
      ") on the same thread: a callback or provider this step is calling may not step, flush or "
      "close its own tracer (it would wait for itself). Refused; call it after the step."));
}

absl::Status Tracer::Impl::StepLocked(int64_t gstep, int64_t lstep, int64_t timestamp_ms,
                                      StepNotes* notes) {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Step(gstep=", gstep, "): the tracer writing ", config_.output_dir, " is closed"));
  }
  extras_->OnStepCalled(gstep, lstep);
  const int64_t capture_begin_ns = internal::WallClockNs();

  views_.clear();
  deferred_.clear();
  int64_t missing = 0;
  absl::Status status;
  for (size_t i = 0; i < entries_.size() && status.ok(); ++i) {
    status = Capture(i, gstep, &missing, notes);
    if (!status.ok()) status.SetPayload(kEntryKeyPayload, absl::Cord(keys_[i]));
  }
  absl::StatusOr<internal::EncodedRecord> record;
  if (status.ok()) {
    std::vector<std::string> device_traces = extras_->TakeDeviceTraces();
    std::string trailing = extras_->TakeTrailingFields();
    AppendIoSpans(gstep, lstep, &trailing);
    // Encode into a recycled buffer: no allocation, no page faults per step.
    // Inline, large columns stay where they are and the buffer holds the rest.
    internal::TraceWriter* writer = writer_.get();
    internal::EncodeOptions options;
    if (inline_write_) options.reference_min_bytes = kInlineReferenceMinBytes;
    options.deferred = deferred_;
    // Device traces (megabytes at a GPU's event rate) go to the IO thread as they are.
    options.moved_fields = &device_traces;
    options.moved_field_number = xdl::proto::Record::kDeviceTraceFieldNumber;
    record = internal::EncodeRecord(
        gstep, lstep, timestamp_ms, views_, keys_, trailing,
        [writer](size_t frame_bytes) { return writer->TakeBuffer(frame_bytes); }, options);
    status = record.status();
  }
  // Keep-alives go on the thread that encoded: now when the record holds
  // copies, after the write when it points into the captures (inline).
  if (!inline_write_ || !status.ok()) ReleaseCaptures();
  // Counted whether the step failed (kError) or wrote empty columns.
  if (missing > 0) missing_gradients_.fetch_add(missing, std::memory_order_relaxed);
  if (!status.ok()) {
    const int64_t now = internal::WallClockNs();
    extras_->OnStepReturned(now, now);
    return status;
  }

  const int64_t submit_begin_ns = internal::WallClockNs();
  extras_->OnStepEncoded(capture_begin_ns, submit_begin_ns);
  absl::StatusOr<internal::SubmitResult> queued;
  if (inline_write_) {
    // Returns once the IO thread wrote the record (or dropped it after a
    // write error): nothing refers to the captured memory any more.
    const absl::Status written = writer_->WriteThrough(std::move(*record));
    ReleaseCaptures();
    if (written.ok()) {
      queued = internal::SubmitResult::kQueued;
    } else {
      queued = written;
    }
  } else {
    queued = writer_->Submit(std::move(*record));
  }
  const int64_t returned_ns = internal::WallClockNs();
  extras_->OnStepReturned(submit_begin_ns, returned_ns);

  // The record was produced: counted even when the writer dropped it.
  steps_traced_.fetch_add(1, std::memory_order_relaxed);
  last_gstep_ = gstep;
  last_lstep_ = lstep;
  // A once-value stays pending until a record carrying it is queued, so a
  // record dropped under kDrop does not lose it.
  if (queued.ok() && *queued == internal::SubmitResult::kQueued) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].kind == EntryKind::kOnce) slots_[i].once_done = true;
    }
  }
  return queued.status();
}

absl::Status Tracer::Impl::Flush() {
  if (InForkedChild()) return ForkedChildError("Flush");
  if (InsideOwnStep()) return ReentryError("Flush()");
  internal::MutexLock lock(&step_mu_);
  if (closed_) return close_status_;
  return writer_->Flush();
}

absl::Status Tracer::Impl::Repoint(absl::string_view key, std::optional<TensorView> view,
                                   std::shared_ptr<const void> keep_alive) {
  if (InForkedChild()) return ForkedChildError("Repoint");
  if (InsideOwnStep()) return ReentryError("Repoint()");
  const auto found = std::find(keys_.begin(), keys_.end(), key);
  const size_t i = static_cast<size_t>(found - keys_.begin());
  if (found == keys_.end() || !entries_[i].has_view) {
    return absl::NotFoundError(
        absl::StrCat("Repoint('", key, "'): no entry of this key reads memory in place"));
  }
  const TensorView& declared = entries_[i].view;
  if (view.has_value() && (view->dtype != declared.dtype || view->shape != declared.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Repoint('", key, "'): ", DTypeName(view->dtype), "[",
                     absl::StrJoin(view->shape, ", "), "] where the Header declared ",
                     DTypeName(declared.dtype), "[", absl::StrJoin(declared.shape, ", "), "]"));
  }
  if (!step_mu_.TryLock()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Repoint('", key, "'): another thread is inside Step, Flush or Close of the tracer"));
  }
  Slot& slot = slots_[i];
  slot.repointed = true;
  slot.view = view.has_value() ? *view : EmptyFloatColumn();
  slot.view_keep_alive = std::move(keep_alive);
  step_mu_.Unlock();
  return absl::OkStatus();
}

absl::Status Tracer::Impl::Close() {
  if (InForkedChild()) return ForkedChildError("Close");
  if (InsideOwnStep()) return ReentryError("Close()");
  internal::MutexLock lock(&step_mu_);
  if (closed_) return close_status_;
  closed_ = true;
  absl::Status extras_status;
  std::vector<std::string> device_traces;
  std::string trailing = extras_->Finish(&device_traces);
  if (!trailing.empty() || !device_traces.empty()) {
    AppendIoSpans(last_gstep_, last_lstep_, &trailing);
    // One last, device-only record carrying what device tracing collected
    // since the last step: the last step's gstep/lstep, no column at all (no
    // fake values for code that stacks a key), fields 5/6. Readers skip it
    // unless they ask for no columns (docs/format.md, "Device events"). The
    // device traces (the last collect: tens of MB at a GPU's rate) are moved
    // in, not copied.
    internal::EncodeOptions options;
    options.moved_fields = &device_traces;
    options.moved_field_number = xdl::proto::Record::kDeviceTraceFieldNumber;
    absl::StatusOr<internal::EncodedRecord> record = internal::EncodeRecord(
        last_gstep_, last_lstep_, internal::WallClockMs(), {}, {}, trailing,
        [](size_t) { return std::string(); }, options);
    extras_status = record.ok() ? writer_->Submit(std::move(*record)).status() : record.status();
  }
  internal::HostRanges::Global().Unlisten();  // The last record has taken what was pending.
  close_status_ = writer_->Close();
  if (close_status_.ok()) close_status_ = extras_status;
  return close_status_;
}

TraceStats Tracer::Impl::stats() const {
  if (InForkedChild()) {
    // The writer's and device tracing's locks may have been held by a thread
    // that does not exist here: report only this object's own counters.
    TraceStats stats;
    stats.steps_traced = steps_traced_.load(std::memory_order_relaxed);
    stats.missing_gradients = missing_gradients_.load(std::memory_order_relaxed);
    stats.write_mode = config_.ResolvedWriteMode();
    stats.last_error = ForkedChildError("stats");
    return stats;
  }
  TraceStats stats = writer_->stats();
  stats.write_mode = config_.ResolvedWriteMode();
  stats.steps_traced = steps_traced_.load(std::memory_order_relaxed);
  stats.missing_gradients = missing_gradients_.load(std::memory_order_relaxed);
  StatsExtras().FillStats(&stats);
  return stats;
}

}  // namespace xdl_trace
