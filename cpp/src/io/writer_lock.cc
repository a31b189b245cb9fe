// One writer per (output_dir, prefix, name, rank): an advisory flock(2) on a hidden lock file.
#include "io/writer_lock.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/mutex.h"
#include "io/file_set.h"
#include "io/io_error.h"
#include "io/run_info.h"

namespace xdl_trace {
namespace internal {
namespace {

// What the lock file says about its owner ("pid 12 on host h, run r"), or a
// placeholder when it is empty or unreadable.
std::string DescribeOwner(int fd) {
  char buf[512];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "a process that has not written its name yet";
  return std::string(absl::StripTrailingAsciiWhitespace(absl::string_view(buf, n)));
}

// Whether `path` (not followed) is the file open as `fd`.
bool SameFile(int fd, const std::string& path) {
  struct stat open_file, named;
  return fstat(fd, &open_file) == 0 && lstat(path.c_str(), &named) == 0 &&
         open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

// flock(LOCK_EX | LOCK_NB), retried on EINTR; 0 or -1 with errno.
int FlockNoWait(int fd) {
  int result;
  do {
    result = flock(fd, LOCK_EX | LOCK_NB);
  } while (result != 0 && errno == EINTR);
  return result;
}

// Attempts before giving up on a lock file that keeps being removed under us
// (each removal is a writer releasing it, so this only loops under churn).
constexpr int kMaxLockAttempts = 1000;

// The descriptors of every lock this process holds. A child forked while a
// lock is held (a DataLoader worker, say) would otherwise keep the lock's
// open file description, and so the lock, alive after the owner dies; the
// child's copies are pointed at /dev/null right after fork. Shared by every
// thread; the atfork handlers hold the mutex across fork, so the child finds
// the set consistent.
struct HeldLocks {
  internal::Mutex mu;
  std::set<int> fds ABSL_GUARDED_BY(mu);
};

HeldLocks& Held() {
  static HeldLocks* held = new HeldLocks;  // Never destroyed: used at fork and at exit.
  return *held;
}

void LockHeldBeforeFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { Held().mu.Lock(); }
void UnlockHeldInParent() ABSL_NO_THREAD_SAFETY_ANALYSIS { Held().mu.Unlock(); }
void DropHeldInChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  HeldLocks& held = Held();
  // The descriptor numbers stay valid (the child's WriterLock still closes
  // them) but no longer refer to the lock file.
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) {
    for (int fd : held.fds) dup3(null_fd, fd, O_CLOEXEC);
    close(null_fd);
  }
  held.fds.clear();
  held.mu.Unlock();
}

void Track(int fd) {
  static std::once_flag registered;
  std::call_once(registered, [] {
    pthread_atfork(&LockHeldBeforeFork, &UnlockHeldInParent, &DropHeldInChild);
  });
  HeldLocks& held = Held();
  internal::MutexLock lock(&held.mu);
  held.fds.insert(fd);
}

void Untrack(int fd) {
  HeldLocks& held = Held();
  internal::MutexLock lock(&held.mu);
  held.fds.erase(fd);
}

}  // namespace

std::string WriterLockFileName(const TraceConfig& config) {
  return absl::StrCat(".", FileStem(config), ".lock");
}

WriterLock::WriterLock(int fd, std::string path) : fd_(fd), pid_(getpid()), path_(std::move(path)) {
  Track(fd_);
}

WriterLock& WriterLock::operator=(WriterLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    pid_ = other.pid_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

void WriterLock::Release() {
  if (fd_ < 0) return;
  // Removed while locked, so a writer that opened it meanwhile sees a removed
  // file once it gets the lock, and starts over (Acquire).
  if (getpid() == pid_) {
    if (SameFile(fd_, path_)) unlink(path_.c_str());
    Untrack(fd_);
  }
  close(fd_);  // Drops the flock with the open file description.
  fd_ = -1;
}

absl::StatusOr<WriterLock> WriterLock::Acquire(const TraceConfig& config) {
  absl::Status made = MakeDirectories(config.output_dir);
  if (!made.ok()) return made;
  std::string path = config.output_dir;
  if (path.back() != '/') path.push_back('/');
  absl::StrAppend(&path, WriterLockFileName(config));
  for (int attempt = 0;; ++attempt) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      return IoError(errno, absl::StrCat("xdl_trace: open of lock file '", path, "' failed"));
    }
    const int locked = FlockNoWait(fd);
    const int flock_errno = errno;
    if (locked == 0 && SameFile(fd, path)) {
      WriteOwner(fd, config);
      return WriterLock(fd, path);
    }
    // A refused writer closes its descriptor and never removes the owner's file.
    std::string owner = locked != 0 ? DescribeOwner(fd) : "";
    close(fd);
    if (locked != 0 && flock_errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "xdl_trace: another writer is already tracing rank ", config.rank, " as '",
          FileStem(config), "' in '", config.output_dir, "' (", owner, "; lock file '", path,
          "'). One writer per output_dir, output_file_name and rank: give each process its "
          "own rank (config 'rank', RANK or torch.distributed), or its own output_dir"));
    }
    if (locked != 0) {
      return IoError(flock_errno,
                     absl::StrCat("xdl_trace: flock of lock file '", path, "' failed"));
    }
    // Its owner removed it between our open and flock: lock the file now at `path`.
    if (attempt == kMaxLockAttempts) {
      return absl::UnavailableError(absl::StrCat("xdl_trace: lock file '", path,
                                                 "' was removed under us ", attempt, " times"));
    }
  }
}

void WriterLock::WriteOwner(int fd, const TraceConfig& config) {
  RunInfo run = config.run;
  FillRunInfoDefaults(&run);
  const std::string owner = absl::StrCat("pid ", run.pid, " on host ", run.hostname, ", run ",
                                         config.run_id.empty() ? "(unnamed)" : config.run_id, "\n");
  // Best effort: the flock is the lock; the text only names the owner to a
  // second writer, which says "has not written its name yet" without it.
  const bool named = ftruncate(fd, 0) == 0 && pwrite(fd, owner.data(), owner.size(), 0) ==
                                                  static_cast<ssize_t>(owner.size());
  (void)named;
}

}  // namespace internal
}  // namespace xdl_trace
