// One writer per (output_dir, prefix, name, rank): an advisory flock(2) on a hidden lock file.
#include "io/writer_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "io/file_set.h"
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

}  // namespace

std::string WriterLockFileName(const TraceConfig& config) {
  return absl::StrCat(".", FileStem(config), ".lock");
}

WriterLock& WriterLock::operator=(WriterLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void WriterLock::Release() {
  if (fd_ >= 0) close(fd_);  // Drops the flock with the open file description.
  fd_ = -1;
}

absl::StatusOr<WriterLock> WriterLock::Acquire(const TraceConfig& config) {
  absl::Status made = MakeDirectories(config.output_dir);
  if (!made.ok()) return made;
  std::string path = config.output_dir;
  if (path.back() != '/') path.push_back('/');
  absl::StrAppend(&path, WriterLockFileName(config));
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("xdl_trace: open of lock file '", path, "' failed"));
  }
  WriterLock lock(fd);
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "xdl_trace: another writer is already tracing rank ", config.rank, " as '",
          FileStem(config), "' in '", config.output_dir, "' (", DescribeOwner(fd), "; lock file '",
          path,
          "'). One writer per output_dir, output_file_name and rank: give each process its "
          "own rank (config 'rank', RANK or torch.distributed), or its own output_dir"));
    }
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("xdl_trace: flock of lock file '", path, "' failed"));
  }
  RunInfo run = config.run;
  FillRunInfoDefaults(&run);
  const std::string owner = absl::StrCat("pid ", run.pid, " on host ", run.hostname, ", run ",
                                         config.run_id.empty() ? "(unnamed)" : config.run_id, "\n");
  // Best effort: the flock is the lock; the text only names the owner to a
  // second writer, which says "has not written its name yet" without it.
  const bool named = ftruncate(fd, 0) == 0 && pwrite(fd, owner.data(), owner.size(), 0) ==
                                                  static_cast<ssize_t>(owner.size());
  (void)named;
  return lock;
}

}  // namespace internal
}  // namespace xdl_trace
