// Traces one tensor for three steps through the installed package, with the CUPTI tracer when
// installed, and reads the records back through an installed reader part (xdl_trace/reader/).
//
// Usage: consumer OUT_DIR [cupti]
// With "cupti", device_tracers = {"cupti"} is found by name in the installed
// prefix: the status must say the tracer ran or had no GPU, never that the
// plugin was not found.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xdl_trace/reader/trace_reader.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/tracer.h"
#include "xdl_trace/version.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) return 2;
  const bool cupti = argc == 3 && std::strcmp(argv[2], "cupti") == 0;
  std::printf("xdl_trace %s\n", xdl_trace::kVersion);
  auto registry = std::make_shared<xdl_trace::Registry>();
  std::vector<float> w(16, 1.5f);
  if (!registry->TraceVariable("w", w.data(), {4, 4}).ok()) return 3;
  xdl_trace::TraceConfig config;
  config.output_dir = argv[1];
  if (cupti) config.device_tracers = {"cupti"};
  auto tracer = xdl_trace::Tracer::Start(config, registry);
  if (!tracer.ok()) {
    std::printf("start: %s\n", tracer.status().ToString().c_str());
    return 4;
  }
  for (int step = 0; step < 3; ++step) {
    if (!(*tracer)->Step(step, step).ok()) return 5;
  }
  if (!(*tracer)->Close().ok()) return 6;
  const xdl_trace::TraceStats stats = (*tracer)->stats();
  std::printf("records_written=%lld\n", static_cast<long long>(stats.records_written));
  if (stats.records_written != 3) return 7;
  auto reader = xdl_trace::TraceReader::Open(argv[1]);
  if (!reader.ok()) {
    std::printf("read: %s\n", reader.status().ToString().c_str());
    return 9;
  }
  xdl_trace::TraceCursor cursor = reader->Read({});
  int records_read = 0;
  for (;;) {
    auto event = cursor.Next();
    if (!event.ok()) return 10;
    if (*event == xdl_trace::TraceCursor::Event::kEnd) break;
    if (*event == xdl_trace::TraceCursor::Event::kRecord) ++records_read;
  }
  std::printf("records_read=%d\n", records_read);
  if (records_read != 3) return 11;
  if (cupti) {
    const std::string& status = stats.device_tracer_status;
    std::printf("device_tracer_status=%s\n", status.c_str());
    const bool ran = status.rfind("cupti: ok", 0) == 0;
    const bool no_gpu = status.find("unavailable: no CUDA driver or GPU") != std::string::npos;
    if (!ran && !no_gpu) return 8;
  }
  return 0;
}
