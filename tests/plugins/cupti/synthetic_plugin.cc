// The CUPTI plugin over the synthetic GPU (synthetic_gpu.h): the product plugin's ABI
// (plugin_abi.h) under the name "cupti_synthetic", for bench/device.py and the tests.
#include <memory>
#include <string>

#include "cupti/synthetic_gpu.h"
#include "plugin_abi.h"
#include "xdl_trace/plugin/profiler_plugin.h"

namespace {

// Without libcupti the generator is null and the tracer reports itself unavailable, as the real
// plugin does.
std::unique_ptr<xdl_trace::cupti::CuptiApi> MakeApi(const char* config) {
  std::string why;
  return xdl_trace::cupti::MakeSyntheticGpu(xdl_trace::cupti::ParseSyntheticGpuOptions(config),
                                            &why);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int32_t XdlTracePluginInit(
    XdlTracePluginRegistration* r) {
  return xdl_trace::cupti::RegisterCuptiPlugin(r, "cupti_synthetic", MakeApi);
}
