// Fixture for the include-layer check: a binding including CUDA and the plugins' field table.
#include "core/device_trace_fields.h"
#include "cupti.h"
