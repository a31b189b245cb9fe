// Tests of WriterLock and of the run identity in Headers: one writer per rank, released on close
// and on a crash; RunInfo written only when set.
#include "io/writer_lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "io/data_file_segment.h"
#include "io/file_set.h"
#include "io/output_dir.h"
#include "io/trace_writer.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/file_names.h"

namespace xdl_trace {
namespace internal {
namespace {

using test::TempDir;

TraceConfig Config(const std::string& dir, int32_t rank = 0) {
  TraceConfig config;
  config.output_dir = dir;
  config.rank = rank;
  config.fsync = false;
  return config;
}

TEST_CASE("a second lock on the same rank fails naming the owner; other ranks and names do not",
          "[lock]") {
  TempDir dir;
  TraceConfig config = Config(dir.path(), 3);
  config.run_id = "first-run";
  auto first = OutputDir::Open(config);
  REQUIRE(first.ok());
  CHECK(first->lock().held());
  CHECK(first->lock().path() == dir / ".train.trace.3.lock");

  auto second = OutputDir::Open(config);
  REQUIRE(!second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(second.status().message());
  INFO(message);
  CHECK(message.find("rank 3") != std::string::npos);
  CHECK(message.find("pid " + std::to_string(getpid())) != std::string::npos);
  CHECK(message.find("run first-run") != std::string::npos);
  CHECK(message.find(dir / ".train.trace.3.lock") != std::string::npos);
  // The refused writer left the owner's file and lock in place.
  CHECK(test::ReadFile(dir / ".train.trace.3.lock").find("run first-run") != std::string::npos);
  CHECK(!OutputDir::Open(config).ok());

  CHECK(OutputDir::Open(Config(dir.path(), 4)).ok());
  TraceConfig other_name = config;
  other_name.output_file_name = "eval";
  CHECK(OutputDir::Open(other_name).ok());
  TraceConfig test_prefix = config;
  test_prefix.is_training = false;
  CHECK(OutputDir::Open(test_prefix).ok());
}

TEST_CASE("a removed lock file does not admit a second writer (issue 24 #12)", "[lock]") {
  TempDir dir;
  const TraceConfig config = Config(dir.path(), 5);
  auto first = OutputDir::Open(config);
  REQUIRE(first.ok());
  REQUIRE(::unlink((dir / ".train.trace.5.lock").c_str()) == 0);  // A user's rm, a cleanup.
  auto second = OutputDir::Open(config);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(second.status().message()),
             Catch::Contains("another writer is already tracing rank 5") &&
                 Catch::Contains("was removed"));
  CHECK(OutputDir::Open(Config(dir.path(), 6)).ok());  // Other ranks are not affected.
  first->lock().Release();
  auto third = OutputDir::Open(config);  // Free once the first writer let go.
  CHECK(third.ok());
}

TEST_CASE("Release removes the lock file and the rank can be locked again", "[lock]") {
  TempDir dir;
  const TraceConfig config = Config(dir.path());
  auto opened = OutputDir::Open(config);
  INFO(opened.status().ToString());
  REQUIRE(opened.ok());
  CHECK(test::Exists(dir / ".train.trace.0.lock"));
  opened->lock().Release();
  CHECK(!opened->lock().held());
  CHECK(!test::Exists(dir / ".train.trace.0.lock"));
  opened->lock().Release();  // Idempotent.
  CHECK(OutputDir::Open(config).ok());
}

TEST_CASE("a crashed owner's lock is free; its stale file is taken over", "[lock]") {
  TempDir dir;
  const TraceConfig config = Config(dir.path(), 1);
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto lock = OutputDir::Open(config);
    const char byte = lock.ok() ? 'y' : 'n';
    if (write(ready[1], &byte, 1) != 1) _exit(2);
    pause();  // Killed by the parent.
    _exit(0);
  }
  char byte = 0;
  REQUIRE(read(ready[0], &byte, 1) == 1);
  REQUIRE(byte == 'y');
  auto held = OutputDir::Open(config);
  REQUIRE(!held.ok());
  CHECK(std::string(held.status().message()).find("pid " + std::to_string(child)) !=
        std::string::npos);

  REQUIRE(kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(test::Exists(dir / ".train.trace.1.lock"));  // Left behind by the crash.
  auto after = OutputDir::Open(config);
  REQUIRE(after.ok());
  const std::string owner = test::ReadFile(dir / ".train.trace.1.lock");
  CHECK(owner.find("pid " + std::to_string(getpid())) == 0);
  close(ready[0]);
  close(ready[1]);
}

TEST_CASE("a child forked while the lock is held does not keep it after the owner dies", "[lock]") {
  TempDir dir;
  const TraceConfig config = Config(dir.path(), 2);
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t owner = fork();
  REQUIRE(owner >= 0);
  if (owner == 0) {
    // The owner: lock, fork a long-lived child (a DataLoader worker, say), then wait to be
    // killed. The child sleeps until the test kills it.
    auto lock = OutputDir::Open(config);
    if (!lock.ok()) _exit(2);
    // The worker reports its own pid: by then its fork handlers have run.
    if (fork() == 0) {
      const pid_t self = getpid();
      if (write(ready[1], &self, sizeof(self)) != sizeof(self)) _exit(2);
      pause();
      _exit(0);
    }
    pause();
    _exit(0);
  }
  pid_t worker = 0;
  REQUIRE(read(ready[0], &worker, sizeof(worker)) == sizeof(worker));
  CHECK(!OutputDir::Open(config).ok());  // The owner holds it.
  REQUIRE(kill(owner, SIGKILL) == 0);    // The owner crashes; its child lives on.
  int status = 0;
  REQUIRE(waitpid(owner, &status, 0) == owner);
  auto after = OutputDir::Open(config);
  CHECK(after.ok());
  kill(worker, SIGKILL);  // Reparented to init (or a subreaper), which reaps it.
  close(ready[0]);
  close(ready[1]);
}

TEST_CASE("a symbolic link at the lock file's name is refused, not followed", "[lock]") {
  TempDir dir;
  const std::string target = dir / "elsewhere";
  REQUIRE(symlink(target.c_str(), (dir / ".train.trace.0.lock").c_str()) == 0);
  auto lock = OutputDir::Open(Config(dir.path()));
  REQUIRE(!lock.ok());
  CHECK(std::string(lock.status().message()).find(".train.trace.0.lock") != std::string::npos);
  CHECK(!test::Exists(target));
}

TEST_CASE("the lock file is neither a data file nor a Meta to writers and readers", "[lock]") {
  const TraceConfig config = Config("/unused", 7);
  const std::string name = WriterLockFileName(config);
  CHECK(name == ".train.trace.7.lock");
  CHECK(!ParseFileIndex(FileStem(config), name).has_value());
  TraceFileInfo info;
  CHECK(!ParseTraceFileName(name, &info));
}

TEST_CASE("a second TraceWriter on a rank fails at Open; after Close the next run continues",
          "[lock][writer]") {
  TempDir dir;
  const TraceConfig config = Config(dir.path(), 2);
  auto first = TraceWriter::Open(config, {"x"});
  REQUIRE(first.ok());
  auto second = TraceWriter::Open(config, {"x"});
  REQUIRE(!second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(!test::Exists(dir / "train.trace.2.2"));  // The refused writer created nothing.
  REQUIRE((*first)->Close().ok());
  CHECK(!test::Exists(dir / ".train.trace.2.lock"));
  auto third = TraceWriter::Open(config, {"x"});
  REQUIRE(third.ok());
  REQUIRE((*third)->Close().ok());
  CHECK(test::Exists(dir / "train.trace.2.2"));
}

TEST_CASE("the Header carries RunInfo only when the config has one", "[run]") {
  TraceConfig config = Config("/unused", 5);
  config.run_id = "r1";
  const std::string bare = DataFileSegment::HeaderFrame({"a", "b"}, {}, config);
  CHECK(bare == DataFileSegment::HeaderFrame({"a", "b"}));  // XDL's keys-only Header.

  config.run.world_size = 8;
  config.run.local_rank = 1;
  config.run.hostname = "node-3";
  config.run.pid = 4242;
  config.run.argv = {"train.py", "--lr=0.1"};
  config.run.start_time_ms = 1700000000123;
  config.run.version = "0.1.0";
  config.run.metadata_json = R"({"lr": 0.1})";
  const std::string frame = DataFileSegment::HeaderFrame({"a", "b"}, {}, config);
  xdl::proto::Header header;
  REQUIRE(header.ParseFromString(frame.substr(4)));
  CHECK(header.key_size() == 2);
  const xdl::proto::RunInfo& run = header.run();
  CHECK(run.run_id() == "r1");
  CHECK(run.rank() == 5);
  CHECK(run.world_size() == 8);
  CHECK(run.local_rank() == 1);
  CHECK(run.hostname() == "node-3");
  CHECK(run.pid() == 4242);
  CHECK(std::vector<std::string>(run.argv().begin(), run.argv().end()) ==
        std::vector<std::string>{"train.py", "--lr=0.1"});
  CHECK(run.start_time_ms() == 1700000000123);
  CHECK(run.version() == "0.1.0");
  CHECK(run.metadata_json() == R"({"lr": 0.1})");
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
