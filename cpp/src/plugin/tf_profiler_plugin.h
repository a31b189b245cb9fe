// Runs a TensorFlow pluggable-profiler plugin (TF_InitProfiler, RFC 389) behind our plugin ABI.
#ifndef XDL_TRACE_PLUGIN_TF_PROFILER_PLUGIN_H_
#define XDL_TRACE_PLUGIN_TF_PROFILER_PLUGIN_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/plugin/profiler_plugin.h"
#include "xdl_trace/plugin/tf_pluggable_profiler.h"

namespace xdl_trace {
namespace internal {

// The library exporting TensorFlow's TF_Status functions, found like a plugin
// named "tf_c" (PluginSearchDirs()).
inline constexpr char kTfStatusLibraryName[] = "tf_c";

// TensorFlow's status functions, as a plugin loaded RTLD_LOCAL resolves them.
struct TfStatusApi {
  TF_Status* (*new_status)(void) = nullptr;
  void (*delete_status)(TF_Status*) = nullptr;
  void (*set_status)(TF_Status*, TF_Code, const char*) = nullptr;
  TF_Code (*get_code)(const TF_Status*) = nullptr;
  const char* (*message)(const TF_Status*) = nullptr;
};

// Makes TF_NewStatus, TF_DeleteStatus, TF_SetStatus, TF_GetCode and TF_Message
// resolvable by a plugin that leaves them undefined, and returns them. When
// the process has them in its global scope already (TensorFlow loaded with
// RTLD_GLOBAL) those are used, so plugin and core agree on one TF_Status;
// otherwise libxdl_trace_tf_c.so is dlopen()ed RTLD_NOW | RTLD_GLOBAL |
// RTLD_NODELETE first. Thread-safe; a success is remembered for the process.
// Errors name the folders searched.
absl::StatusOr<TfStatusApi> LoadTfStatusApi();

// "INVALID_ARGUMENT" for TF_INVALID_ARGUMENT; "code N" for unknown codes.
std::string TfCodeName(TF_Code code);

// One loaded TensorFlow profiler plugin: TF_InitProfiler called once, its
// TP_Profiler and TP_ProfilerFns kept (in the core's memory, as the RFC says)
// until destruction, which calls the plugin's destroy functions. As
// TensorFlow, one profiler per plugin: CreateProfiler hands out sessions over
// the same TP_Profiler, which must not run at the same time.
//
// The struct_size rules (docs/device-tracing.md): the core passes the
// TF_*_STRUCT_SIZE it was built with; a plugin reports its own. A field the
// plugin's struct_size does not cover is absent (an older plugin): required
// ones (TP_Profiler.type, the three TP_ProfilerFns functions) are an error,
// the destroy functions are then not called. A larger struct_size (a newer
// plugin) is fine: fields past ours are ignored, and each struct lives in a
// zeroed block of kStructRoom bytes, so a newer plugin writing its trailing
// fields does not overwrite the core's memory.
//
// Threading: as XdlTracePluginRegistration (one thread at a time).
class TfProfilerPlugin {
 public:
  static constexpr size_t kStructRoom = 512;
  // XdlTraceProfilerOptions::max_buffer_bytes when it is 0. One collect takes
  // an XSpace of at most 4 x max_buffer_bytes; a larger one is refused (its
  // events lost, counted as a lost buffer, said in the status).
  static constexpr uint64_t kDefaultMaxBufferBytes = 64ull << 20;

  // Calls `init` and validates what it filled in. Errors name `path`: a
  // failed init with TensorFlow's code name and the plugin's message
  // (FailedPrecondition), a bad field (InvalidArgument).
  static absl::StatusOr<std::unique_ptr<TfProfilerPlugin>> Init(TF_InitProfilerFn init,
                                                                const std::string& path,
                                                                const TfStatusApi& api);
  ~TfProfilerPlugin();
  TfProfilerPlugin(const TfProfilerPlugin&) = delete;
  TfProfilerPlugin& operator=(const TfProfilerPlugin&) = delete;

  // TP_Profiler.type ("GPU"): the tracer's name.
  const std::string& type() const { return type_; }
  const std::string& path() const { return path_; }
  // Our ABI over this plugin: start/stop/collect/step_*/destroy of profilers
  // made by CreateProfiler. Its `create` refuses (it cannot know the plugin):
  // call CreateProfiler.
  const XdlTracePluginRegistration& registration() const { return registration_; }
  int32_t CreateProfiler(const XdlTraceProfilerOptions* options, XdlTraceProfiler** out,
                         XdlTracePluginError* error);

  // For the session functions (tf_profiler_plugin.cc).
  struct Session;
  const TfStatusApi& api() const { return api_; }
  const TP_Profiler* profiler() const { return &profiler_.value; }
  const TP_ProfilerFns& fns() const { return fns_.value; }

 private:
  TfProfilerPlugin(std::string path, const TfStatusApi& api);

  // A C struct in a zeroed block of kStructRoom bytes.
  template <typename T>
  union Padded {
    T value;
    unsigned char room[kStructRoom];
  };
  static_assert(sizeof(TF_ProfilerRegistrationParams) < kStructRoom, "room for newer fields");

  const std::string path_;
  const TfStatusApi api_;
  Padded<TP_Profiler> profiler_;
  Padded<TP_ProfilerFns> fns_;
  void (*destroy_profiler_)(TP_Profiler*) = nullptr;
  void (*destroy_profiler_fns_)(TP_ProfilerFns*) = nullptr;
  std::string type_;
  XdlTracePluginRegistration registration_;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGIN_TF_PROFILER_PLUGIN_H_
