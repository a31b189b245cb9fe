// Runs a TensorFlow pluggable-profiler plugin (TF_InitProfiler, RFC 389) behind our plugin ABI.
#include "plugin/tf_profiler_plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "device_trace.pb.h"
#include "plugin/plugin_loader.h"
#include "plugin/xspace_to_device_trace.h"
#include "xplane.pb.h"

namespace xdl_trace {
namespace internal {

// What one CreateProfiler made: the core's XdlTraceProfiler handle points here.
// Threads (ABI 1.1): the training thread calls everything but collect, which
// the core's collector thread may call meanwhile; `steps` is the one thing
// both touch, under steps_mu.
struct TfProfilerPlugin::Session {
  struct Step {
    uint64_t id;
    int64_t begin_ns;
  };
  // Steps kept for attributing events by time: more than enough for events
  // collected every device_collect_interval_s.
  static constexpr size_t kMaxSteps = 1 << 16;

  TfProfilerPlugin* plugin = nullptr;
  // Largest XSpace taken from the plugin in one collect (its size call says
  // how much it wants; an absurd size must not become an allocation).
  uint64_t max_xspace_bytes = 0;
  bool running = false;
  mutable Mutex steps_mu;
  std::deque<Step> steps ABSL_GUARDED_BY(steps_mu);  // Begin times ascending.
  std::string snapshot;  // Serialized DeviceTrace between the two collect calls.
  bool has_snapshot = false;

  // The step last begun at or before `time_ns` (0: none).
  uint64_t StepAt(int64_t time_ns) const {
    MutexLock lock(&steps_mu);
    auto after = std::upper_bound(steps.begin(), steps.end(), time_ns,
                                  [](int64_t t, const Step& s) { return t < s.begin_ns; });
    return after == steps.begin() ? 0 : std::prev(after)->id;
  }
};

namespace {

using Session = TfProfilerPlugin::Session;

Session* AsSession(XdlTraceProfiler* profiler) { return reinterpret_cast<Session*>(profiler); }

void SetError(XdlTracePluginError* error, const std::string& message) {
  if (error == nullptr || error->message == nullptr || error->capacity == 0) return;
  std::snprintf(error->message, error->capacity, "%s", message.c_str());
}

// A TF_Status for one call, freed with the plugin's (process's) functions.
class ScopedTfStatus {
 public:
  explicit ScopedTfStatus(const TfStatusApi& api) : api_(api), status_(api.new_status()) {}
  ~ScopedTfStatus() { api_.delete_status(status_); }
  ScopedTfStatus(const ScopedTfStatus&) = delete;
  ScopedTfStatus& operator=(const ScopedTfStatus&) = delete;
  TF_Status* get() { return status_; }
  bool ok() const { return status_ == nullptr || api_.get_code(status_) == TF_OK; }
  TF_Code code() const { return status_ == nullptr ? TF_OK : api_.get_code(status_); }
  // "INVALID_ARGUMENT: <message>".
  std::string ToString() const {
    if (status_ == nullptr) return "out of memory for a TF_Status";
    const char* message = api_.message(status_);
    return absl::StrCat(TfCodeName(code()), ": ", message != nullptr ? message : "");
  }

 private:
  const TfStatusApi& api_;
  TF_Status* const status_;
};

// Our status code for a plugin's failure.
int32_t FromTfCode(TF_Code code) {
  switch (code) {
    case TF_INVALID_ARGUMENT:
      return XDL_TRACE_PLUGIN_INVALID_ARGUMENT;
    case TF_FAILED_PRECONDITION:
      return XDL_TRACE_PLUGIN_FAILED_PRECONDITION;
    case TF_PERMISSION_DENIED:
      return XDL_TRACE_PLUGIN_PERMISSION_DENIED;
    default:
      return XDL_TRACE_PLUGIN_INTERNAL;
  }
}

// Calls `fn` (start or stop) with a fresh status; fills `error` on failure.
int32_t CallLifecycle(Session* s, void (*fn)(const TP_Profiler*, TF_Status*), const char* what,
                      XdlTracePluginError* error) {
  ScopedTfStatus status(s->plugin->api());
  fn(s->plugin->profiler(), status.get());
  if (status.ok()) return XDL_TRACE_PLUGIN_OK;
  SetError(error, absl::StrCat(s->plugin->type(), ": ", what, ": ", status.ToString()));
  return FromTfCode(status.code());
}

int32_t RefuseCreate(const XdlTraceProfilerOptions*, XdlTraceProfiler** out,
                     XdlTracePluginError* error) {
  *out = nullptr;
  SetError(error, "a TensorFlow plugin's profilers are made by TfProfilerPlugin::CreateProfiler");
  return XDL_TRACE_PLUGIN_FAILED_PRECONDITION;
}

int32_t SessionStart(XdlTraceProfiler* profiler, XdlTracePluginError* error) {
  Session* s = AsSession(profiler);
  if (s->running) return XDL_TRACE_PLUGIN_OK;
  const int32_t rc = CallLifecycle(s, s->plugin->fns().start, "start", error);
  s->running = rc == XDL_TRACE_PLUGIN_OK;
  return rc;
}

int32_t SessionStop(XdlTraceProfiler* profiler, XdlTracePluginError* error) {
  Session* s = AsSession(profiler);
  if (!s->running) return XDL_TRACE_PLUGIN_OK;
  s->running = false;
  return CallLifecycle(s, s->plugin->fns().stop, "stop", error);
}

int32_t SessionStepBegin(XdlTraceProfiler* profiler, uint64_t external_id, XdlTracePluginError*) {
  // TensorFlow's API has no step markers: steps are remembered here and
  // events attributed by time (and launch correlation) at collect.
  Session* s = AsSession(profiler);
  MutexLock lock(&s->steps_mu);
  s->steps.push_back({external_id, WallClockNs()});
  if (s->steps.size() > Session::kMaxSteps) s->steps.pop_front();
  return XDL_TRACE_PLUGIN_OK;
}

int32_t SessionStepEnd(XdlTraceProfiler*, uint64_t, XdlTracePluginError*) {
  return XDL_TRACE_PLUGIN_OK;  // A step lasts until the next begins.
}

// The TensorFlow two-call collect, converted: the snapshot our collect hands out.
int32_t Snapshot(Session* s, XdlTracePluginError* error) {
  const TfProfilerPlugin& plugin = *s->plugin;
  xdl::proto::DeviceTrace trace;
  trace.set_tracer(plugin.type());
  trace.add_name("");
  size_t size = 0;
  {
    ScopedTfStatus status(plugin.api());
    plugin.fns().collect_data_xspace(plugin.profiler(), nullptr, &size, status.get());
    if (!status.ok()) {
      SetError(error,
               absl::StrCat(plugin.type(), ": collect_data_xspace (size): ", status.ToString()));
      return FromTfCode(status.code());
    }
  }
  if (size > s->max_xspace_bytes) {
    // Not taken: the collect is lost (counted as a lost buffer) and said so.
    trace.set_status(absl::StrCat("collect_data_xspace of TensorFlow plugin '", plugin.path(),
                                  "' asked for ", size, " bytes, above the cap of ",
                                  s->max_xspace_bytes, " (4 x max_buffer_bytes)"));
    trace.set_dropped_buffers(1);
  } else if (size > 0) {
    std::string bytes(size, '\0');
    size_t written = size;
    ScopedTfStatus status(plugin.api());
    plugin.fns().collect_data_xspace(plugin.profiler(), reinterpret_cast<uint8_t*>(bytes.data()),
                                     &written, status.get());
    if (!status.ok()) {
      SetError(error, absl::StrCat(plugin.type(), ": collect_data_xspace of ", size,
                                   " bytes: ", status.ToString()));
      return FromTfCode(status.code());
    }
    if (written < size)
      bytes.resize(written);  // TensorFlow parses the whole buffer; so do
                              // we unless the plugin says it wrote less.
    xdl::xplane::XSpace space;
    if (!space.ParseFromString(bytes)) {
      // Its events are lost, the tracer goes on: counted as a lost buffer and
      // shown in the tracer's status until the next good collect.
      trace.set_status(absl::StrCat("collect_data_xspace of TensorFlow plugin '", plugin.path(),
                                    "' returned ", bytes.size(),
                                    " bytes that are not a serialized XSpace"));
      trace.set_dropped_buffers(1);
    } else {
      ConvertXSpace(
          space, [s](int64_t time_ns) { return s->StepAt(time_ns); }, &trace);
    }
  }
  s->snapshot = trace.SerializeAsString();
  s->has_snapshot = true;
  return XDL_TRACE_PLUGIN_OK;
}

int32_t SessionCollect(XdlTraceProfiler* profiler, uint8_t* buffer, size_t* size,
                       XdlTracePluginError* error) {
  Session* s = AsSession(profiler);
  if (buffer == nullptr) {
    if (const int32_t rc = Snapshot(s, error); rc != XDL_TRACE_PLUGIN_OK) return rc;
    *size = s->snapshot.size();
    return XDL_TRACE_PLUGIN_OK;
  }
  if (!s->has_snapshot) {
    SetError(error, "collect with a buffer before asking the size");
    return XDL_TRACE_PLUGIN_FAILED_PRECONDITION;
  }
  if (*size < s->snapshot.size()) {
    SetError(error, absl::StrCat("collect buffer of ", *size, " bytes, need ", s->snapshot.size()));
    return XDL_TRACE_PLUGIN_INVALID_ARGUMENT;
  }
  std::memcpy(buffer, s->snapshot.data(), s->snapshot.size());
  *size = s->snapshot.size();
  s->snapshot.clear();
  s->has_snapshot = false;
  return XDL_TRACE_PLUGIN_OK;
}

void SessionDestroy(XdlTraceProfiler* profiler) {
  Session* s = AsSession(profiler);
  if (s == nullptr) return;
  if (s->running) {
    ScopedTfStatus status(s->plugin->api());
    s->plugin->fns().stop(s->plugin->profiler(), status.get());  // Never fails (ABI).
  }
  delete s;
}

// Resolves the five functions in the process's global scope (RTLD_DEFAULT:
// what a plugin loaded RTLD_LOCAL binds to first).
bool ResolveGlobal(TfStatusApi* api) {
  api->new_status = reinterpret_cast<TF_Status* (*)(void)>(::dlsym(RTLD_DEFAULT, "TF_NewStatus"));
  api->delete_status =
      reinterpret_cast<void (*)(TF_Status*)>(::dlsym(RTLD_DEFAULT, "TF_DeleteStatus"));
  api->set_status = reinterpret_cast<void (*)(TF_Status*, TF_Code, const char*)>(
      ::dlsym(RTLD_DEFAULT, "TF_SetStatus"));
  api->get_code =
      reinterpret_cast<TF_Code (*)(const TF_Status*)>(::dlsym(RTLD_DEFAULT, "TF_GetCode"));
  api->message =
      reinterpret_cast<const char* (*)(const TF_Status*)>(::dlsym(RTLD_DEFAULT, "TF_Message"));
  return api->new_status != nullptr && api->delete_status != nullptr &&
         api->set_status != nullptr && api->get_code != nullptr && api->message != nullptr;
}

// The status functions once resolved (the library they live in is never unloaded).
Mutex tf_status_mu;
const TfStatusApi* tf_status_api ABSL_GUARDED_BY(tf_status_mu) = nullptr;

}  // namespace

std::string TfCodeName(TF_Code code) {
  switch (code) {
    case TF_OK:
      return "OK";
    case TF_CANCELLED:
      return "CANCELLED";
    case TF_UNKNOWN:
      return "UNKNOWN";
    case TF_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case TF_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case TF_NOT_FOUND:
      return "NOT_FOUND";
    case TF_ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case TF_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case TF_UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case TF_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case TF_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case TF_ABORTED:
      return "ABORTED";
    case TF_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case TF_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case TF_INTERNAL:
      return "INTERNAL";
    case TF_UNAVAILABLE:
      return "UNAVAILABLE";
    case TF_DATA_LOSS:
      return "DATA_LOSS";
  }
  return absl::StrCat("code ", static_cast<int>(code));
}

absl::StatusOr<TfStatusApi> LoadTfStatusApi() {
  MutexLock lock(&tf_status_mu);
  if (tf_status_api != nullptr) return *tf_status_api;
  TfStatusApi api;
  if (!ResolveGlobal(&api)) {
    XDL_ASSIGN_OR_RETURN(const std::string path, ResolvePlugin(kTfStatusLibraryName));
    if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE) == nullptr) {
      const char* why = ::dlerror();
      return absl::FailedPreconditionError(
          absl::StrCat("device_tracers: TensorFlow status library '", path,
                       "': dlopen failed: ", why != nullptr ? why : "?"));
    }
    if (!ResolveGlobal(&api)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device_tracers: '", path, "' does not export TF_NewStatus, TF_DeleteStatus, ",
          "TF_SetStatus, TF_GetCode and TF_Message"));
    }
  }
  tf_status_api = new TfStatusApi(api);  // Kept for the process, as the library.
  return api;
}

TfProfilerPlugin::TfProfilerPlugin(std::string path, const TfStatusApi& api)
    : path_(std::move(path)), api_(api) {
  std::memset(&profiler_, 0, sizeof(profiler_));
  std::memset(&fns_, 0, sizeof(fns_));
  std::memset(&registration_, 0, sizeof(registration_));
}

absl::StatusOr<std::unique_ptr<TfProfilerPlugin>> TfProfilerPlugin::Init(TF_InitProfilerFn init,
                                                                         const std::string& path,
                                                                         const TfStatusApi& api) {
  std::unique_ptr<TfProfilerPlugin> plugin(new TfProfilerPlugin(path, api));
  Padded<TF_ProfilerRegistrationParams> storage;
  std::memset(&storage, 0, sizeof(storage));
  TF_ProfilerRegistrationParams& params = storage.value;
  params.struct_size = TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params.major_version = TP_MAJOR;
  params.minor_version = TP_MINOR;
  params.patch_version = TP_PATCH;
  params.profiler = &plugin->profiler_.value;
  params.profiler_fns = &plugin->fns_.value;
  params.profiler->struct_size = TP_PROFILER_STRUCT_SIZE;
  params.profiler_fns->struct_size = TP_PROFILER_FNS_STRUCT_SIZE;
  {
    ScopedTfStatus status(api);
    init(&params, status.get());
    if (!status.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device_tracers: TensorFlow plugin '", path,
                       "': TF_InitProfiler failed: ", status.ToString()));
    }
  }
  auto bad = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_tracers: TensorFlow plugin '", path, "': ", field, " ", why));
  };
  // The core's pointers must survive init (the RFC's example assigns *params
  // whole; the plugin fills *profiler and *profiler_fns instead).
  if (params.profiler != &plugin->profiler_.value || params.profiler_fns != &plugin->fns_.value) {
    return bad("TF_ProfilerRegistrationParams.profiler/profiler_fns",
               "were replaced by TF_InitProfiler (fill the structs they point to)");
  }
  // Is `field` of a struct reporting `struct_size` covered (present)?
  auto covers = [](size_t struct_size, size_t field_end) { return struct_size >= field_end; };
  const size_t params_size = params.struct_size;
  if (params_size == 0) {
    return bad("TF_ProfilerRegistrationParams.struct_size",
               "is 0 (set it to TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE)");
  }
  if (!covers(params_size, TF_OFFSET_OF_END(TF_ProfilerRegistrationParams, profiler_fns))) {
    return bad("TF_ProfilerRegistrationParams.struct_size",
               absl::StrCat("is ", params_size, ", below the ",
                            TF_OFFSET_OF_END(TF_ProfilerRegistrationParams, profiler_fns),
                            " bytes up to profiler_fns"));
  }
  // The destroy functions: absent past an older plugin's struct_size, else required.
  if (covers(params_size, TF_OFFSET_OF_END(TF_ProfilerRegistrationParams, destroy_profiler))) {
    if (params.destroy_profiler == nullptr) {
      return bad("TF_ProfilerRegistrationParams.destroy_profiler", "is null");
    }
    plugin->destroy_profiler_ = params.destroy_profiler;
  }
  if (covers(params_size, TF_OFFSET_OF_END(TF_ProfilerRegistrationParams, destroy_profiler_fns))) {
    if (params.destroy_profiler_fns == nullptr) {
      return bad("TF_ProfilerRegistrationParams.destroy_profiler_fns", "is null");
    }
    plugin->destroy_profiler_fns_ = params.destroy_profiler_fns;
  }
  const TP_Profiler& profiler = plugin->profiler_.value;
  if (!covers(profiler.struct_size, TP_PROFILER_STRUCT_SIZE)) {
    return bad("TP_Profiler.struct_size", absl::StrCat("is ", profiler.struct_size, ", need ",
                                                       TP_PROFILER_STRUCT_SIZE, " (up to type)"));
  }
  if (profiler.type == nullptr || profiler.type[0] == '\0') {
    return bad("TP_Profiler.type", "is null or empty");
  }
  plugin->type_ = profiler.type;
  const TP_ProfilerFns& fns = plugin->fns_.value;
  if (!covers(fns.struct_size, TP_PROFILER_FNS_STRUCT_SIZE)) {
    return bad("TP_ProfilerFns.struct_size",
               absl::StrCat("is ", fns.struct_size, ", need ", TP_PROFILER_FNS_STRUCT_SIZE,
                            " (up to collect_data_xspace)"));
  }
  const std::pair<const char*, bool> functions[] = {
      {"TP_ProfilerFns.start", fns.start != nullptr},
      {"TP_ProfilerFns.stop", fns.stop != nullptr},
      {"TP_ProfilerFns.collect_data_xspace", fns.collect_data_xspace != nullptr},
  };
  for (const auto& [name, present] : functions) {
    if (!present) return bad(name, "is null");
  }
  XdlTracePluginRegistration& r = plugin->registration_;
  r.struct_size = sizeof(r);
  r.abi_major = XDL_TRACE_PLUGIN_ABI_MAJOR;
  r.abi_minor = XDL_TRACE_PLUGIN_ABI_MINOR;
  r.abi_patch = XDL_TRACE_PLUGIN_ABI_PATCH;
  r.profiler_type = plugin->type_.c_str();
  r.create = RefuseCreate;
  r.start = SessionStart;
  r.stop = SessionStop;
  r.collect = SessionCollect;
  r.step_begin = SessionStepBegin;
  r.step_end = SessionStepEnd;
  r.destroy = SessionDestroy;
  return plugin;
}

TfProfilerPlugin::~TfProfilerPlugin() {
  // In TensorFlow's order (PluggableProfilerFactory).
  if (destroy_profiler_ != nullptr) destroy_profiler_(&profiler_.value);
  if (destroy_profiler_fns_ != nullptr) destroy_profiler_fns_(&fns_.value);
}

int32_t TfProfilerPlugin::CreateProfiler(const XdlTraceProfilerOptions* options,
                                         XdlTraceProfiler** out, XdlTracePluginError* error) {
  if (options == nullptr || options->struct_size < XDL_TRACE_PROFILER_OPTIONS_STRUCT_SIZE) {
    *out = nullptr;
    SetError(error, absl::StrCat(type_, ": options struct_size ",
                                 options == nullptr ? 0 : options->struct_size, ", need at least ",
                                 XDL_TRACE_PROFILER_OPTIONS_STRUCT_SIZE));
    return XDL_TRACE_PLUGIN_INVALID_ARGUMENT;
  }
  // TensorFlow's API takes no options: the buffer cap bounds one collect's XSpace.
  const uint64_t max_buffer =
      options->max_buffer_bytes != 0 ? options->max_buffer_bytes : kDefaultMaxBufferBytes;
  Session* session = new Session;
  session->plugin = this;
  session->max_xspace_bytes = 4 * max_buffer;
  *out = reinterpret_cast<XdlTraceProfiler*>(session);
  return XDL_TRACE_PLUGIN_OK;
}

}  // namespace internal
}  // namespace xdl_trace
