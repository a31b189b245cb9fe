// Fixture for the include-layer check: a plugin including the core's protobuf code must be
// reported.
#include "core/wire.h"
#include "device_trace.pb.h"
#include "plugin/device_tracing.h"
