// Fixture for the include-layer check: the core using the plugins' hand-written field table.
#include "core/device_trace_fields.h"
