// The CUPTI tracer's device-profiler C ABI over CuptiTracer, for a plugin's entry point; nothing
// throws.
#include "plugin_abi.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "cupti_tracer.h"

struct XdlTraceProfiler {
  std::unique_ptr<xdl_trace::cupti::CuptiTracer> tracer;
  size_t snapshot_size = 0;  // Between the two collect calls (the tracer keeps the trace).
  bool has_snapshot = false;
};

namespace {

// Set by RegisterCuptiPlugin, from the plugin's XdlTracePluginInit, before the core calls
// create; read by Create on whichever thread the core creates a profiler (atomic: the two need
// not be the same thread).
std::atomic<xdl_trace::cupti::CuptiApiFactory> make_api{nullptr};

int32_t SetError(XdlTracePluginError* error, int32_t code, const std::string& message) {
  if (error != nullptr && error->message != nullptr && error->capacity > 0) {
    std::snprintf(error->message, error->capacity, "%s", message.c_str());
  }
  return code;
}

// Runs `body`, turning any exception into INTERNAL with its message.
template <typename F>
int32_t Guard(XdlTracePluginError* error, F body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return SetError(error, XDL_TRACE_PLUGIN_INTERNAL, std::string("cupti: ") + e.what());
  } catch (...) {
    return SetError(error, XDL_TRACE_PLUGIN_INTERNAL, "cupti: unknown exception");
  }
}

int32_t FromResult(const xdl_trace::cupti::CuptiTracer::Result& result,
                   XdlTracePluginError* error) {
  if (result.ok) return XDL_TRACE_PLUGIN_OK;
  return SetError(
      error,
      result.permission_denied ? XDL_TRACE_PLUGIN_PERMISSION_DENIED : XDL_TRACE_PLUGIN_INTERNAL,
      result.message);
}

int32_t Create(const XdlTraceProfilerOptions* options, XdlTraceProfiler** out,
               XdlTracePluginError* error) {
  *out = nullptr;
  return Guard(error, [&] {
    // A core older than XdlTraceProfilerOptions 1.0 (or a caller passing
    // garbage) would make the reads below go past its struct.
    if (options == nullptr || options->struct_size < XDL_TRACE_PROFILER_OPTIONS_STRUCT_SIZE) {
      return SetError(error, XDL_TRACE_PLUGIN_INVALID_ARGUMENT,
                      "cupti: options struct_size " +
                          std::to_string(options == nullptr ? 0 : options->struct_size) +
                          ", need at least " +
                          std::to_string(XDL_TRACE_PROFILER_OPTIONS_STRUCT_SIZE));
    }
    xdl_trace::cupti::CuptiTracerOptions tracer_options;
    {
      if (options->max_buffer_bytes != 0)
        tracer_options.max_buffer_bytes = options->max_buffer_bytes;
      if (options->config != nullptr)
        xdl_trace::cupti::ApplyConfig(options->config, &tracer_options);
    }
    auto profiler = std::make_unique<XdlTraceProfiler>();
    std::unique_ptr<xdl_trace::cupti::CuptiApi> api;  // Null: libcupti, loaded at start.
    if (xdl_trace::cupti::CuptiApiFactory make = make_api.load()) {
      api = make(options->config != nullptr ? options->config : "");
    }
    profiler->tracer =
        std::make_unique<xdl_trace::cupti::CuptiTracer>(tracer_options, std::move(api));
    *out = profiler.release();
    return static_cast<int32_t>(XDL_TRACE_PLUGIN_OK);
  });
}

int32_t Start(XdlTraceProfiler* p, XdlTracePluginError* error) {
  return Guard(error, [&] { return FromResult(p->tracer->Start(), error); });
}

int32_t Stop(XdlTraceProfiler* p, XdlTracePluginError* error) {
  return Guard(error, [&] { return FromResult(p->tracer->Stop(), error); });
}

int32_t Collect(XdlTraceProfiler* p, uint8_t* buffer, size_t* size, XdlTracePluginError* error) {
  return Guard(error, [&]() -> int32_t {
    if (buffer == nullptr) {
      if (!p->has_snapshot) {
        p->snapshot_size = p->tracer->PrepareCollect();
        p->has_snapshot = true;
      }
      *size = p->snapshot_size;
      return XDL_TRACE_PLUGIN_OK;
    }
    if (!p->has_snapshot) {
      return SetError(error, XDL_TRACE_PLUGIN_FAILED_PRECONDITION,
                      "cupti: collect with a buffer before asking the size");
    }
    if (*size < p->snapshot_size) {
      return SetError(error, XDL_TRACE_PLUGIN_INVALID_ARGUMENT,
                      "cupti: collect buffer of " + std::to_string(*size) + " bytes, need " +
                          std::to_string(p->snapshot_size));
    }
    // Written straight into the core's buffer: no copy of the trace.
    p->tracer->WritePrepared(reinterpret_cast<char*>(buffer));
    *size = p->snapshot_size;
    p->has_snapshot = false;
    return XDL_TRACE_PLUGIN_OK;
  });
}

int32_t StepBegin(XdlTraceProfiler* p, uint64_t id, XdlTracePluginError* error) {
  return Guard(error, [&] {
    p->tracer->StepBegin(id);
    return static_cast<int32_t>(XDL_TRACE_PLUGIN_OK);
  });
}

int32_t StepEnd(XdlTraceProfiler* p, uint64_t id, XdlTracePluginError* error) {
  return Guard(error, [&] {
    p->tracer->StepEnd(id);
    return static_cast<int32_t>(XDL_TRACE_PLUGIN_OK);
  });
}

void Destroy(XdlTraceProfiler* p) {
  try {
    delete p;
  } catch (...) {
  }
}

}  // namespace

namespace xdl_trace {
namespace cupti {

int32_t RegisterCuptiPlugin(XdlTracePluginRegistration* r, const char* profiler_type,
                            CuptiApiFactory api_factory) {
  if (r == nullptr || r->struct_size < XDL_TRACE_PLUGIN_REGISTRATION_SIZE_V1_0) {
    return XDL_TRACE_PLUGIN_INVALID_ARGUMENT;
  }
  make_api.store(api_factory);
  r->struct_size = sizeof(*r);
  r->ext = nullptr;
  r->abi_major = XDL_TRACE_PLUGIN_ABI_MAJOR;
  r->abi_minor = XDL_TRACE_PLUGIN_ABI_MINOR;
  r->abi_patch = XDL_TRACE_PLUGIN_ABI_PATCH;
  r->profiler_type = profiler_type;
  r->create = Create;
  r->start = Start;
  r->stop = Stop;
  r->collect = Collect;
  r->step_begin = StepBegin;
  r->step_end = StepEnd;
  r->destroy = Destroy;
  return XDL_TRACE_PLUGIN_OK;
}

}  // namespace cupti
}  // namespace xdl_trace
