// Page-cache ingest figures: what the ways of putting one benchmark record (6.31 MB) into a file
// cost in CPU time, in the directory $XDL_TRACE_BENCH_DIR (default /dev/shm): the capture copy
// the training thread makes, the write() the IO thread makes, and the alternative of copying into
// an mmap'd, pre-allocated file region (no kernel copy, but the page-table work moves to whoever
// populates the mapping). docs/benchmarks.md explains why the writer keeps write(). Prints figures
// and never judges them:
//   XDL_TRACE_BENCH_DIR=/var/tmp build/bench/xdl_trace_bench_page_cache
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

// CPU time of the calling thread, in milliseconds.
double ThreadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// Exits naming `what` and errno when `ok` is false (a figure run has no test to fail).
void Check(bool ok, const char* what) {
  if (ok) return;
  std::perror(what);
  std::exit(1);
}

}  // namespace

int main() {
  constexpr size_t kBytes = 6310000;
  constexpr int kRounds = 20;
  const char* env_dir = std::getenv("XDL_TRACE_BENCH_DIR");
  const std::string dir = env_dir != nullptr ? env_dir : "/dev/shm";
  const std::string path = dir + "/xdl_trace_page_cache_bench." + std::to_string(::getpid());
  std::vector<char> source(kBytes, 1);
  std::vector<char> heap(kBytes, 0);
  const size_t span = (kBytes * kRounds + 4095) & ~size_t{4095};
  for (int repeat = 0; repeat < 3; ++repeat) {
    double t = ThreadCpuMs();
    for (int i = 0; i < kRounds; ++i) {
      source[static_cast<size_t>(i)] = static_cast<char>(i);
      std::memcpy(heap.data(), source.data(), kBytes);
    }
    const double copy_ms = (ThreadCpuMs() - t) / kRounds;

    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0644);
    Check(fd >= 0, path.c_str());
    t = ThreadCpuMs();
    for (int i = 0; i < kRounds; ++i) {
      Check(::write(fd, heap.data(), kBytes) == static_cast<ssize_t>(kBytes), "write");
    }
    const double write_ms = (ThreadCpuMs() - t) / kRounds;
    ::close(fd);
    ::unlink(path.c_str());

    fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0644);
    Check(fd >= 0, path.c_str());
    Check(::ftruncate(fd, static_cast<off_t>(span)) == 0, "ftruncate");
    void* mapped = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    Check(mapped != MAP_FAILED, "mmap");
    char* base = static_cast<char*>(mapped);
    double allocate_ms = 0, map_ms = 0, fill_ms = 0;
    for (int i = 0; i < kRounds; ++i) {
      const size_t begin = (kBytes * static_cast<size_t>(i)) & ~size_t{4095};
      const size_t length = kBytes * static_cast<size_t>(i + 1) - begin;
      t = ThreadCpuMs();
      Check(::fallocate(fd, 0, static_cast<off_t>(begin), static_cast<off_t>(length)) == 0,
            "fallocate");
      allocate_ms += ThreadCpuMs() - t;
      t = ThreadCpuMs();
      Check(::madvise(base + begin, length, MADV_POPULATE_WRITE) == 0, "madvise");
      map_ms += ThreadCpuMs() - t;
      t = ThreadCpuMs();
      std::memcpy(base + kBytes * static_cast<size_t>(i), source.data(), kBytes);
      fill_ms += ThreadCpuMs() - t;
    }
    ::munmap(mapped, span);
    ::close(fd);
    ::unlink(path.c_str());
    std::printf(
        "%s, per %.2f MB: capture memcpy %.3f ms | write() %.3f ms | mmap path: fallocate %.3f + "
        "populate %.3f + memcpy %.3f = %.3f ms\n",
        dir.c_str(), kBytes / 1e6, copy_ms, write_ms, allocate_ms / kRounds, map_ms / kRounds,
        fill_ms / kRounds, (allocate_ms + map_ms + fill_ms) / kRounds);
  }
  return 0;
}
