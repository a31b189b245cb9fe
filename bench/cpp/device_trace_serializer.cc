// CUPTI serializer figures: what laying out (Plan) and writing (Write) a DeviceTrace costs per
// event, for a second of a GPU's events in the H100 "conv" mix (a runtime call per launch; a
// kernel, copy or memset on one of 4 streams). Prints figures and never judges them:
//   build/bench/xdl_trace_bench_device_trace_serializer [events]
#include "device_trace_serializer.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using xdl_trace::cupti::DeviceEventData;
using xdl_trace::cupti::DeviceTraceWriter;
using xdl_trace::cupti::EventKind;
using xdl_trace::cupti::EventStat;
using xdl_trace::cupti::kHostApiDevice;
using xdl_trace::cupti::NameSnapshot;
using xdl_trace::cupti::NameTable;

// Events as the parser leaves them: per launch a runtime call on the host thread, then a kernel
// (5 stats, 2 of them text), a copy (4 stats, 3 text) or a memset (2 stats) on one of 4 streams,
// its start a few places out of order now and then.
std::vector<DeviceEventData> MakeEvents(size_t count, NameTable* names) {
  std::vector<int32_t> kernels;
  for (int k = 0; k < 46; ++k) {
    // Demangled names of 15 to ~300 characters, as Kineto shows them.
    kernels.push_back(names->Intern("void at::native::kernel_" + std::to_string(k) + "<" +
                                    std::string(static_cast<size_t>(k * 6), 'T') + ">(...)"));
  }
  const int32_t launch = names->Intern("cudaLaunchKernel");
  const int32_t copy = names->Intern("Memcpy DtoH (Device -> Pageable)");
  const int32_t memset = names->Intern("Memset (Device)");
  const int32_t cbid = names->Intern("cbid"), grid = names->Intern("grid");
  const int32_t block = names->Intern("block"), regs = names->Intern("registers_per_thread");
  const int32_t shared = names->Intern("shared_memory_bytes"), bytes = names->Intern("bytes");
  const int32_t mangled = names->Intern("mangled_name_index"), value = names->Intern("value");
  const int32_t kind = names->Intern("copy_kind"), src = names->Intern("src_memory");
  const int32_t dst = names->Intern("dst_memory"), dims = names->Intern("128x1x1");
  const int32_t dtoh = names->Intern("DtoH"), device = names->Intern("device");
  const int32_t pageable = names->Intern("pageable");
  std::vector<DeviceEventData> events;
  events.reserve(count);
  int64_t t = 1'700'000'000'000'000'000;
  for (uint64_t id = 1; events.size() + 2 <= count; ++id, t += 2000) {
    DeviceEventData& api = events.emplace_back();
    api.name = launch;
    api.kind = EventKind::kRuntimeApi;
    api.start_ns = t;
    api.end_ns = t + 1500;
    api.correlation_id = id;
    api.external_id = id / 200 + 1;
    api.device = kHostApiDevice;
    api.line = 4242;
    api.AddStat(cbid, EventStat::Type::kInt, 211);
    DeviceEventData& e = events.emplace_back();
    e.start_ns = t + 3000 - ((id % 16 == 0) ? 9000 : 0);
    e.end_ns = e.start_ns + 7000;
    e.correlation_id = id;
    e.external_id = api.external_id;
    e.line = 7 + static_cast<int64_t>(id % 4);
    if (id % 5 < 3) {
      e.kind = EventKind::kKernel;
      e.name = kernels[id % kernels.size()];
      e.AddStat(grid, EventStat::Type::kText, dims);
      e.AddStat(block, EventStat::Type::kText, dims);
      e.AddStat(regs, EventStat::Type::kInt, 32);
      e.AddStat(shared, EventStat::Type::kInt, 4096);
      e.AddStat(mangled, EventStat::Type::kNameIndex, kernels[(id + 1) % kernels.size()]);
    } else if (id % 5 == 3) {
      e.kind = EventKind::kMemcpy;
      e.name = copy;
      e.AddStat(bytes, EventStat::Type::kInt, 4);
      e.AddStat(kind, EventStat::Type::kText, dtoh);
      e.AddStat(src, EventStat::Type::kText, device);
      e.AddStat(dst, EventStat::Type::kText, pageable);
    } else {
      e.kind = EventKind::kMemset;
      e.name = memset;
      e.AddStat(bytes, EventStat::Type::kInt, 4096);
      e.AddStat(value, EventStat::Type::kInt, 0);
    }
  }
  return events;
}

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000000;
  NameTable names;
  const std::vector<DeviceEventData> events = MakeEvents(count, &names);
  const NameSnapshot snapshot(names);
  DeviceTraceWriter writer;
  std::string out;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = Clock::now();
    const size_t size = writer.Plan("cupti", snapshot, events, 0, "");
    const auto t1 = Clock::now();
    if (out.size() < size) out.resize(size);
    writer.Write(out.data());
    const auto t2 = Clock::now();
    const double n = static_cast<double>(events.size());
    std::printf("%zu events, %.1f MB: Plan %.1f ns/event, Write %.1f ns/event\n", events.size(),
                static_cast<double>(size) / 1e6,
                std::chrono::duration<double, std::nano>(t1 - t0).count() / n,
                std::chrono::duration<double, std::nano>(t2 - t1).count() / n);
  }
  return 0;
}
