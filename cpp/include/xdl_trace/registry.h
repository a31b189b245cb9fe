// What to trace: keyed, scoped entries (tensors, variables, gradients, callbacks, once-values).
#ifndef XDL_TRACE_REGISTRY_H_
#define XDL_TRACE_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {

enum class EntryKind { kTensor, kVariable, kGradient, kCallback, kOnce };

// Yields the value of an entry at a traced step. Called on the training
// thread inside Tracer::Step(); must not block on the IO thread.
using TensorProvider = std::function<absl::StatusOr<CapturedTensor>()>;

// Values of several entries captured together once per traced step (a watched
// model's tensors, staged in one batch of device copies): the producer sets the
// step's values before Step, and each entry's provider, Member(i), takes its
// own, once. Thread-safe.
class ValueGroup {
 public:
  explicit ValueGroup(size_t size);
  ~ValueGroup();
  ValueGroup(const ValueGroup&) = delete;
  ValueGroup& operator=(const ValueGroup&) = delete;

  size_t size() const;
  // The provider of member `i` (< size()): the value Set for this step;
  // FailedPrecondition when none was set since the last one was taken.
  TensorProvider Member(size_t i);
  // This step's values, one per member; InvalidArgument for another count.
  absl::Status Set(std::vector<CapturedTensor> values);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// A user summary: tensor in, (small) tensor out, applied before encoding.
using SummaryFn = std::function<absl::StatusOr<Tensor>(const TensorView&)>;

// Built-in summaries run in C++ over the tensor in place (no copy of it),
// for every dtype (float16/bfloat16 converted per element, bool as 0/1).
// Column layouts are documented in docs/format.md:
//   kStats: float64[8] = count, min, max, mean, std, l2 norm, nan count, inf count
//           (count = all elements; min/max/mean/std/l2 over finite values
//           only; std is the population std; with no finite value min, max,
//           mean, std are NaN and l2 is 0).
//   kHistogram: float64[2 + 2 * bins]: lo, hi (the bin range: min, max of the
//           finite values, or min - 0.5, max + 0.5 when they are equal, as
//           numpy does), then `bins` right edges, then `bins` counts of the
//           finite values (the last bin includes hi). No finite value: lo, hi
//           and the edges are NaN, the counts 0.
enum class BuiltinSummary { kNone, kStats, kHistogram, kDigest };

// A tensor's dtype and shape, without its data.
struct TensorSpec {
  DType dtype = DType::kFloat32;
  Shape shape;  // Empty for a scalar.
};

struct Summary {
  BuiltinSummary builtin = BuiltinSummary::kNone;
  int histogram_bins = 30;  // For kHistogram.
  SummaryFn fn;             // When set, used instead of `builtin`.
  // fn's name for the Header's column descriptor (Python: the callable's
  // "module.qualname"); may be empty.
  std::string name;

  bool empty() const { return !fn && builtin == BuiltinSummary::kNone; }
};

// One registered entry. Exactly one source is set for kinds that have one:
//   kTensor, kVariable, kOnce: `view` (stable memory, read in place at each
//       step) or `provider`;
//   kCallback: `provider`;
//   kGradient: `gradient_name`: the value arrives through
//       Registry::SendGradient under that name; or (additive) a `provider`
//       that reads the gradient itself (e.g. a torch Parameter's .grad).
// A `view` must have a known dtype, dims that fit a non-negative int32 and
// non-null data when it has elements. kHistogram bins must be in [1, 2^20].
struct EntrySpec {
  std::string scope;  // "" is the default scope.
  std::string key;    // Non-empty; the column key is FullKey().
  EntryKind kind = EntryKind::kTensor;
  bool has_view = false;
  TensorView view;
  std::shared_ptr<const void> keep_alive;  // Holds `view` memory if needed.
  TensorProvider provider;
  std::string gradient_name;  // kGradient only.
  Summary summary;
  // The tensor a provider (or a sent gradient) yields, where the registering code knows its
  // dtype and shape for the whole trace (xdl.watch: a parameter's gradient has the parameter's,
  // as torch guarantees): the Header's declared input (ColumnDescriptor.input), as a view's
  // own. Not checked against the captures. Not with a view.
  std::optional<TensorSpec> declared_input;

  // "scope/key", or "key" in the default scope.
  std::string FullKey() const;
};

// Status payload (value: the gradient name) on the FailedPrecondition a traced
// step returns when nothing was sent for a traced gradient; lets a binding
// name its own call for sending one (Python: xdl_trace.send_gradient).
inline constexpr char kMissingGradientPayload[] = "xdl_trace/missing_gradient";

// The dtype of a C++ element type, for Registry::TraceVariable and friends:
// bool, float, double, and integers by width and signedness (the wire numbers
// kInt8..kInt64 and kUInt8..kUInt64 consecutively). float16/bfloat16 have no
// C++ type here: register those through EntrySpec with an explicit DType.
template <typename T>
constexpr DType DTypeOf() {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_arithmetic_v<U>, "xdl_trace: no DType for this element type");
  if constexpr (std::is_same_v<U, bool>) {
    return DType::kBool;
  } else if constexpr (std::is_floating_point_v<U>) {
    static_assert(sizeof(U) == 4 || sizeof(U) == 8, "xdl_trace: float or double only");
    return sizeof(U) == 4 ? DType::kFloat32 : DType::kFloat64;
  } else {
    constexpr int32_t kWidthIndex = sizeof(U) == 1   ? 0
                                    : sizeof(U) == 2 ? 1
                                    : sizeof(U) == 4 ? 2
                                                     : 3;
    constexpr DType kFirst = std::is_signed_v<U> ? DType::kInt8 : DType::kUInt8;
    return static_cast<DType>(static_cast<int32_t>(kFirst) + kWidthIndex);
  }
}

// Optional settings of the one-call registrations below.
struct TraceOptions {
  std::string scope;  // "" is the default scope.
  Summary summary;    // E.g. {BuiltinSummary::kStats}: the summary instead of the values.
};

// Thread-safe. Shared by every tracer started from it; registrations made
// after a tracer started do not change that tracer's header.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // InvalidArgument naming the key for an empty key, a full key already
  // registered (in any scope: "a/b" in scope "" clashes with "b" in scope
  // "a"), an invalid view (see EntrySpec), or a spec without exactly one
  // source. Nothing is added on error.
  absl::Status Register(EntrySpec spec);

  // One call for the common case: `data` (shape `shape`, C order) is stable
  // memory read in place at every traced step; the caller keeps it alive and
  // at the same address for as long as a tracer reads this registry:
  //   registry->TraceVariable("w", w.data(), {rows, cols});
  //   registry->TraceTensor("w_stats", w.data(), {rows, cols}, {"", {BuiltinSummary::kStats}});
  // Errors as Register's.
  template <typename T>
  absl::Status TraceTensor(const std::string& key, const T* data,
                           std::initializer_list<int64_t> shape, TraceOptions options = {}) {
    return RegisterView(EntryKind::kTensor, key, {DTypeOf<T>(), Shape(shape), data},
                        std::move(options));
  }
  template <typename T>
  absl::Status TraceVariable(const std::string& key, const T* data,
                             std::initializer_list<int64_t> shape, TraceOptions options = {}) {
    return RegisterView(EntryKind::kVariable, key, {DTypeOf<T>(), Shape(shape), data},
                        std::move(options));
  }
  // Read once, at the first traced step; later records carry an empty column.
  template <typename T>
  absl::Status TraceOnce(const std::string& key, const T* data,
                         std::initializer_list<int64_t> shape, TraceOptions options = {}) {
    return RegisterView(EntryKind::kOnce, key, {DTypeOf<T>(), Shape(shape), data},
                        std::move(options));
  }
  // A gradient the training code delivers each step with
  // SendGradient(gradient_name, ...), traced under `key`.
  absl::Status TraceGradient(const std::string& key, const std::string& gradient_name,
                             TraceOptions options = {});
  // A value computed at each traced step by `provider` (e.g. the loss).
  absl::Status TraceCallback(const std::string& key, TensorProvider provider,
                             TraceOptions options = {});

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
  absl::Status RegisterView(EntryKind kind, const std::string& key, TensorView view,
                            TraceOptions options);

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_REGISTRY_H_
