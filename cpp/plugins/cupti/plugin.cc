// The CUPTI tracer as a device-profiler plugin: its entry point, over libcupti (plugin_abi.h).
#include "plugin_abi.h"
#include "xdl_trace/plugin/profiler_plugin.h"

extern "C" __attribute__((visibility("default"))) int32_t XdlTracePluginInit(
    XdlTracePluginRegistration* r) {
  return xdl_trace::cupti::RegisterCuptiPlugin(r, "cupti", nullptr);
}
