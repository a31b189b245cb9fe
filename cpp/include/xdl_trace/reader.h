// Reads traces back: the whole reader API in one include, kept for compatibility. New code
// includes the part it uses from xdl_trace/reader/ (one header per concept, cpp/include/README.md).
#ifndef XDL_TRACE_READER_H_
#define XDL_TRACE_READER_H_

#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/file_names.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/runs.h"
#include "xdl_trace/reader/stack.h"
#include "xdl_trace/reader/trace_cursor.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"

#endif  // XDL_TRACE_READER_H_
