// The tracer: fixes the header at Start, captures and encodes entries each step, submits records.
#include "xdl_trace/tracer.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/trace_writer.h"
#include "record/record_encoder.h"
#include "registry/validate.h"
#include "summary/summary.h"
#include "tracer/tracer_internal.h"

namespace xdl_trace {
namespace {

// The column XDL writes for a once-value after its first record, and this
// tracer for a missing gradient under kEmptyColumn.
TensorView EmptyFloatColumn() { return TensorView{DType::kFloat32, {0}, nullptr}; }

// 128 random bits as 32 hex digits.
std::string GenerateRunId() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(device()));
    id += buf;
  }
  return id;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// `status` with its message prefixed by the entry's kind and key.
absl::Status NameEntry(const EntrySpec& entry, const std::string& key, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(internal::EntryKindName(entry.kind), " '", key,
                                                  "': ", status.message()));
}

}  // namespace

namespace internal {

int64_t WallClockNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

absl::StatusOr<std::unique_ptr<Tracer>> TracerFactory::Start(const TraceConfig& config,
                                                             std::shared_ptr<Registry> registry,
                                                             std::vector<std::string> scopes,
                                                             TracerOptions options) {
  absl::Status status = config.Validate();
  if (!status.ok()) return status;
  if (registry == nullptr) return absl::InvalidArgumentError("Tracer::Start: null registry");
  TraceConfig fixed = config;
  if (fixed.run_id.empty()) fixed.run_id = GenerateRunId();
  std::vector<EntrySpec> entries = registry->Snapshot(scopes);
  std::vector<std::string> keys;
  keys.reserve(entries.size());
  for (const EntrySpec& entry : entries) keys.push_back(entry.FullKey());

  std::unique_ptr<RecordExtras> extras = std::move(options.extras);
  if (extras == nullptr && !fixed.device_tracers.empty()) {
    absl::StatusOr<std::unique_ptr<RecordExtras>> made = MakeDeviceRecordExtras(fixed);
    if (!made.ok()) return made.status();
    extras = std::move(*made);
  }
  absl::StatusOr<std::unique_ptr<TraceWriter>> writer =
      TraceWriter::Open(fixed, keys, std::move(options.writer_hooks));
  if (!writer.ok()) return writer.status();
  return std::unique_ptr<Tracer>(new Tracer(std::move(fixed), std::move(registry),
                                            std::move(entries), std::move(*writer),
                                            std::move(extras)));
}

}  // namespace internal

// Per-entry state, touched only by the training thread.
struct Tracer::Slot {
  CapturedTensor captured;      // This step's value; released after encoding.
  std::vector<double> builtin;  // Built-in summary output (capacity reused).
  Tensor user_summary;          // SummaryFn output of this step.
  bool once_done = false;       // kOnce: its value is in a queued record.
  bool has_gradient = false;    // kGradient: `captured` holds this step's gradient.
};

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Start(const TraceConfig& config,
                                                      std::shared_ptr<Registry> registry,
                                                      std::vector<std::string> scopes) {
  return internal::TracerFactory::Start(config, std::move(registry), std::move(scopes), {});
}

Tracer::Tracer(TraceConfig config, std::shared_ptr<Registry> registry,
               std::vector<EntrySpec> entries, std::unique_ptr<internal::TraceWriter> writer,
               std::unique_ptr<internal::RecordExtras> extras)
    : config_(std::move(config)),
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
}

Tracer::~Tracer() { Close().IgnoreError(); }

absl::Status Tracer::Step(int64_t gstep, int64_t lstep) { return StepAt(gstep, lstep, NowMs()); }

absl::Status Tracer::Capture(size_t i, int64_t gstep, int64_t* missing_gradients) {
  const EntrySpec& entry = entries_[i];
  const std::string& key = keys_[i];
  Slot& slot = slots_[i];
  if (entry.kind == EntryKind::kOnce && slot.once_done) {
    views_.push_back(EmptyFloatColumn());
    return absl::OkStatus();
  }

  TensorView view;
  if (entry.has_view) {
    view = entry.view;  // Registered memory, kept alive by the entry.
  } else if (entry.kind == EntryKind::kGradient && !entry.gradient_name.empty()) {
    // One send serves every entry tracing that gradient name (say, raw and as stats).
    const size_t taker = gradient_taker_[i];
    absl::StatusOr<CapturedTensor> gradient =
        taker == i                   ? registry_->TakeGradient(entry.gradient_name)
        : slots_[taker].has_gradient ? absl::StatusOr<CapturedTensor>(slots_[taker].captured)
                                     : absl::NotFoundError(entry.gradient_name);
    if (!gradient.ok()) {
      if (config_.missing_gradient == MissingGradientPolicy::kEmptyColumn) {
        ++*missing_gradients;
        views_.push_back(EmptyFloatColumn());
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(
          absl::StrCat("gradient '", key, "': nothing was sent as '", entry.gradient_name,
                       "' for traced step gstep=", gstep,
                       " (call SendGradient before the step, or use "
                       "MissingGradientPolicy::kEmptyColumn)"));
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
  if (!internal::IsReadableView(view)) {
    return internal::ValidateView(
        view, absl::StrCat(internal::EntryKindName(entry.kind), " '", key, "'"));
  }
  absl::Status status;

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

void Tracer::ReleaseCaptures() {
  for (Slot& slot : slots_) {
    if (slot.captured.keep_alive != nullptr) slot.captured = CapturedTensor();
    slot.has_gradient = false;
  }
}

absl::Status Tracer::StepAt(int64_t gstep, int64_t lstep, int64_t timestamp_ms) {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Step(gstep=", gstep, "): the tracer writing ", config_.output_dir, " is closed"));
  }
  if (extras_ != nullptr) extras_->OnStepCalled(gstep, lstep);
  const int64_t capture_begin_ns = extras_ != nullptr ? internal::WallClockNs() : 0;

  views_.clear();
  int64_t missing = 0;
  absl::Status status;
  for (size_t i = 0; i < entries_.size() && status.ok(); ++i) {
    status = Capture(i, gstep, &missing);
  }
  absl::StatusOr<internal::EncodedRecord> record;
  if (status.ok()) {
    std::string trailing;
    if (extras_ != nullptr) trailing = extras_->TakeTrailingFields();
    // Encode into a recycled buffer: no allocation, no page faults per step.
    internal::TraceWriter* writer = writer_.get();
    record = internal::EncodeRecord(
        gstep, lstep, timestamp_ms, views_, keys_, trailing,
        [writer](size_t frame_bytes) { return writer->TakeBuffer(frame_bytes); });
    status = record.status();
  }
  ReleaseCaptures();  // Keep-alives go on the thread that encoded.
  if (!status.ok()) {
    if (extras_ != nullptr) {
      const int64_t now = internal::WallClockNs();
      extras_->OnStepReturned(now, now);
    }
    return status;
  }

  int64_t submit_begin_ns = 0;
  if (extras_ != nullptr) {
    submit_begin_ns = internal::WallClockNs();
    extras_->OnStepEncoded(capture_begin_ns, submit_begin_ns);
  }
  const absl::StatusOr<internal::SubmitResult> queued = writer_->Submit(std::move(*record));
  if (extras_ != nullptr) extras_->OnStepReturned(submit_begin_ns, internal::WallClockNs());

  // The record was produced: counted even when the writer dropped it.
  steps_traced_.fetch_add(1, std::memory_order_relaxed);
  if (missing > 0) missing_gradients_.fetch_add(missing, std::memory_order_relaxed);
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

absl::Status Tracer::Flush() {
  if (closed_) return close_status_;
  return writer_->Flush();
}

absl::Status Tracer::Close() {
  if (closed_) return close_status_;
  closed_ = true;
  absl::Status extras_status;
  if (extras_ != nullptr) {
    std::string trailing = extras_->Finish();
    if (!trailing.empty()) {
      // One last record carrying what device tracing collected since the last
      // step; its columns are empty, like a once-value after its first record.
      std::vector<TensorView> empty(entries_.size(), EmptyFloatColumn());
      absl::StatusOr<internal::EncodedRecord> record =
          internal::EncodeRecord(last_gstep_, last_lstep_, NowMs(), empty, keys_, trailing);
      extras_status = record.ok() ? writer_->Submit(std::move(*record)).status() : record.status();
    }
  }
  close_status_ = writer_->Close();
  if (close_status_.ok()) close_status_ = extras_status;
  return close_status_;
}

TraceStats Tracer::stats() const {
  TraceStats stats = writer_->stats();
  stats.steps_traced = steps_traced_.load(std::memory_order_relaxed);
  stats.missing_gradients = missing_gradients_.load(std::memory_order_relaxed);
  if (extras_ != nullptr) extras_->FillStats(&stats);
  return stats;
}

}  // namespace xdl_trace
