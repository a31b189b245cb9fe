// CUDA example: a small GPU loop traced with device_tracers {"cupti"}; exit 77 without a GPU.
//
//   xdl_trace_cuda_example [OUTPUT_DIR]      then: xdl-trace timeline OUTPUT_DIR -o trace.json
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "xdl_trace/registry.h"
#include "xdl_trace/tracer.h"

extern "C" int ExampleGpuCount(char* why);
extern "C" int ExampleAllocate(int n);
extern "C" int ExampleStep(const float* x, float a, float* y, int n);
extern "C" void ExampleFree();

int main(int argc, char** argv) {
  const std::string output_dir = argc > 1 ? argv[1] : "/tmp/xdl_trace_cuda_example";
  char why[256] = "";
  if (ExampleGpuCount(why) == 0) {
    std::printf("SKIPPED: no GPU (%s)\n", why);
    return 77;  // ctest SKIP_RETURN_CODE.
  }
  constexpr int kN = 1 << 16;
  std::vector<float> x(kN, 1.0f), y(kN, 0.0f);
  if (ExampleAllocate(kN) != 0) {
    std::printf("error: cudaMalloc failed\n");
    return 1;
  }

  auto registry = std::make_shared<xdl_trace::Registry>();
  xdl_trace::EntrySpec spec;
  spec.key = "y";
  spec.has_view = true;
  spec.view = xdl_trace::TensorView{xdl_trace::DType::kFloat32, {kN}, y.data()};
  if (!registry->Register(spec).ok()) return 1;

  xdl_trace::TraceConfig config;
  config.output_dir = output_dir;
  config.device_tracers = {"cupti"};
  auto tracer = xdl_trace::Tracer::Start(config, registry);
  if (!tracer.ok()) {
    std::printf("error: %s\n", tracer.status().ToString().c_str());
    return 1;
  }
  for (int step = 0; step < 20; ++step) {
    if (ExampleStep(x.data(), 2.0f, y.data(), kN) != 0) return 1;
    if (absl::Status s = (*tracer)->Step(step, step); !s.ok()) {
      std::printf("error: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const absl::Status closed = (*tracer)->Close();
  const xdl_trace::TraceStats stats = (*tracer)->stats();
  ExampleFree();
  std::printf("wrote %s: %lld records, %lld device events (%lld dropped); tracers: %s\n",
              output_dir.c_str(), static_cast<long long>(stats.records_written),
              static_cast<long long>(stats.device_events),
              static_cast<long long>(stats.device_events_dropped),
              stats.device_tracer_status.c_str());
  if (!closed.ok()) return 1;
  // With a GPU and profiling rights, CUPTI must have seen the kernels.
  return stats.device_events > 0 ? 0 : 1;
}
