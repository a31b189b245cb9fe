// Range checks of TraceConfig fields.
#include "xdl_trace/config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace xdl_trace {

absl::Status TraceConfig::Validate() const {
  if (output_dir.empty()) {
    return absl::InvalidArgumentError("config: output_dir is required");
  }
  if (output_file_name.empty() || output_file_name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("config: output_file_name '", output_file_name,
                                                   "' must be non-empty and contain no '/'"));
  }
  if (rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("config: rank ", rank, " is negative"));
  }
  if (!(max_file_m_size > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: max_file_m_size ", max_file_m_size, " must be > 0"));
  }
  if (!(max_pending_mb > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: max_pending_mb ", max_pending_mb, " must be > 0"));
  }
  if (!(device_collect_interval_s >= 0) || std::isinf(device_collect_interval_s)) {
    return absl::InvalidArgumentError(absl::StrCat("config: device_collect_interval_s ",
                                                   device_collect_interval_s, " must be >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace xdl_trace
