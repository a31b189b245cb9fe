// Fixture for the include-layer check: record/ including io/ or the tracer's public header
// (upward) must be reported.
#include "core/wire.h"
#include "io/trace_writer.h"
#include "xdl_trace/tracer.h"
