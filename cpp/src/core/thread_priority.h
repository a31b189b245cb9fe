// Background threads' scheduling: lower priority, no wake-up preemption; training keeps its core.
#ifndef XDL_TRACE_CORE_THREAD_PRIORITY_H_
#define XDL_TRACE_CORE_THREAD_PRIORITY_H_

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace xdl_trace {
namespace internal {

// Nice levels the device-tracing background threads (the collector, the CUPTI
// parse thread) run below the process: measured with bench/device.py at 1M
// events/s on a shared 2-core machine, hook.step()'s p99 went from 400 us to
// 74 us (0.2 s interval) and from 2.3 ms to 0.29 ms (1 s) with nothing dropped.
inline constexpr int kBackgroundNiceSteps = 10;

// Lowers the calling thread's priority by `steps` nice levels (on Linux nice
// is per thread), at most to 19. Best effort: left as is where not allowed.
inline void LowerCurrentThreadPriority(int steps) {
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, tid);
  if (errno != 0) return;
  setpriority(PRIO_PROCESS, tid, nice + steps > 19 ? 19 : nice + steps);
}

// Takes the calling thread out of wake-up preemption (SCHED_BATCH, its nice
// level kept): a background thread the training thread wakes (a record queued,
// a collect due) then waits for a free core or the scheduler's next tick
// instead of taking the training thread's core in the middle of hook.step().
// Its share of the CPU is unchanged. Best effort.
inline void NoWakeupPreemption() {
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
}

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_CORE_THREAD_PRIORITY_H_
