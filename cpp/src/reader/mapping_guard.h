// Keeps a reader alive when a mapped file shrinks under it: a SIGBUS on a registered mapping
// replaces the pages past the file's new end with zeros and marks the mapping cut.
#ifndef XDL_TRACE_READER_MAPPING_GUARD_H_
#define XDL_TRACE_READER_MAPPING_GUARD_H_

#include <cstddef>

namespace xdl_trace {
namespace internal {

// A file truncated while mapped (another process, `rsync --inplace`, a cleanup
// job) makes every access past its new end raise SIGBUS, which kills the
// process. While a mapping is registered, the process's SIGBUS handler
// (installed at the first Register, chaining to the one before it for any
// other address) maps zero pages over the lost part instead, so the access
// reads zeros, and marks the mapping cut: the reader then refuses the file by
// name (TraceFile::CheckNotCut). Thread-safe: a fixed table of atomic slots the
// handler reads without locks; a full table leaves a mapping unguarded.
class MappingGuard {
 public:
  // Guards [begin, begin + size); the slot to pass back, or -1 when none is free.
  static int Register(const char* begin, size_t size);
  // Stops guarding `slot` (before its mapping is unmapped); -1 is a no-op.
  static void Unregister(int slot);
  // Whether an access faulted past the end of the file mapped in `slot`.
  static bool Cut(int slot);
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_MAPPING_GUARD_H_
