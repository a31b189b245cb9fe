// The CUPTI tracer's device-profiler C ABI, registered by a plugin's entry point: the product
// plugin's (plugin.cc, over libcupti) or a test plugin's over another CuptiApi.
#ifndef XDL_TRACE_PLUGINS_CUPTI_PLUGIN_ABI_H_
#define XDL_TRACE_PLUGINS_CUPTI_PLUGIN_ABI_H_

#include <cstdint>
#include <memory>

#include "cupti_api.h"
#include "xdl_trace/plugin/profiler_plugin.h"

namespace xdl_trace {
namespace cupti {

// Makes the CuptiApi of each profiler the core creates from the plugin config string (never
// null; "" when the core passes none). Called on the thread that calls the ABI's create. A null
// result is libcupti's, loaded at start.
using CuptiApiFactory = std::unique_ptr<CuptiApi> (*)(const char* config);

// Fills *r (XdlTracePluginInit's argument) with the CUPTI tracer's callbacks under
// `profiler_type` (a string that outlives the plugin), each profiler's tracer over
// `api_factory`'s CuptiApi (nullptr: libcupti). XDL_TRACE_PLUGIN_INVALID_ARGUMENT for a null or
// too small registration. Called once, by the plugin's XdlTracePluginInit.
int32_t RegisterCuptiPlugin(XdlTracePluginRegistration* r, const char* profiler_type,
                            CuptiApiFactory api_factory);

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_PLUGIN_ABI_H_
