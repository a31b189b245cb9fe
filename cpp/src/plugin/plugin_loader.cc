// Finds, dlopen()s and validates device-profiler plugins.
#include "plugin/plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/file_kind.h"
#include "plugin/tf_profiler_plugin.h"

namespace xdl_trace {
namespace internal {
namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A plugin named by path (it has a '/' or ends in ".so"), resolved once to the
// absolute, canonical path of the regular file it names, so dlopen loads
// exactly the file checked here: dlopen searches the library path for a name
// without '/', which would load another library than "./libX.so" (issue 24).
absl::StatusOr<std::string> ResolvePluginPath(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("device_tracers: plugin '", path, "' does not exist"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("device_tracers: plugin '", path, "': ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_tracers: plugin '", path, "' is not a regular file (", FileKind(st.st_mode), ")"));
  }
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_tracers: plugin '", path, "': ", std::strerror(errno)));
  }
  std::string absolute(resolved);
  std::free(resolved);
  return absolute;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Minimum registration size for a plugin reporting ABI minor `minor`. Minors
// newer than ours must at least cover everything we know.
size_t MinimumRegistrationSize(uint32_t minor) {
  (void)minor;  // 1.1 added no field to 1.0 (only collect's threads changed).
  return XDL_TRACE_PLUGIN_REGISTRATION_SIZE_V1_0;
}

// Edit distance between `a` and `b` (insertions, deletions, substitutions).
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The tracer names a `device_tracers` entry may give: "cupti" (this project's plugin, built
// where the CUDA toolkit is) and every libxdl_trace_<name>.so in `dirs`.
std::vector<std::string> KnownTracerNames(const std::vector<std::string>& dirs) {
  std::vector<std::string> names = {"cupti"};
  constexpr absl::string_view kPrefix = "libxdl_trace_", kSuffix = ".so";
  for (const std::string& dir : dirs) {
    DIR* listing = opendir(dir.c_str());
    if (listing == nullptr) continue;
    while (const dirent* entry = readdir(listing)) {
      const absl::string_view file = entry->d_name;
      if (!absl::StartsWith(file, kPrefix) || !absl::EndsWith(file, kSuffix)) continue;
      std::string name(file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size()));
      if (name != "tf_c" && std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(std::move(name));  // tf_c: a support library, not a tracer.
      }
    }
    closedir(listing);
  }
  return names;
}

// " (did you mean 'cupti'?)" for a near miss of a known tracer name, else "".
std::string DidYouMean(absl::string_view name, const std::vector<std::string>& dirs) {
  std::string best;
  size_t best_distance = 3;  // At most two edits away.
  for (const std::string& known : KnownTracerNames(dirs)) {
    const size_t distance = EditDistance(name, known);
    if (distance > 0 && distance < best_distance) {
      best_distance = distance;
      best = known;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)");
}

}  // namespace

std::string PluginFileName(absl::string_view name) {
  return absl::StrCat("libxdl_trace_", name, ".so");
}

std::vector<std::string> PluginSearchDirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv(kPluginPathEnv); env != nullptr) {
    for (absl::string_view dir : absl::StrSplit(env, ':', absl::SkipEmpty())) {
      dirs.emplace_back(dir);
    }
  }
  // The file holding this code: the installed libxdl_trace.so, the Python
  // extension _core, or an executable the static library was linked into.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&PluginSearchDirs), &info) != 0 && info.dli_fname != nullptr &&
      std::strchr(info.dli_fname, '/') != nullptr) {
    const std::string dir = DirName(info.dli_fname);
    dirs.push_back(dir + "/plugins");  // A wheel: plugins/ beside _core.
    // An install: <prefix>/lib/xdl_trace/plugins (not for _core, in the package's xdl_trace/).
    if (!absl::EndsWith(dir, "/xdl_trace")) dirs.push_back(dir + "/xdl_trace/plugins");
    dirs.push_back(dir);
  }
#ifdef XDL_TRACE_BUILD_TREE_PLUGIN_DIR
  dirs.emplace_back(XDL_TRACE_BUILD_TREE_PLUGIN_DIR);  // The build tree's static library only.
#endif
  return dirs;
}

absl::StatusOr<std::string> ResolvePlugin(absl::string_view name_or_path) {
  if (name_or_path.empty()) {
    return absl::InvalidArgumentError("device_tracers: empty tracer name");
  }
  if (absl::StrContains(name_or_path, '/') || absl::EndsWith(name_or_path, ".so")) {
    return ResolvePluginPath(std::string(name_or_path));
  }
  const std::vector<std::string> dirs = PluginSearchDirs();
  const std::string file = PluginFileName(name_or_path);
  for (const std::string& dir : dirs) {
    std::string candidate = absl::StrCat(dir, "/", file);
    if (IsRegularFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("device_tracers: '", name_or_path, "'",
                                          DidYouMean(name_or_path, dirs), ": ", file,
                                          " not found in [", absl::StrJoin(dirs, ", "), "] (set ",
                                          kPluginPathEnv, " or give the plugin's path)"));
}

absl::Status ValidateRegistration(const XdlTracePluginRegistration& r, absl::string_view library) {
  auto bad = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_tracers: plugin '", library, "': ", field, " ", why));
  };
  if (r.abi_major != XDL_TRACE_PLUGIN_ABI_MAJOR) {
    return bad("abi_major", absl::StrCat("is ", r.abi_major, ", this build of xdl_trace needs ",
                                         XDL_TRACE_PLUGIN_ABI_MAJOR));
  }
  const size_t minimum = MinimumRegistrationSize(r.abi_minor);
  if (r.struct_size < minimum) {
    return bad("struct_size", absl::StrCat("is ", r.struct_size, ", ABI ", r.abi_major, ".",
                                           r.abi_minor, " needs at least ", minimum));
  }
  if (r.profiler_type == nullptr || r.profiler_type[0] == '\0') {
    return bad("profiler_type", "is null or empty");
  }
  const std::pair<const char*, bool> functions[] = {
      {"create", r.create != nullptr},
      {"start", r.start != nullptr},
      {"stop", r.stop != nullptr},
      {"collect", r.collect != nullptr},
      {"step_begin", r.step_begin != nullptr},
      {"step_end", r.step_end != nullptr},
      {"destroy", r.destroy != nullptr},
  };
  for (const auto& [name, present] : functions) {
    if (!present) return bad(name, "is null");
  }
  return absl::OkStatus();
}

namespace {

// dlopen with the flags every plugin gets: RTLD_LOCAL keeps each plugin's
// symbols (and its protobuf, if any) private; RTLD_NODELETE keeps the code
// mapped after dlclose: a plugin may leave pointers to itself behind
// (libcupti's buffer callbacks, threads it has not joined yet), and unmapping
// them would crash far from the cause.
void* OpenPlugin(const std::string& path, std::string* why) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* text = ::dlerror();
    *why = text != nullptr ? text : "?";
  }
  return handle;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PluginLibrary>> PluginLibrary::Load(const std::string& path) {
  std::string why;
  void* handle = OpenPlugin(path, &why);
  if (handle == nullptr && absl::StrContains(why, "undefined symbol: TF_")) {
    // A TensorFlow plugin linked against TensorFlow's C API: provide its
    // status functions in the global scope, then try again.
    absl::StatusOr<TfStatusApi> api = LoadTfStatusApi();
    if (!api.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device_tracers: plugin '", path, "': dlopen failed: ", why,
          "; the TensorFlow status functions could not be provided: ", api.status().message()));
    }
    handle = OpenPlugin(path, &why);
    if (handle == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device_tracers: plugin '", path, "': dlopen failed: ", why,
          " (xdl_trace provides only TensorFlow's TF_NewStatus, TF_DeleteStatus, TF_SetStatus, "
          "TF_GetCode and TF_Message)"));
    }
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("device_tracers: plugin '", path, "': dlopen failed: ", why));
  }
  ::dlerror();
  if (void* symbol = ::dlsym(handle, XDL_TRACE_PLUGIN_INIT_SYMBOL); symbol != nullptr) {
    XdlTracePluginRegistration registration;
    std::memset(&registration, 0, sizeof(registration));
    registration.struct_size = sizeof(registration);
    const int32_t rc = reinterpret_cast<XdlTracePluginInitFn>(symbol)(&registration);
    if (rc != XDL_TRACE_PLUGIN_OK) {
      ::dlclose(handle);
      return absl::InternalError(absl::StrCat(
          "device_tracers: plugin '", path, "': ", XDL_TRACE_PLUGIN_INIT_SYMBOL, " returned ", rc));
    }
    if (absl::Status valid = ValidateRegistration(registration, path); !valid.ok()) {
      ::dlclose(handle);
      return valid;
    }
    return std::unique_ptr<PluginLibrary>(new PluginLibrary(path, handle, registration, nullptr));
  }
  void* tf_init = ::dlsym(handle, XDL_TRACE_TF_INIT_PROFILER_SYMBOL);
  if (tf_init == nullptr) {
    ::dlclose(handle);
    return absl::InvalidArgumentError(
        absl::StrCat("device_tracers: plugin '", path, "': no symbol ",
                     XDL_TRACE_PLUGIN_INIT_SYMBOL, " (xdl_trace plugin ABI) or ",
                     XDL_TRACE_TF_INIT_PROFILER_SYMBOL, " (TensorFlow pluggable profiler)"));
  }
  absl::StatusOr<TfStatusApi> api = LoadTfStatusApi();
  absl::StatusOr<std::unique_ptr<TfProfilerPlugin>> tf_plugin =
      api.ok() ? TfProfilerPlugin::Init(reinterpret_cast<TF_InitProfilerFn>(tf_init), path, *api)
               : api.status();
  if (!tf_plugin.ok()) {
    ::dlclose(handle);
    return tf_plugin.status();
  }
  const XdlTracePluginRegistration registration = (*tf_plugin)->registration();
  return std::unique_ptr<PluginLibrary>(
      new PluginLibrary(path, handle, registration, std::move(*tf_plugin)));
}

PluginLibrary::PluginLibrary(std::string path, void* handle,
                             const XdlTracePluginRegistration& registration,
                             std::unique_ptr<TfProfilerPlugin> tf_plugin)
    : path_(std::move(path)),
      handle_(handle),
      tf_plugin_(std::move(tf_plugin)),
      registration_(registration),
      profiler_type_(registration.profiler_type) {}

PluginLibrary::~PluginLibrary() {
  // The TensorFlow plugin's destroy functions run while its code is loaded.
  tf_plugin_.reset();
  ::dlclose(handle_);
}

int32_t PluginLibrary::CreateProfiler(const XdlTraceProfilerOptions* options,
                                      XdlTraceProfiler** out, XdlTracePluginError* error) const {
  if (tf_plugin_ != nullptr) return tf_plugin_->CreateProfiler(options, out, error);
  return registration_.create(options, out, error);
}

PluginErrorBuffer::PluginErrorBuffer() {
  text_[0] = '\0';
  std::memset(&error_, 0, sizeof(error_));
  error_.struct_size = sizeof(error_);
  error_.message = text_;
  error_.capacity = sizeof(text_);
}

std::string PluginErrorBuffer::message() const {
  // Guard against a plugin that forgot the terminating NUL.
  const size_t n = ::strnlen(text_, sizeof(text_));
  return n == 0 ? std::string("(no message)") : std::string(text_, n);
}

}  // namespace internal
}  // namespace xdl_trace
