// Traces one tensor for three steps through the installed package and checks the stats.
#include <cstdio>
#include <memory>
#include <vector>

#include "xdl_trace/registry.h"
#include "xdl_trace/tracer.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto registry = std::make_shared<xdl_trace::Registry>();
  std::vector<float> w(16, 1.5f);
  xdl_trace::EntrySpec spec;
  spec.key = "w";
  spec.has_view = true;
  spec.view = {xdl_trace::DType::kFloat32, {4, 4}, w.data()};
  if (!registry->Register(spec).ok()) return 3;
  xdl_trace::TraceConfig config;
  config.output_dir = argv[1];
  auto tracer = xdl_trace::Tracer::Start(config, registry);
  if (!tracer.ok()) return 4;
  for (int step = 0; step < 3; ++step) {
    if (!(*tracer)->Step(step, step).ok()) return 5;
  }
  if (!(*tracer)->Close().ok()) return 6;
  const xdl_trace::TraceStats stats = (*tracer)->stats();
  std::printf("records_written=%lld\n", static_cast<long long>(stats.records_written));
  return stats.records_written == 3 ? 0 : 7;
}
