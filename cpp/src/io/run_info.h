// RunInfo: the run identity every data file's Header carries (Header field 3), built from the
// config.
#ifndef XDL_TRACE_IO_RUN_INFO_H_
#define XDL_TRACE_IO_RUN_INFO_H_

#include "xdl_trace.pb.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// config.run with config.run_id and config.rank, as the Header's RunInfo.
xdl::proto::RunInfo RunInfoProto(const TraceConfig& config);

// Fills what a process knows about itself when unset: hostname, pid and
// start_time_ms (now). Tracer::Start calls it, so every tracer records a run.
void FillRunInfoDefaults(RunInfo* run);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_RUN_INFO_H_
