// Tests of OutputDir: output_dir created, opened once, locked and listed; what the writer finds.
#include "io/output_dir.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "io/io_error.h"
#include "test_util.h"

namespace xdl_trace {
namespace internal {
namespace {

using test::Exists;
using test::TempDir;
using test::WriteFile;

TraceConfig Config(const std::string& dir) {
  TraceConfig config;
  config.output_dir = dir;
  config.fsync = false;
  return config;
}

OutputDir OpenOrDie(const TraceConfig& config) {
  absl::StatusOr<OutputDir> dir = OutputDir::Open(config);
  INFO(dir.status().ToString());
  REQUIRE(dir.ok());
  return std::move(*dir);
}

TEST_CASE("Open creates missing parents and holds the directory and the rank's lock",
          "[output_dir]") {
  TempDir dir;
  const TraceConfig config = Config(dir / "a/b/c");
  OutputDir opened = OpenOrDie(config);
  CHECK(opened.path() == config.output_dir);
  CHECK(opened.fd() >= 0);
  CHECK(opened.next_index() == 1);
  CHECK(opened.lock().held());
  CHECK(Exists(dir / "a/b/c/.train.trace.0.lock"));
  struct stat by_fd, by_path;
  REQUIRE(fstat(opened.fd(), &by_fd) == 0);
  REQUIRE(stat(config.output_dir.c_str(), &by_path) == 0);
  CHECK(by_fd.st_ino == by_path.st_ino);
}

TEST_CASE("Open continues after the stem's highest index and removes leftover Meta temp files",
          "[output_dir]") {
  TempDir dir;
  WriteFile(dir / "train.trace.0.3", "");
  WriteFile(dir / "train.trace.0.7.meta", "");
  WriteFile(dir / "train.trace.0.9.meta.tmp-12-3", "");  // A writer died before renaming it.
  WriteFile(dir / "train.trace.0.8.meta.tmp", "");       // Earlier versions' temp name.
  WriteFile(dir / "train.trace.1.20", "");               // Another rank.
  WriteFile(dir / "test.trace.0.30", "");                // Another prefix.
  WriteFile(dir / "train.trace.0.40x", "");              // Not an index.
  OutputDir opened = OpenOrDie(Config(dir.path()));
  CHECK(opened.next_index() == 10);  // The temp file's index stays used.
  CHECK_FALSE(Exists(dir / "train.trace.0.9.meta.tmp-12-3"));
  CHECK_FALSE(Exists(dir / "train.trace.0.8.meta.tmp"));
  CHECK(Exists(dir / "train.trace.0.3"));
  CHECK(Exists(dir / "train.trace.0.7.meta"));
  CHECK(Exists(dir / "train.trace.1.20"));
}

TEST_CASE("a refused second Open removes nothing of the owner's", "[output_dir][lock]") {
  TempDir dir;
  const TraceConfig config = Config(dir.path());
  OutputDir owner = OpenOrDie(config);
  WriteFile(dir / "train.trace.0.1.meta.tmp-1-1", "");  // As if the owner were mid-rename.
  const absl::StatusOr<OutputDir> second = OutputDir::Open(config);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Exists(dir / "train.trace.0.1.meta.tmp-1-1"));
  CHECK(Exists(dir / ".train.trace.0.lock"));
}

TEST_CASE("output_dir may be a symbolic link to a directory", "[output_dir][security]") {
  TempDir dir;
  REQUIRE(mkdir((dir / "real").c_str(), 0755) == 0);
  REQUIRE(symlink((dir / "real").c_str(), (dir / "link").c_str()) == 0);
  OutputDir opened = OpenOrDie(Config(dir / "link"));
  CHECK(Exists(dir / "real/.train.trace.0.lock"));
}

TEST_CASE("a regular file at output_dir is an io error naming it", "[output_dir][errors]") {
  TempDir dir;
  WriteFile(dir / "file", "not a directory");
  const absl::StatusOr<OutputDir> opened = OutputDir::Open(Config(dir / "file"));
  REQUIRE_FALSE(opened.ok());
  CHECK(IsIoError(opened.status()));
  CHECK_THAT(std::string(opened.status().message()), Catch::Contains(dir / "file"));
}

TEST_CASE("the lock lives in the directory opened, even once it is renamed", "[output_dir][lock]") {
  TempDir dir;
  const TraceConfig config = Config(dir / "out");
  OutputDir opened = OpenOrDie(config);
  REQUIRE(rename((dir / "out").c_str(), (dir / "moved").c_str()) == 0);
  REQUIRE(mkdir((dir / "out").c_str(), 0755) == 0);
  WriteFile(dir / "out/.train.trace.0.lock", "someone else's");
  opened.lock().Release();
  CHECK_FALSE(Exists(dir / "moved/.train.trace.0.lock"));  // Its own file, reached by the fd.
  CHECK(test::ReadFile(dir / "out/.train.trace.0.lock") == "someone else's");
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
