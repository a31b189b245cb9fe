// RunInfo: the run identity every data file's Header carries (Header field 3), built from the
// config.
#include "io/run_info.h"

#include <limits.h>
#include <unistd.h>

#include <string>

#include "core/clock.h"

namespace xdl_trace {
namespace internal {

xdl::proto::RunInfo RunInfoProto(const TraceConfig& config) {
  const RunInfo& run = config.run;
  xdl::proto::RunInfo proto;
  proto.set_run_id(config.run_id);
  proto.set_rank(config.rank);
  proto.set_world_size(run.world_size);
  proto.set_local_rank(run.local_rank);
  proto.set_hostname(run.hostname);
  proto.set_pid(run.pid);
  for (const std::string& arg : run.argv) proto.add_argv(arg);
  proto.set_start_time_ms(run.start_time_ms);
  proto.set_version(run.version);
  proto.set_metadata_json(run.metadata_json);
  return proto;
}

void FillRunInfoDefaults(RunInfo* run) {
  if (run->hostname.empty()) {
    char name[HOST_NAME_MAX + 1] = {};
    if (gethostname(name, sizeof(name) - 1) == 0) run->hostname = name;
  }
  if (run->pid == 0) run->pid = getpid();
  if (run->start_time_ms == 0) run->start_time_ms = WallClockMs();
}

}  // namespace internal
}  // namespace xdl_trace
