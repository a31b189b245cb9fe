// The CUPTI plugin's API lines named as the OS names their thread (autograd's "pt_autograd_0"),
// read from /proc when the collect is serialized.
#include <catch2/catch.hpp>

#ifdef XDL_TRACE_HAVE_CUPTI

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_trace.pb.h"
#include "device_trace_serializer.h"

namespace xdl_trace {
namespace cupti {
namespace {

// The serialized trace of one API call on OS thread `tid`.
xdl::proto::DeviceTrace OneCallOn(int64_t tid) {
  NameTable names;
  DeviceEventData call;
  call.start_ns = 1;
  call.end_ns = 2;
  call.device = kHostApiDevice;
  call.line = tid;
  call.kind = EventKind::kRuntimeApi;
  call.name = names.Intern("cudaLaunchKernel");
  const NameSnapshot snapshot(names);  // The writer reads it until Write.
  DeviceTraceWriter writer;
  std::string bytes(writer.Plan("cupti", snapshot, {call}, 0, ""), '\0');
  writer.Write(bytes.data());
  xdl::proto::DeviceTrace trace;
  REQUIRE(trace.ParseFromString(bytes));
  return trace;
}

TEST_CASE("an API line is named by its OS thread's name and id", "[cupti]") {
  std::mutex mu;
  std::condition_variable cv;
  int64_t tid = 0;
  bool done = false;
  std::thread autograd([&] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    std::unique_lock<std::mutex> lock(mu);
    tid = static_cast<int64_t>(::syscall(SYS_gettid));
    cv.notify_all();
    cv.wait(lock, [&] { return done; });  // Alive while its line is serialized.
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return tid != 0; });
  }
  const xdl::proto::DeviceTrace trace = OneCallOn(tid);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  autograd.join();
  REQUIRE(trace.device_size() == 1);
  REQUIRE(trace.device(0).line_size() == 1);
  CHECK(trace.device(0).line(0).name() == "pt_autograd_0 (tid " + std::to_string(tid) + ")");
  // A thread that has gone (or an id that is no OS thread's): its number.
  CHECK(OneCallOn(1 << 30).device(0).line(0).name() == "thread 1073741824");
}

}  // namespace
}  // namespace cupti
}  // namespace xdl_trace
#else
TEST_CASE("thread name tests need the CUDA toolkit's CUPTI headers", "[cupti]") {
  WARN("SKIPPED: CUPTI headers not found at build time; the cupti plugin was not built");
}
#endif
