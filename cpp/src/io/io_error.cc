// Marks file-system failures of the writer so that every layer above can tell them from bad input.
#include "io/io_error.h"

#include "absl/strings/cord.h"

namespace xdl_trace {
namespace internal {

absl::Status IoError(int errno_value, absl::string_view message) {
  return MarkIoError(absl::ErrnoToStatus(errno_value, message));
}

absl::Status MarkIoError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kIoErrorPayload, absl::Cord("1"));
  return status;
}

bool IsIoError(const absl::Status& status) {
  return status.GetPayload(kIoErrorPayload).has_value();
}

}  // namespace internal
}  // namespace xdl_trace
