// Finds, dlopen()s and validates device-profiler plugins (xdl_trace/plugin/profiler_plugin.h).
#ifndef XDL_TRACE_PLUGIN_PLUGIN_LOADER_H_
#define XDL_TRACE_PLUGIN_PLUGIN_LOADER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "xdl_trace/plugin/profiler_plugin.h"

namespace xdl_trace {
namespace internal {

// Environment variable: ':'-separated directories searched for plugins by name.
inline constexpr char kPluginPathEnv[] = "XDL_TRACE_PLUGIN_PATH";

// Built-in tracer names and the library file each resolves to.
inline constexpr char kCuptiTracerName[] = "cupti";

// "libxdl_trace_<name>.so": the file a plugin called `name` is looked up as.
std::string PluginFileName(absl::string_view name);

// Directories searched for a plugin given by name, in order:
// XDL_TRACE_PLUGIN_PATH; then, relative to the file holding this code
// (dladdr), "<dir>/plugins" (a wheel: beside _core), "<dir>/xdl_trace/plugins"
// (an install: <prefix>/lib/xdl_trace/plugins beside libxdl_trace.so) and
// "<dir>"; last, in the build tree's static library only, the build's plugin
// folder. No path from the build tree is compiled into what is installed.
std::vector<std::string> PluginSearchDirs();

// Resolves a TraceConfig::device_tracers entry. An entry with a '/' or ending
// in ".so" is a path (must exist). Otherwise a name searched in
// PluginSearchDirs(); NotFound says "<file> not found in [<dirs searched>]".
// Messages start with "device_tracers:", the config key the entry came from.
absl::StatusOr<std::string> ResolvePlugin(absl::string_view name_or_path);

// Checks what a plugin's init filled in: ABI major equal to ours, struct_size
// at least the minimum for its minor version, profiler_type set, no null
// function. InvalidArgument naming `library` and the offending field.
absl::Status ValidateRegistration(const XdlTracePluginRegistration& registration,
                                  absl::string_view library);

class TfProfilerPlugin;

// A loaded, validated plugin library. Unloads (dlclose) on destruction, so it
// must outlive every profiler created from it.
//
// Two entry points, told apart by dlsym: our XDL_TRACE_PLUGIN_INIT_SYMBOL
// (xdl_trace/plugin/profiler_plugin.h), else TensorFlow's TF_InitProfiler
// (xdl_trace/plugin/tf_pluggable_profiler.h), which is run through
// TfProfilerPlugin behind the same registration.
// Threading: immutable after Load; use from any thread.
class PluginLibrary {
 public:
  // dlopen + dlsym(XDL_TRACE_PLUGIN_INIT_SYMBOL or TF_InitProfiler) + init +
  // validate. Errors name the library path and what failed (dlerror text, init
  // status, field). A library whose dlopen fails on an undefined TF_* symbol is
  // retried once TensorFlow's status functions are loaded (LoadTfStatusApi).
  static absl::StatusOr<std::unique_ptr<PluginLibrary>> Load(const std::string& path);

  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::string& path() const { return path_; }
  const std::string& profiler_type() const { return profiler_type_; }
  const XdlTracePluginRegistration& registration() const { return registration_; }
  // True for a TensorFlow pluggable-profiler plugin.
  bool is_tensorflow() const { return tf_plugin_ != nullptr; }
  // Creates a profiler: registration().create, or the TensorFlow adapter's.
  int32_t CreateProfiler(const XdlTraceProfilerOptions* options, XdlTraceProfiler** out,
                         XdlTracePluginError* error) const;

 private:
  PluginLibrary(std::string path, void* handle, const XdlTracePluginRegistration& registration,
                std::unique_ptr<TfProfilerPlugin> tf_plugin);

  const std::string path_;
  void* const handle_;
  std::unique_ptr<TfProfilerPlugin> tf_plugin_;  // Null for our own ABI.
  const XdlTracePluginRegistration registration_;
  const std::string profiler_type_;
};

// Fixed-size error buffer for plugin calls.
class PluginErrorBuffer {
 public:
  PluginErrorBuffer();
  XdlTracePluginError* get() { return &error_; }
  // The plugin's message, or "(no message)".
  std::string message() const;

 private:
  char text_[512];
  XdlTracePluginError error_;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGIN_PLUGIN_LOADER_H_
