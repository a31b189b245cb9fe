// The registry of traced entries (validated at registration) and the keyed gradient rendezvous.
#include "xdl_trace/registry.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "registry/validate.h"

namespace xdl_trace {
namespace internal {

const char* EntryKindName(EntryKind kind) {
  switch (kind) {
    case EntryKind::kTensor:
      return "tensor";
    case EntryKind::kVariable:
      return "variable";
    case EntryKind::kGradient:
      return "gradient";
    case EntryKind::kCallback:
      return "callback";
    case EntryKind::kOnce:
      return "once";
  }
  return "unknown";
}

}  // namespace internal

namespace {

using internal::EntryKindName;
using internal::Mutex;
using internal::MutexLock;
using internal::ValidateShape;
using internal::ValidateView;

// Largest histogram a built-in summary may produce (bins).
constexpr int kMaxHistogramBins = 1 << 20;

absl::Status ValidateSpec(const EntrySpec& spec, const std::string& full_key) {
  const std::string what = absl::StrCat(EntryKindName(spec.kind), " '", full_key, "'");
  if (spec.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(EntryKindName(spec.kind), " in scope '", spec.scope, "': empty key"));
  }
  const bool has_provider = static_cast<bool>(spec.provider);
  switch (spec.kind) {
    case EntryKind::kTensor:
    case EntryKind::kVariable:
    case EntryKind::kOnce:
      if (spec.has_view == has_provider) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": needs exactly one source, a view or a provider"));
      }
      break;
    case EntryKind::kCallback:
      if (!has_provider || spec.has_view) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": needs a provider and no view"));
      }
      break;
    case EntryKind::kGradient:
      // Either the rendezvous (gradient_name) or, additively, a provider that
      // reads the gradient itself (e.g. a torch Parameter's .grad).
      if (spec.has_view || spec.gradient_name.empty() == !has_provider) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": needs exactly one source, a gradient_name (rendezvous) or a provider"));
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("entry '", full_key, "': unknown kind ", static_cast<int>(spec.kind)));
  }
  if (spec.has_view) XDL_RETURN_IF_ERROR(ValidateView(spec.view, what));
  if (spec.declared_input.has_value()) {
    if (spec.has_view) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a declared input with a view (the view's is its input)"));
    }
    XDL_RETURN_IF_ERROR(
        ValidateShape(TensorView{spec.declared_input->dtype, spec.declared_input->shape, nullptr},
                      absl::StrCat(what, ": declared input")));
  }
  if (!spec.summary.fn && spec.summary.builtin == BuiltinSummary::kHistogram &&
      (spec.summary.histogram_bins < 1 || spec.summary.histogram_bins > kMaxHistogramBins)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": histogram_bins ",
                                                   spec.summary.histogram_bins, " is outside [1, ",
                                                   kMaxHistogramBins, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

absl::Status ValidateView(const TensorView& view, absl::string_view what) {
  XDL_RETURN_IF_ERROR(ValidateShape(view, what));
  const bool empty = std::find(view.shape.begin(), view.shape.end(), 0) != view.shape.end();
  if (!empty && view.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null data for a non-empty tensor"));
  }
  return absl::OkStatus();
}

absl::Status ValidateShape(const TensorView& view, absl::string_view what) {
  const int32_t dtype = static_cast<int32_t>(view.dtype);
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unsupported dtype ", dtype));
  }
  for (int64_t dim : view.shape) {
    if (dim < 0 || dim > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": dimension ", dim, " does not fit a non-negative int32"));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

std::string EntrySpec::FullKey() const {
  return scope.empty() ? key : absl::StrCat(scope, "/", key);
}

// Every field is shared between threads (registration, the training thread's
// Snapshot/TakeGradient, producers' SendGradient) and guarded by `mu`.
struct Registry::State {
  Mutex mu;
  std::vector<EntrySpec> entries ABSL_GUARDED_BY(mu);  // Registration order.
  std::unordered_set<std::string> full_keys ABSL_GUARDED_BY(mu);
  std::unordered_map<std::string, CapturedTensor> pending ABSL_GUARDED_BY(mu);
};

Registry::Registry() : state_(std::make_unique<State>()) {}
Registry::~Registry() = default;

absl::Status Registry::Register(EntrySpec spec) {
  std::string full_key = spec.FullKey();
  XDL_RETURN_IF_ERROR(ValidateSpec(spec, full_key));
  MutexLock lock(&state_->mu);
  if (!state_->full_keys.insert(full_key).second) {
    return absl::InvalidArgumentError(
        absl::StrCat(EntryKindName(spec.kind), " '", full_key, "': key is already registered"));
  }
  state_->entries.push_back(std::move(spec));
  return absl::OkStatus();
}

absl::Status Registry::RegisterView(EntryKind kind, const std::string& key, TensorView view,
                                    TraceOptions options) {
  EntrySpec spec;
  spec.scope = std::move(options.scope);
  spec.key = key;
  spec.kind = kind;
  spec.has_view = true;
  spec.view = std::move(view);
  spec.summary = std::move(options.summary);
  return Register(std::move(spec));
}

absl::Status Registry::TraceGradient(const std::string& key, const std::string& gradient_name,
                                     TraceOptions options) {
  EntrySpec spec;
  spec.scope = std::move(options.scope);
  spec.key = key;
  spec.kind = EntryKind::kGradient;
  spec.gradient_name = gradient_name;
  spec.summary = std::move(options.summary);
  return Register(std::move(spec));
}

absl::Status Registry::TraceCallback(const std::string& key, TensorProvider provider,
                                     TraceOptions options) {
  EntrySpec spec;
  spec.scope = std::move(options.scope);
  spec.key = key;
  spec.kind = EntryKind::kCallback;
  spec.provider = std::move(provider);
  spec.summary = std::move(options.summary);
  return Register(std::move(spec));
}

void Registry::ClearScope(const std::string& scope) {
  std::vector<EntrySpec> removed;  // Destroyed outside the lock (keep-alives).
  std::vector<CapturedTensor> dropped;
  {
    MutexLock lock(&state_->mu);
    auto& entries = state_->entries;
    auto split = std::stable_partition(entries.begin(), entries.end(),
                                       [&](const EntrySpec& e) { return e.scope != scope; });
    for (auto it = split; it != entries.end(); ++it) {
      state_->full_keys.erase(it->FullKey());
      if (it->kind == EntryKind::kGradient && !it->gradient_name.empty()) {
        auto pending = state_->pending.find(it->gradient_name);
        if (pending != state_->pending.end()) {
          dropped.push_back(std::move(pending->second));
          state_->pending.erase(pending);
        }
      }
      removed.push_back(std::move(*it));
    }
    entries.erase(split, entries.end());
  }
}

void Registry::Clear() {
  std::vector<EntrySpec> removed;
  std::unordered_map<std::string, CapturedTensor> dropped;
  MutexLock lock(&state_->mu);
  removed.swap(state_->entries);
  dropped.swap(state_->pending);
  state_->full_keys.clear();
}

std::vector<EntrySpec> Registry::Snapshot(const std::vector<std::string>& scopes) const {
  std::vector<EntrySpec> out;
  std::unordered_set<std::string> seen;
  MutexLock lock(&state_->mu);
  for (const std::string& scope : scopes) {
    if (!seen.insert(scope).second) continue;  // A scope listed twice counts once.
    for (const EntrySpec& entry : state_->entries) {
      if (entry.scope == scope) out.push_back(entry);
    }
  }
  return out;
}

absl::Status Registry::SendGradient(const std::string& name, CapturedTensor gradient) {
  if (name.empty()) return absl::InvalidArgumentError("SendGradient: empty gradient name");
  if (gradient.deferred != nullptr) {
    XDL_RETURN_IF_ERROR(
        internal::ValidateShape(gradient.view, absl::StrCat("gradient '", name, "'")));
  } else if (!internal::IsReadableView(gradient.view)) {
    return ValidateView(gradient.view, absl::StrCat("gradient '", name, "'"));
  }
  CapturedTensor replaced;  // Released outside the lock.
  MutexLock lock(&state_->mu);
  CapturedTensor& slot = state_->pending[name];
  replaced = std::move(slot);
  slot = std::move(gradient);
  return absl::OkStatus();
}

absl::StatusOr<CapturedTensor> Registry::TakeGradient(const std::string& name) {
  MutexLock lock(&state_->mu);
  auto it = state_->pending.find(name);
  if (it == state_->pending.end()) {
    return absl::NotFoundError(
        absl::StrCat("gradient '", name, "' was not sent since the last traced step"));
  }
  CapturedTensor gradient = std::move(it->second);
  state_->pending.erase(it);
  return gradient;
}

void Registry::DropPendingGradients() {
  std::unordered_map<std::string, CapturedTensor> dropped;  // Released outside the lock.
  MutexLock lock(&state_->mu);
  dropped.swap(state_->pending);
}

}  // namespace xdl_trace
