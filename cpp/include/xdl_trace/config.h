// Configuration of one tracer: where files go, how they roll over, how the queue behaves.
#ifndef XDL_TRACE_CONFIG_H_
#define XDL_TRACE_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace xdl_trace {

// What Step() does when max_pending_mb of records wait for the IO thread.
enum class OverflowPolicy {
  kBlock,  // Wait for the IO thread: loses nothing (default).
  kDrop,   // Drop the new record; counted in stats and in Meta.
};

// Who writes a traced step's record to the data file (docs/writer.md, "Write
// modes"). The IO thread owns the file in every mode.
enum class WriteMode {
  // kIoThread, on every machine (it measured ahead of kInline on this
  // project's benchmark machine whether or not a core was spare).
  kAuto,
  // Step() copies the tensors into a record buffer and queues it; the IO
  // thread writes it while training goes on.
  kIoThread,
  // Step() hands the IO thread the framing bytes plus pointers to the
  // tensors' own memory (no copy) and waits until it is written: training
  // waits for the write, which then never competes with compute threads. For
  // machines where the IO thread's preemption of compute costs more than a
  // synchronous write. Not with OverflowPolicy::kDrop (it would block on a
  // slow disk).
  kInline,
};

// The config keys' values, in enumerator order: kOverflowPolicyNames[int(policy)].
inline constexpr const char* kOverflowPolicyNames[] = {"block", "drop"};
inline constexpr const char* kWriteModeNames[] = {"auto", "io_thread", "inline"};

// "auto", "io_thread" or "inline": the config key's values.
const char* WriteModeName(WriteMode mode);

// What Step() does when a traced gradient was not sent for this step.
enum class MissingGradientPolicy {
  kError,        // Step fails with FailedPrecondition naming the key (default).
  kEmptyColumn,  // Write an empty float32 column, count it in stats and list
                 // its error in the step's StepNotes (the Python hook's
                 // on_error="warn").
};

// Who and what a run is: written in the Header of every data file of the run
// (xdl.proto.RunInfo, docs/format.md "Runs") unless left empty, as a bare
// TraceWriter does. Tracer::Start fills hostname, pid and start_time_ms when
// they are unset, so every tracer's files carry it.
struct RunInfo {
  int32_t world_size = 0;   // Processes in the job; 0: unknown.
  int32_t local_rank = -1;  // Rank on this host; -1: unknown.
  std::string hostname;
  int64_t pid = 0;
  std::vector<std::string> argv;
  int64_t start_time_ms = 0;  // Milliseconds since the Unix epoch.
  std::string version;        // Of the xdl_trace that wrote the run.
  std::string metadata_json;  // User metadata, a JSON object; "" for none.

  // True when nothing is recorded (the Header stays XDL's keys-only Header).
  bool empty() const {
    return world_size == 0 && local_rank == -1 && hostname.empty() && pid == 0 && argv.empty() &&
           start_time_ms == 0 && version.empty() && metadata_json.empty();
  }
};

// Longest output_file_name (bytes) that Validate accepts: the longest file the
// writer creates, "train.{name}.{rank}.{index}.meta.tmp-{pid}-{serial}" with
// 10-digit rank and pid, 18-digit index and 20-digit serial (77 bytes around
// the name), fits NAME_MAX (255).
inline constexpr size_t kMaxOutputFileNameBytes = 178;

// Validate checks, and names the key of the first field that fails:
//   output_dir        non-empty, no NUL byte, shorter than PATH_MAX; may be a
//                     symbolic link to a directory (files inside never are).
//   output_file_name  non-empty, no NUL byte and no '/', not "." or "..", at
//                     most kMaxOutputFileNameBytes.
//   rank              >= 0.
//   max_file_m_size, max_pending_mb   finite and > 0. A huge finite value
//                     means "no practical limit": byte counts saturate at
//                     INT64_MAX, never wrap.
//   meta_interval_s   finite (<= 0 is how to say "never on a timer"; inf and
//                     NaN are rejected, so no spelling is ambiguous). A huge
//                     finite value saturates to "never".
//   device_collect_interval_s   finite and >= 0.
//   device_fence_timeout_s      finite and > 0.
//   write_mode        kInline only with overflow kBlock.
struct TraceConfig {
  std::string output_dir;  // Required; created if missing.
  std::string output_file_name = "trace";
  bool is_training = true;  // "train.*" files, else "test.*".
  int32_t rank = 0;
  double max_file_m_size = 300;  // Megabytes (1e6 bytes) per data file.
  double max_pending_mb = 256;   // Queue bound, megabytes (1e6 bytes).
  OverflowPolicy overflow = OverflowPolicy::kBlock;
  WriteMode write_mode = WriteMode::kAuto;
  MissingGradientPolicy missing_gradient = MissingGradientPolicy::kError;
  bool fsync = true;            // fsync data at rollover and close.
  double meta_interval_s = 10;  // Meta refresh period; <= 0 disables, must be finite.
  std::string run_id;           // Empty: TraceWriter::Open makes one (the one place).
  // Device tracers to start with the tracer: built-in names ("cupti") or
  // plugin paths (docs/device-tracing.md). Empty: none.
  std::vector<std::string> device_tracers;
  // Device tracers are collected at the first step after this many seconds;
  // 0 collects at every step. Environment XDL_TRACE_DEVICE_COLLECT_INTERVAL_S
  // overrides it.
  double device_collect_interval_s = 1.0;
  // Options for every device plugin, "key=value;..." (docs/device-tracing.md).
  // Environment XDL_TRACE_PLUGIN_CONFIG overrides it.
  std::string device_plugin_config;
  // The longest the IO thread waits for a device tensor's copies (its fence),
  // counted from when they were enqueued, and the longest a step waits for a
  // free staging buffer: past it the record is dropped (deferred_failed), the
  // records behind it are written. A healthy device never comes near it.
  double device_fence_timeout_s = 60;
  // Recorded in every file's Header (see RunInfo).
  RunInfo run;

  // InvalidArgument naming the field when a value is out of range.
  absl::Status Validate() const;
  // "train" or "test".
  const char* Prefix() const { return is_training ? "train" : "test"; }
  // write_mode with kAuto resolved as the core does (kIoThread).
  WriteMode ResolvedWriteMode() const {
    return write_mode == WriteMode::kInline ? WriteMode::kInline : WriteMode::kIoThread;
  }
};

// One user config key (docs/python.md, "Config"). ConfigKeys() is the one list of them: the
// binding derives TraceConfig's Python attributes and _core.config_keys() from it, hook.py its
// key names, type checks and defaults, and Validate checks each number's range, naming the key.
struct ConfigKey {
  // What a number must be: anything, finite, finite and > 0, finite and >= 0.
  enum class Range { kAny, kFinite, kPositive, kNonNegative };
  using Field =
      std::variant<std::string TraceConfig::*, bool TraceConfig::*, int32_t TraceConfig::*,
                   double TraceConfig::*, std::vector<std::string> TraceConfig::*,
                   OverflowPolicy TraceConfig::*, WriteMode TraceConfig::*>;
  const char* name;
  Field field;
  Range range = Range::kAny;
  const char* expected = nullptr;  // The error's "expected ..." when not the range's own words.
};

// The user config keys in documentation order (hook.py adds its own "on_error").
const std::vector<ConfigKey>& ConfigKeys();

}  // namespace xdl_trace

#endif  // XDL_TRACE_CONFIG_H_
