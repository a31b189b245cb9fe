// Fixture for the include-layer check: a reader part with no row in the check's table must be
// reported.
#include "xdl_trace/reader/errors.h"
