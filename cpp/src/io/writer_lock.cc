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

// Whether the name `at` (not followed) is the file open as `fd`.
bool SameFile(int fd, const AtPath& at) {
  struct stat open_file, named;
  return fstat(fd, &open_file) == 0 &&
         fstatat(at.dir_fd, at.name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
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

// The byte of the output directory's lock space that stands for `stem`
// (FNV-1a of "{prefix}.{name}.{rank}", below 2^62): the same in every process
// and every build, so writers of one stem meet on one byte.
off_t StemLockOffset(const std::string& stem) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : stem) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return static_cast<off_t>(h >> 2);
}

// An open-file-description read lock on one byte of the output directory
// itself, which nobody can unlink or swap the way the lock file can be: a
// writer that finds another description's lock on its stem's byte refuses
// (issue 24: a removed lock file admitted a second writer). Returns the
// directory fd holding the lock; -1 with *other set when another writer
// holds it; an error naming the directory `dir` (open as `dir_fd`) otherwise.
absl::StatusOr<int> LockStemInDirectory(int dir_fd, const std::string& dir, const std::string& stem,
                                        bool* other) {
  *other = false;
  // A description of its own, so closing it drops this lock alone.
  const int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(errno, absl::StrCat("xdl_trace: open of '", dir, "' failed"));
  struct flock lock;
  std::memset(&lock, 0, sizeof(lock));
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = StemLockOffset(stem);
  lock.l_len = 1;
  if (fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    const int err = errno;
    close(fd);
    return IoError(err, absl::StrCat("xdl_trace: lock of directory '", dir, "' failed"));
  }
  struct flock probe = lock;
  probe.l_type = F_WRLCK;  // Conflicts with any other description's read lock on the byte.
  probe.l_pid = 0;
  if (fcntl(fd, F_OFD_GETLK, &probe) != 0) {
    const int err = errno;
    close(fd);
    return IoError(err, absl::StrCat("xdl_trace: lock probe of directory '", dir, "' failed"));
  }
  if (probe.l_type != F_UNLCK) {
    close(fd);
    *other = true;
    return -1;
  }
  return fd;
}

}  // namespace

std::string WriterLockFileName(const TraceConfig& config) {
  return absl::StrCat(".", FileStem(config), ".lock");
}

WriterLock::WriterLock(int fd, int dir_fd, std::string path)
    : fd_(fd), dir_fd_(dir_fd), pid_(getpid()), path_(std::move(path)) {
  Track(fd_);
  Track(dir_fd_);
}

WriterLock& WriterLock::operator=(WriterLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    dir_fd_ = other.dir_fd_;
    pid_ = other.pid_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
    other.dir_fd_ = -1;
  }
  return *this;
}

void WriterLock::Release() {
  if (fd_ < 0) return;
  // Removed while locked, so a writer that opened it meanwhile sees a removed
  // file once it gets the lock, and starts over (Acquire).
  if (getpid() == pid_) {
    const AtPath at = At(dir_fd_, path_);
    if (SameFile(fd_, at)) unlinkat(at.dir_fd, at.name, 0);
    Untrack(fd_);
    Untrack(dir_fd_);
  }
  close(fd_);      // Drops the flock with the open file description.
  close(dir_fd_);  // Drops the directory lock likewise.
  fd_ = -1;
  dir_fd_ = -1;
}

absl::StatusOr<WriterLock> WriterLock::Acquire(const TraceConfig& config, int dir_fd) {
  std::string path = config.output_dir;
  if (path.back() != '/') path.push_back('/');
  absl::StrAppend(&path, WriterLockFileName(config));
  const AtPath at = At(dir_fd, path);
  for (int attempt = 0;; ++attempt) {
    const int fd = openat(at.dir_fd, at.name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      return IoError(errno, absl::StrCat("xdl_trace: open of lock file '", path, "' failed"));
    }
    const int locked = FlockNoWait(fd);
    const int flock_errno = errno;
    bool other_in_dir = false;
    if (locked == 0 && SameFile(fd, at)) {
      absl::StatusOr<int> dir_lock =
          LockStemInDirectory(dir_fd, config.output_dir, FileStem(config), &other_in_dir);
      if (!dir_lock.ok()) {
        close(fd);
        return dir_lock.status();
      }
      if (!other_in_dir) {
        WriteOwner(fd, config);
        return WriterLock(fd, *dir_lock, path);
      }
    }
    // A refused writer closes its descriptor and never removes the owner's file.
    std::string owner = locked != 0 ? DescribeOwner(fd) : "";
    close(fd);
    if (other_in_dir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "xdl_trace: another writer is already tracing rank ", config.rank, " as '",
          FileStem(config), "' in '", config.output_dir,
          "' (it holds the directory's lock for this rank, though its lock file '", path,
          "' was removed). One writer per output_dir, output_file_name and rank: give each "
          "process its own rank (config 'rank', RANK or torch.distributed), or its own "
          "output_dir"));
    }
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
