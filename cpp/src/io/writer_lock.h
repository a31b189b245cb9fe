// One writer per (output_dir, prefix, name, rank): an advisory flock(2) on a hidden lock file.
//
// The lock file is "{output_dir}/.{prefix}.{name}.{rank}.lock". Its name starts
// with '.', so it never matches the data-file pattern
// "{prefix}.{name}.{rank}.{index}" nor ends in ".meta": XDL readers and ours
// never see it. It holds the owner's pid, host and run id, which a second
// writer names in its error. The lock belongs to the open file description,
// so the kernel drops it when the owner closes it, exits or crashes. A clean
// Release removes the file while still holding the lock; so Acquire, having
// locked, checks that the name still leads to the file it locked (else it
// locked a removed file and tries again). After a crash the file stays until
// the next writer of that rank releases it. A process forked while a lock is
// held does not inherit it: its copy of the descriptor is pointed at
// /dev/null right after fork (pthread_atfork), so the lock dies with its owner
// even when children it forked live on. As the lock file can itself be
// removed (a user's rm, a cleanup script) and a fresh one locked by a second
// writer, each writer also holds an open-file-description read lock on one
// byte of the output directory (chosen by the stem) and refuses to start when
// another description holds that byte (issue 24).
#ifndef XDL_TRACE_IO_WRITER_LOCK_H_
#define XDL_TRACE_IO_WRITER_LOCK_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "xdl_trace/config.h"

namespace xdl_trace {
namespace internal {

// ".{prefix}.{name}.{rank}.lock", without directory.
std::string WriterLockFileName(const TraceConfig& config);

// Threading: none; move-only. Owned by one writer and released by it.
class WriterLock {
 public:
  // Opens the lock file relative to `dir_fd` (config.output_dir, open:
  // OutputDir::Open is the caller) with O_NOFOLLOW|O_CLOEXEC (a symbolic link
  // there is an error), takes an exclusive flock without waiting, then the
  // stem's byte of a description of its own of the directory (openat of "."
  // on `dir_fd`, which the caller may close afterwards). FailedPrecondition
  // naming the lock file and the other process (pid, host, run id) when
  // another live writer holds it; an error naming the file when it cannot be
  // opened.
  static absl::StatusOr<WriterLock> Acquire(const TraceConfig& config, int dir_fd);

  WriterLock() = default;
  WriterLock(WriterLock&& other) noexcept
      : fd_(other.fd_), dir_fd_(other.dir_fd_), pid_(other.pid_), path_(std::move(other.path_)) {
    other.fd_ = -1;
    other.dir_fd_ = -1;
  }
  WriterLock& operator=(WriterLock&& other) noexcept;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  ~WriterLock() { Release(); }

  // Removes the lock file and drops the lock. Idempotent. In a forked child
  // (another pid than Acquire's) it only closes its copy of the descriptor:
  // the parent's lock and file stay.
  void Release();
  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  WriterLock(int fd, int dir_fd, std::string path);
  // Writes "pid P on host H, run R" into the lock file (best effort).
  static void WriteOwner(int fd, const TraceConfig& config);
  int fd_ = -1;
  // output_dir (its own open file description, from openat(dir_fd, ".")),
  // holding an open-file-description read lock on the byte that stands for
  // this stem: what a second writer checks, since the directory, unlike the
  // lock file, cannot be removed or swapped under a live writer. Release
  // reaches the lock file relative to it.
  int dir_fd_ = -1;
  int pid_ = 0;       // The process that acquired the lock.
  std::string path_;  // The lock file, "{output_dir}/{name}": how errors name it.
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_IO_WRITER_LOCK_H_
