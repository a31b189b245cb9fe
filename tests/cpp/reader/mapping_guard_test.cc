// MappingGuard (cpp/src/reader/mapping_guard.cc): a guarded mapping whose file is cut short reads
// zeros past the cut and is marked cut; other slots, and SIGBUSes elsewhere, are left alone.
#include "reader/mapping_guard.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "test_util.h"

namespace xdl_trace {
namespace internal {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// `pages` pages of 'x' in a new file under `dir`, mapped read-only as the reader maps.
const char* MapNewFile(const test::TempDir& dir, const std::string& name, size_t pages) {
  const std::string path = dir / name;
  test::WriteFile(path, std::string(pages * kPage, 'x'));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  void* mapping = mmap(nullptr, pages * kPage, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  REQUIRE(mapping != MAP_FAILED);
  return static_cast<const char*>(mapping);
}

void Cut(const test::TempDir& dir, const std::string& name, size_t bytes) {
  REQUIRE(truncate((dir / name).c_str(), static_cast<off_t>(bytes)) == 0);
}

sigjmp_buf jump_back;
volatile sig_atomic_t previous_handler_ran = 0;

void PreviousHandler(int) {
  previous_handler_ran = 1;
  siglongjmp(jump_back, 1);
}

// First in this file: the guard's handler is installed at the process's first Register, over
// the handler in place then (ctest runs each case in a process of its own).
TEST_CASE("a SIGBUS outside every guarded mapping goes to the handler installed before",
          "[reader]") {
  struct sigaction mine = {};
  mine.sa_handler = PreviousHandler;
  sigemptyset(&mine.sa_mask);
  struct sigaction saved = {};
  REQUIRE(sigaction(SIGBUS, &mine, &saved) == 0);

  test::TempDir dir;
  const char* guarded = MapNewFile(dir, "guarded", 4);
  const char* unguarded = MapNewFile(dir, "unguarded", 4);
  const int slot = MappingGuard::Register(guarded, 4 * kPage);
  REQUIRE(slot >= 0);
  Cut(dir, "unguarded", kPage);
  if (sigsetjmp(jump_back, 1) == 0) {
    const volatile char byte = unguarded[2 * kPage];  // Past the cut of an unguarded mapping.
    (void)byte;
    FAIL("no SIGBUS past the end of a cut file");
  }
  CHECK(previous_handler_ran == 1);
  CHECK_FALSE(MappingGuard::Cut(slot));
  CHECK(guarded[3 * kPage] == 'x');

  MappingGuard::Unregister(slot);
  munmap(const_cast<char*>(guarded), 4 * kPage);
  munmap(const_cast<char*>(unguarded), 4 * kPage);
}

TEST_CASE("a guarded mapping cut short reads zeros past the cut and is marked cut", "[reader]") {
  test::TempDir dir;
  const char* cut = MapNewFile(dir, "cut", 4);
  const char* kept = MapNewFile(dir, "kept", 4);
  const int cut_slot = MappingGuard::Register(cut, 4 * kPage);
  const int kept_slot = MappingGuard::Register(kept, 4 * kPage);
  REQUIRE(cut_slot >= 0);
  REQUIRE(kept_slot >= 0);
  CHECK(cut_slot != kept_slot);
  CHECK_FALSE(MappingGuard::Cut(cut_slot));

  Cut(dir, "cut", kPage);
  CHECK(cut[kPage - 1] == 'x');       // Before the cut: still the file's bytes.
  CHECK(cut[2 * kPage + 5] == '\0');  // Past it: a zero, not a SIGBUS.
  CHECK(cut[4 * kPage - 1] == '\0');  // To the mapping's end.
  CHECK(MappingGuard::Cut(cut_slot));
  CHECK_FALSE(MappingGuard::Cut(kept_slot));
  CHECK(kept[3 * kPage] == 'x');

  MappingGuard::Unregister(cut_slot);
  MappingGuard::Unregister(kept_slot);
  munmap(const_cast<char*>(cut), 4 * kPage);
  munmap(const_cast<char*>(kept), 4 * kPage);
}

TEST_CASE("guard slots: none for an empty mapping, -1 is a no-op, a freed slot starts uncut",
          "[reader]") {
  test::TempDir dir;
  const char* mapping = MapNewFile(dir, "f", 2);
  CHECK(MappingGuard::Register(nullptr, kPage) == -1);
  CHECK(MappingGuard::Register(mapping, 0) == -1);
  MappingGuard::Unregister(-1);
  CHECK_FALSE(MappingGuard::Cut(-1));

  const int first = MappingGuard::Register(mapping, 2 * kPage);
  REQUIRE(first >= 0);
  Cut(dir, "f", 0);
  CHECK(mapping[kPage] == '\0');
  CHECK(MappingGuard::Cut(first));
  MappingGuard::Unregister(first);
  const int again = MappingGuard::Register(mapping, 2 * kPage);
  CHECK(again == first);  // The lowest free slot, reused.
  CHECK_FALSE(MappingGuard::Cut(again));
  MappingGuard::Unregister(again);
  munmap(const_cast<char*>(mapping), 2 * kPage);
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
