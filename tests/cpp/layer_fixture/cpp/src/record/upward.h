// Fixture for the include-layer check: record/ including io/ (upward) must be reported.
#include "core/wire.h"
#include "io/trace_writer.h"
