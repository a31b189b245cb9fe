// ValueGroup: one producer call per step feeds several entries' providers.
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "xdl_trace/registry.h"

namespace xdl_trace {

// Shared by the group and its members' providers (which a tracer's entries
// keep): the values are guarded by `mu`.
struct ValueGroup::State {
  internal::Mutex mu;
  std::vector<CapturedTensor> values ABSL_GUARDED_BY(mu);
  std::vector<bool> set ABSL_GUARDED_BY(mu);
};

ValueGroup::ValueGroup(size_t size) : state_(std::make_shared<State>()) {
  internal::MutexLock lock(&state_->mu);
  state_->values.resize(size);
  state_->set.assign(size, false);
}

ValueGroup::~ValueGroup() = default;

size_t ValueGroup::size() const {
  internal::MutexLock lock(&state_->mu);
  return state_->values.size();
}

TensorProvider ValueGroup::Member(size_t i) {
  std::shared_ptr<State> state = state_;
  return [state, i]() -> absl::StatusOr<CapturedTensor> {
    internal::MutexLock lock(&state->mu);
    if (i >= state->values.size() || !state->set[i]) {
      return absl::FailedPreconditionError(
          absl::StrCat("no value of this group member was set for this step (member ", i,
                       "; the producer sets the group's values before each traced step)"));
    }
    state->set[i] = false;
    return std::move(state->values[i]);
  };
}

absl::Status ValueGroup::Set(std::vector<CapturedTensor> values) {
  internal::MutexLock lock(&state_->mu);
  if (values.size() != state_->values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ValueGroup::Set: ", values.size(), " values for ", state_->values.size(), " members"));
  }
  state_->values = std::move(values);
  state_->set.assign(state_->values.size(), true);
  return absl::OkStatus();
}

}  // namespace xdl_trace
