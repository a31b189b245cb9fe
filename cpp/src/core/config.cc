// The config keys' table (ConfigKeys) and TraceConfig's range checks, each error naming its key.
#include "xdl_trace/config.h"

#include <limits.h>

#include <cmath>
#include <iterator>
#include <variant>
#include <vector>

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

// The range check of one number-valued row of ConfigKeys().
absl::Status CheckRange(const ConfigKey& key, double value, bool integer) {
  using Range = ConfigKey::Range;
  const bool finite = std::isfinite(value);
  bool ok = true;
  const char* expected = "a finite number";
  switch (key.range) {
    case Range::kAny:
      return absl::OkStatus();
    case Range::kFinite:
      ok = finite;
      break;
    case Range::kPositive:
      ok = finite && value > 0;
      expected = integer ? "an integer > 0" : "a finite number > 0";
      break;
    case Range::kNonNegative:
      ok = finite && value >= 0;
      expected = integer ? "an integer >= 0" : "a finite number >= 0";
      break;
  }
  if (ok) return absl::OkStatus();
  return Bad(key.name, absl::StrCat(value), key.expected != nullptr ? key.expected : expected);
}

}  // namespace

const char* WriteModeName(WriteMode mode) {
  const auto index = static_cast<size_t>(mode);
  return index < std::size(kWriteModeNames) ? kWriteModeNames[index] : "unknown";
}

const std::vector<ConfigKey>& ConfigKeys() {
  using Range = ConfigKey::Range;
  using C = TraceConfig;
  // Built once, never destroyed (no teardown order issues).
  static const std::vector<ConfigKey>* keys = new std::vector<ConfigKey>{
      {"output_dir", &C::output_dir},
      {"max_file_m_size", &C::max_file_m_size, Range::kPositive},
      {"output_file_name", &C::output_file_name},
      {"rank", &C::rank, Range::kNonNegative},
      {"max_pending_mb", &C::max_pending_mb, Range::kPositive},
      {"overflow", &C::overflow},
      {"write_mode", &C::write_mode},
      {"fsync", &C::fsync},
      {"meta_interval_s", &C::meta_interval_s, Range::kFinite,
       "a finite number of seconds (<= 0: no timed refresh)"},
      {"device_tracers", &C::device_tracers},
      {"device_collect_interval_s", &C::device_collect_interval_s, Range::kNonNegative},
      {"device_plugin_config", &C::device_plugin_config},
      {"device_fence_timeout_s", &C::device_fence_timeout_s, Range::kPositive},
  };
  return *keys;
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
  for (const ConfigKey& key : ConfigKeys()) {
    if (auto* field = std::get_if<double TraceConfig::*>(&key.field)) {
      XDL_RETURN_IF_ERROR(CheckRange(key, this->**field, /*integer=*/false));
    } else if (auto* field = std::get_if<int32_t TraceConfig::*>(&key.field)) {
      XDL_RETURN_IF_ERROR(CheckRange(key, this->**field, /*integer=*/true));
    }
  }
  if (write_mode == WriteMode::kInline && overflow == OverflowPolicy::kDrop) {
    return absl::InvalidArgumentError(
        "xdl_trace: config 'write_mode': 'inline' cannot be combined with 'overflow': 'drop' "
        "(inline makes the training thread wait for the disk, which 'drop' promises never to do); "
        "use write_mode 'io_thread' or 'auto', or overflow 'block'");
  }
  return absl::OkStatus();
}

}  // namespace xdl_trace
