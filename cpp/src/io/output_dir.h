// One writer's output directory, opened once: created if missing, held as an fd, locked, listed.
//
// Everything the writer does to output_dir goes through the one descriptor
// Open takes: the rank's lock file is opened and locked relative to it
// (WriterLock), the directory is listed once for the index to continue from,
// and every data file and Meta is created and renamed relative to it
// (DataFileSegment, ReplaceMeta). So a directory renamed or swapped while a
// writer runs cannot split its lock from its files. output_dir itself may be
// a symbolic link to a directory (users do that); names inside it are never
// followed.
#ifndef XDL_TRACE_IO_OUTPUT_DIR_H_
#define XDL_TRACE_IO_OUTPUT_DIR_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "io/writer_lock.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// Threading: none; move-only. Opened on the caller's thread; afterwards fd()
// and path() are read-only (the IO thread creates files relative to fd())
// and only the owner releases the lock (after the IO thread is joined).
class OutputDir {
 public:
  // mkdir -p config.output_dir, opens it (O_DIRECTORY), takes this rank's
  // WriterLock relative to it, lists it once for the highest index of any file
  // of the stem (links and leftover Meta temp files included: their index is
  // never reused) and removes the Meta temp files of writers that died before
  // renaming one (best effort; only this rank's lock holder may). Errors name
  // the path and carry the io payload (io_error.h); a live writer on the rank
  // is FailedPrecondition (WriterLock::Acquire).
  static absl::StatusOr<OutputDir> Open(const TraceConfig& config);

  OutputDir() = default;
  OutputDir(OutputDir&& other) noexcept;
  OutputDir& operator=(OutputDir&& other) noexcept;
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;
  ~OutputDir();  // Closes the directory; the lock releases itself.

  // The directory, open (O_RDONLY|O_DIRECTORY); -1 once moved from.
  int fd() const { return fd_; }
  // config.output_dir as given: how errors and paths name it.
  const std::string& path() const { return path_; }
  // The first index after every file of the stem found by Open (1 if none).
  int64_t next_index() const { return next_index_; }
  // The rank's lock, held from Open until its Release (TraceWriter::Close).
  WriterLock& lock() { return lock_; }

 private:
  OutputDir(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_ = -1;
  WriterLock lock_;
  int64_t next_index_ = 1;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_OUTPUT_DIR_H_
