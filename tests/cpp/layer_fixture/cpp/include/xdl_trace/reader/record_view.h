// Fixture for the include-layer check: a reader part including one above it (the record views
// pulling in the reader) must be reported; dtype.h is in its row and is not.
#include "xdl_trace/dtype.h"
#include "xdl_trace/reader/trace_reader.h"
