// One writer per (output_dir, prefix, name, rank): an advisory flock(2) on a hidden lock file.
//
// The lock file is "{output_dir}/.{prefix}.{name}.{rank}.lock". Its name starts
// with '.', so it never matches the data-file pattern
// "{prefix}.{name}.{rank}.{index}" nor ends in ".meta": XDL readers and ours
// never see it. It holds the owner's pid, host and run id, which a second
// writer names in its error. The lock belongs to the open file description,
// so the kernel drops it when the owner closes it, exits or crashes; the file
// itself stays (removing it would race with a writer that just opened it).
#ifndef XDL_TRACE_IO_WRITER_LOCK_H_
#define XDL_TRACE_IO_WRITER_LOCK_H_

#include <string>

#include "absl/status/statusor.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// ".{prefix}.{name}.{rank}.lock", without directory.
std::string WriterLockFileName(const TraceConfig& config);

// Threading: none; move-only. Owned by one writer and released by it.
class WriterLock {
 public:
  // Creates output_dir if needed, opens the lock file (O_NOFOLLOW|O_CLOEXEC,
  // a symbolic link there is an error) and takes an exclusive flock without
  // waiting. FailedPrecondition naming the lock file and the other process
  // (pid, host, run id) when another live writer holds it; an error naming
  // the file when it cannot be opened.
  static absl::StatusOr<WriterLock> Acquire(const TraceConfig& config);

  WriterLock() = default;
  WriterLock(WriterLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  WriterLock& operator=(WriterLock&& other) noexcept;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  ~WriterLock() { Release(); }

  // Drops the lock (closes the file). Idempotent.
  void Release();
  bool held() const { return fd_ >= 0; }

 private:
  explicit WriterLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_WRITER_LOCK_H_
