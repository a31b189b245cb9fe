// Range checks of TraceConfig fields: every impossible value is refused here, naming its key.
#include "xdl_trace/config.h"

#include <limits.h>

#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"

namespace xdl_trace {
namespace {

absl::Status Bad(absl::string_view key, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("xdl_trace: config '", key, "': ", value, " is invalid; expected ", expected));
}

// `value` quoted for a message, NUL and other unprintable bytes C-escaped.
std::string Quoted(absl::string_view value) { return absl::StrCat("'", absl::CEscape(value), "'"); }

absl::Status CheckFiniteAbove(absl::string_view key, double value, bool zero_ok) {
  const bool in_range = zero_ok ? value >= 0 : value > 0;
  if (std::isfinite(value) && in_range) return absl::OkStatus();
  return Bad(key, absl::StrCat(value), zero_ok ? "a finite number >= 0" : "a finite number > 0");
}

}  // namespace

const char* WriteModeName(WriteMode mode) {
  switch (mode) {
    case WriteMode::kAuto:
      return "auto";
    case WriteMode::kIoThread:
      return "io_thread";
    case WriteMode::kInline:
      return "inline";
  }
  return "unknown";
}

absl::Status TraceConfig::Validate() const {
  constexpr absl::string_view kNul("\0", 1);
  if (output_dir.empty()) {
    return absl::InvalidArgumentError("xdl_trace: config 'output_dir' is required");
  }
  if (absl::string_view(output_dir).find(kNul) != absl::string_view::npos) {
    return Bad("output_dir", Quoted(output_dir), "a path without NUL bytes");
  }
  if (output_dir.size() >= PATH_MAX) {
    return Bad("output_dir", absl::StrCat("a path of ", output_dir.size(), " bytes"),
               absl::StrCat("fewer than ", PATH_MAX));
  }
  const absl::string_view name = output_file_name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != absl::string_view::npos ||
      name.find(kNul) != absl::string_view::npos) {
    return Bad("output_file_name", Quoted(name),
               "a non-empty file name without '/' or NUL bytes, not '.' or '..'");
  }
  if (name.size() > kMaxOutputFileNameBytes) {
    return Bad(
        "output_file_name", absl::StrCat("a name of ", name.size(), " bytes"),
        absl::StrCat("at most ", kMaxOutputFileNameBytes, " bytes (file names must fit NAME_MAX)"));
  }
  if (rank < 0) return Bad("rank", absl::StrCat(rank), "an integer >= 0");
  XDL_RETURN_IF_ERROR(CheckFiniteAbove("max_file_m_size", max_file_m_size, /*zero_ok=*/false));
  XDL_RETURN_IF_ERROR(CheckFiniteAbove("max_pending_mb", max_pending_mb, /*zero_ok=*/false));
  if (!std::isfinite(meta_interval_s)) {
    return Bad("meta_interval_s", absl::StrCat(meta_interval_s),
               "a finite number of seconds (<= 0: no timed refresh)");
  }
  XDL_RETURN_IF_ERROR(CheckFiniteAbove("device_collect_interval_s", device_collect_interval_s,
                                       /*zero_ok=*/true));
  if (write_mode == WriteMode::kInline && overflow == OverflowPolicy::kDrop) {
    return absl::InvalidArgumentError(
        "xdl_trace: config 'write_mode': 'inline' cannot be combined with 'overflow': 'drop' "
        "(inline makes the training thread wait for the disk, which 'drop' promises never to do); "
        "use write_mode 'io_thread' or 'auto', or overflow 'block'");
  }
  return absl::OkStatus();
}

}  // namespace xdl_trace
