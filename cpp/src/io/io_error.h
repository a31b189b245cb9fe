// IoError: the one way the writer turns a failed file-system call into a Status (marked as I/O).
//
// absl::ErrnoToStatus maps errno values onto codes that also mean "bad
// argument" or "not found" (EFBIG is OUT_OF_RANGE, ENOENT NOT_FOUND), so the
// code alone cannot tell a full disk from a bad config. Every status that
// comes from a write, open, rename, fsync or directory scan of the writer
// carries kIoErrorPayload; the Python binding maps it to TraceIOError
// (an OSError) whatever its code.
#ifndef XDL_TRACE_IO_IO_ERROR_H_
#define XDL_TRACE_IO_IO_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace xdl_trace {
namespace internal {

// Status payload type URL that marks a file-system failure of the writer.
inline constexpr char kIoErrorPayload[] = "xdl_trace.io";

// absl::ErrnoToStatus(errno_value, message) (code from errno, message ending
// in the errno text) marked with kIoErrorPayload. `message` names the file
// and the operation.
absl::Status IoError(int errno_value, absl::string_view message);

// `status` (an error of any code) marked with kIoErrorPayload.
absl::Status MarkIoError(absl::Status status);

// Whether `status` carries kIoErrorPayload.
bool IsIoError(const absl::Status& status);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_IO_ERROR_H_
