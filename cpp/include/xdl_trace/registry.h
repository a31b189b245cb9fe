// What to trace: keyed, scoped entries (tensors, variables, gradients, callbacks, once-values).
#ifndef XDL_TRACE_REGISTRY_H_
#define XDL_TRACE_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {

enum class EntryKind { kTensor, kVariable, kGradient, kCallback, kOnce };

// Yields the value of an entry at a traced step. Called on the training
// thread inside Tracer::Step(); must not block on the IO thread.
using TensorProvider = std::function<absl::StatusOr<CapturedTensor>()>;

// A user summary: tensor in, (small) tensor out, applied before encoding.
using SummaryFn = std::function<absl::StatusOr<Tensor>(const TensorView&)>;

// Built-in summaries run in C++ over the tensor in place (no copy of it).
// Column layouts are documented in docs/format.md:
//   kStats: float64[8] = count, min, max, mean, std, l2 norm, nan count, inf count
//           (min/max/mean/std/l2 over finite values only).
//   kHistogram: float64[2 + 2 * bins]: min, max of finite values, then `bins`
//           right edges, then `bins` counts.
enum class BuiltinSummary { kNone, kStats, kHistogram };

struct Summary {
  BuiltinSummary builtin = BuiltinSummary::kNone;
  int histogram_bins = 30;  // For kHistogram.
  SummaryFn fn;             // When set, used instead of `builtin`.

  bool empty() const { return !fn && builtin == BuiltinSummary::kNone; }
};

// One registered entry. Exactly one source is set for kinds that have one:
//   kTensor, kVariable, kOnce: `view` (stable memory, read in place at each
//       step) or `provider`;
//   kCallback: `provider`;
//   kGradient: neither; the value arrives through Registry::SendGradient
//       under `gradient_name`.
struct EntrySpec {
  std::string scope;            // "" is the default scope.
  std::string key;              // Non-empty; the column key is FullKey().
  EntryKind kind = EntryKind::kTensor;
  bool has_view = false;
  TensorView view;
  std::shared_ptr<const void> keep_alive;  // Holds `view` memory if needed.
  TensorProvider provider;
  std::string gradient_name;    // kGradient only.
  Summary summary;

  // "scope/key", or "key" in the default scope.
  std::string FullKey() const;
};

// Thread-safe. Shared by every tracer started from it; registrations made
// after a tracer started do not change that tracer's header.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // InvalidArgument naming the key for an empty key, a duplicate full key in
  // the same scope, an unsupported dtype, or a spec without a source.
  absl::Status Register(EntrySpec spec);

  // Removes every entry (and pending gradient) of `scope`, or of all scopes.
  void ClearScope(const std::string& scope);
  void Clear();

  // Entries of `scopes` in registration order (each scope's, scope by scope).
  std::vector<EntrySpec> Snapshot(const std::vector<std::string>& scopes) const;

  // Gradient rendezvous, as TF's Rendezvous pairs Send and Recv: the producer
  // sends a gradient once it exists; the next traced step takes it. A second
  // send before the step replaces the first. Never blocks.
  absl::Status SendGradient(const std::string& name, CapturedTensor gradient);
  // NotFound naming `name` when nothing was sent since the last take.
  absl::StatusOr<CapturedTensor> TakeGradient(const std::string& name);
  // Forgets pending gradients (e.g. at the end of an untraced step).
  void DropPendingGradients();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_REGISTRY_H_
