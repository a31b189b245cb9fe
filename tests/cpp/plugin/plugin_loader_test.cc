// Plugin loader: lookup by path, by XDL_TRACE_PLUGIN_PATH and built-in name; bad plugins.
#include "plugin/plugin_loader.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"

#ifdef XDL_TRACE_TEST_PLUGIN_DIR
namespace xdl_trace {
namespace internal {
namespace {

std::string TestPlugin(const std::string& name) {
  return std::string(XDL_TRACE_TEST_PLUGIN_DIR) + "/" + PluginFileName(name);
}

// Loads `name` expecting a refusal whose message names the library and `field`.
void ExpectRefused(const std::string& name, const std::string& field) {
  const std::string path = TestPlugin(name);
  absl::StatusOr<std::unique_ptr<PluginLibrary>> library = PluginLibrary::Load(path);
  INFO(name);
  REQUIRE_FALSE(library.ok());
  const std::string message(library.status().message());
  INFO(message);
  CHECK(absl::StrContains(message, path));
  CHECK(absl::StrContains(message, field));
}

// The fake plugin's registration; the library stays loaded for the process
// so its strings and function pointers stay valid.
XdlTracePluginRegistration GoodRegistration() {
  static const PluginLibrary* library = [] {
    absl::StatusOr<std::unique_ptr<PluginLibrary>> loaded = PluginLibrary::Load(TestPlugin("fake"));
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  REQUIRE(library != nullptr);
  return library->registration();
}

}  // namespace

TEST_CASE("a valid C plugin loads and reports its type and ABI", "[plugin]") {
  absl::StatusOr<std::unique_ptr<PluginLibrary>> library = PluginLibrary::Load(TestPlugin("fake"));
  REQUIRE(library.ok());
  const XdlTracePluginRegistration& r = (*library)->registration();
  CHECK((*library)->profiler_type() == "fake");
  CHECK(r.abi_major == XDL_TRACE_PLUGIN_ABI_MAJOR);
  CHECK(r.struct_size >= XDL_TRACE_PLUGIN_REGISTRATION_SIZE_V1_0);
  CHECK(r.create != nullptr);
  CHECK(r.destroy != nullptr);
}

TEST_CASE("plugins are found by path and by name in XDL_TRACE_PLUGIN_PATH", "[plugin]") {
  absl::StatusOr<std::string> by_path = ResolvePlugin(TestPlugin("fake"));
  REQUIRE(by_path.ok());
  CHECK(*by_path == TestPlugin("fake"));

  ::unsetenv(kPluginPathEnv);
  absl::StatusOr<std::string> missing = ResolvePlugin("fake");
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(absl::StrContains(missing.status().message(), "libxdl_trace_fake.so"));
  CHECK(absl::StrContains(missing.status().message(), kPluginPathEnv));

  const std::string env = std::string("/nonexistent/dir:") + XDL_TRACE_TEST_PLUGIN_DIR;
  ::setenv(kPluginPathEnv, env.c_str(), 1);
  absl::StatusOr<std::string> by_name = ResolvePlugin("fake");
  ::unsetenv(kPluginPathEnv);
  REQUIRE(by_name.ok());
  CHECK(*by_name == TestPlugin("fake"));

  absl::StatusOr<std::string> no_file = ResolvePlugin("/nonexistent/libxdl_trace_x.so");
  REQUIRE_FALSE(no_file.ok());
  CHECK(absl::StrContains(no_file.status().message(), "/nonexistent/libxdl_trace_x.so"));
  CHECK_FALSE(ResolvePlugin("").ok());
}

TEST_CASE("a plugin path is resolved once: what is checked is what is loaded", "[plugin]") {
  // Issue 24 #7: "libX.so" in the current directory was checked there but dlopen()ed from the
  // library path (a name without '/'); a FIFO was reported as "does not exist".
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof(cwd)) != nullptr);
  char dir_template[] = "/tmp/xdl_plugin_cwd_XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  {
    std::ifstream in(TestPlugin("fake"), std::ios::binary);
    std::ofstream out(dir + "/libz.so", std::ios::binary);
    out << in.rdbuf();
  }
  REQUIRE(::mkfifo((dir + "/libfifo.so").c_str(), 0600) == 0);
  REQUIRE(::chdir(dir.c_str()) == 0);
  absl::StatusOr<std::string> local = ResolvePlugin("libz.so");
  absl::StatusOr<std::string> fifo = ResolvePlugin("libfifo.so");
  absl::StatusOr<std::string> dotted = ResolvePlugin("./libz.so");
  REQUIRE(::chdir(cwd) == 0);
  REQUIRE(local.ok());
  CHECK(*local == dir + "/libz.so");  // Absolute: dlopen loads this file, not the system's libz.
  REQUIRE(dotted.ok());
  CHECK(*dotted == dir + "/libz.so");
  absl::StatusOr<std::unique_ptr<PluginLibrary>> loaded = PluginLibrary::Load(*local);
  REQUIRE(loaded.ok());
  CHECK((*loaded)->profiler_type() == "fake");
  REQUIRE_FALSE(fifo.ok());
  CHECK(absl::StrContains(fifo.status().message(), "libfifo.so' is not a regular file (a FIFO)"));
  CHECK_FALSE(absl::StrContains(fifo.status().message(), "does not exist"));
  ::unlink((dir + "/libz.so").c_str());
  ::unlink((dir + "/libfifo.so").c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("a name is searched beside the binary holding the loader, and the miss says where",
          "[plugin]") {
  ::unsetenv(kPluginPathEnv);
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  const std::string self(exe, n);
  const std::string dir = self.substr(0, self.rfind('/'));
  const std::vector<std::string> dirs = PluginSearchDirs();
  // This test links the static library: the loader lives in the test binary.
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0] == dir + "/plugins");            // A wheel's _core: plugins/ beside it.
  CHECK(dirs[1] == dir + "/xdl_trace/plugins");  // An installed lib/libxdl_trace.so.
  CHECK(dirs[2] == dir);

  absl::StatusOr<std::string> missing = ResolvePlugin("no_such_tracer");
  REQUIRE_FALSE(missing.ok());
  const std::string message(missing.status().message());
  INFO(message);
  CHECK(absl::StartsWith(message, "device_tracers: 'no_such_tracer'"));
  CHECK(absl::StrContains(message, "libxdl_trace_no_such_tracer.so not found in [" + dir));
  CHECK_FALSE(absl::StrContains(message, "not built"));
}

#ifdef XDL_TRACE_HAVE_CUPTI
TEST_CASE("the built-in name cupti resolves to the plugin this build made", "[plugin]") {
  ::unsetenv(kPluginPathEnv);
  absl::StatusOr<std::string> path = ResolvePlugin(kCuptiTracerName);
  REQUIRE(path.ok());
  CHECK(*path == XDL_TRACE_CUPTI_PLUGIN);
  absl::StatusOr<std::unique_ptr<PluginLibrary>> library = PluginLibrary::Load(*path);
  REQUIRE(library.ok());
  CHECK((*library)->profiler_type() == "cupti");
}
#endif

TEST_CASE("bad plugins are refused naming the library and the field", "[plugin]") {
  ExpectRefused("bad_major", "abi_major");
  ExpectRefused("bad_size", "struct_size");
  ExpectRefused("null_collect", "collect is null");
  ExpectRefused("init_fails", "XdlTracePluginInit returned");
  ExpectRefused("no_symbol", "no symbol XdlTracePluginInit");

  // Not a shared library at all.
  const std::string bogus =
      std::string(XDL_TRACE_BINARY_DIR) + "/test_plugins/libxdl_trace_bogus.so";
  std::ofstream(bogus) << "not an ELF file";
  absl::StatusOr<std::unique_ptr<PluginLibrary>> library = PluginLibrary::Load(bogus);
  REQUIRE_FALSE(library.ok());
  CHECK(absl::StrContains(library.status().message(), bogus));
  CHECK(absl::StrContains(library.status().message(), "dlopen failed"));
}

TEST_CASE("validation names every null function and a missing profiler type", "[plugin]") {
  const XdlTracePluginRegistration good = GoodRegistration();
  REQUIRE(ValidateRegistration(good, "lib.so").ok());
  struct Case {
    const char* field;
    void (*clear)(XdlTracePluginRegistration*);
  };
  const Case cases[] = {
      {"create", [](XdlTracePluginRegistration* r) { r->create = nullptr; }},
      {"start", [](XdlTracePluginRegistration* r) { r->start = nullptr; }},
      {"stop", [](XdlTracePluginRegistration* r) { r->stop = nullptr; }},
      {"collect", [](XdlTracePluginRegistration* r) { r->collect = nullptr; }},
      {"step_begin", [](XdlTracePluginRegistration* r) { r->step_begin = nullptr; }},
      {"step_end", [](XdlTracePluginRegistration* r) { r->step_end = nullptr; }},
      {"destroy", [](XdlTracePluginRegistration* r) { r->destroy = nullptr; }},
      {"profiler_type", [](XdlTracePluginRegistration* r) { r->profiler_type = ""; }},
      {"abi_major", [](XdlTracePluginRegistration* r) { r->abi_major = 0; }},
      {"struct_size", [](XdlTracePluginRegistration* r) { r->struct_size = 8; }},
  };
  for (const Case& c : cases) {
    XdlTracePluginRegistration r = good;
    c.clear(&r);
    const absl::Status status = ValidateRegistration(r, "libx.so");
    INFO(c.field << ": " << status.message());
    CHECK(absl::IsInvalidArgument(status));
    CHECK(absl::StrContains(status.message(), "libx.so"));
    CHECK(absl::StrContains(status.message(), c.field));
  }
  // A newer minor version with a larger struct is accepted.
  XdlTracePluginRegistration newer = good;
  newer.abi_minor = XDL_TRACE_PLUGIN_ABI_MINOR + 3;
  newer.struct_size = sizeof(newer) + 64;
  CHECK(ValidateRegistration(newer, "lib.so").ok());
}

TEST_CASE("plugins stay mapped after unload (RTLD_NODELETE)", "[plugin]") {
  // A plugin may leave pointers into itself behind (libcupti keeps its buffer
  // callbacks): the loader never unmaps one, loaded or refused.
  for (const std::string name : {"fake", "bad_major"}) {
    const std::string path = TestPlugin(name);
    INFO(path);
    { PluginLibrary::Load(path).IgnoreError(); }
    void* still = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    CHECK(still != nullptr);
    if (still != nullptr) ::dlclose(still);
  }
}

TEST_CASE("the C plugin refuses options with a struct_size too small", "[plugin]") {
  const XdlTracePluginRegistration r = GoodRegistration();
  XdlTraceProfilerOptions options{};
  options.struct_size = offsetof(XdlTraceProfilerOptions, config);  // An older, shorter struct.
  options.config = "";
  PluginErrorBuffer error;
  XdlTraceProfiler* profiler = nullptr;
  CHECK(r.create(&options, &profiler, error.get()) == XDL_TRACE_PLUGIN_INVALID_ARGUMENT);
  CHECK(profiler == nullptr);
  INFO(error.message());
  CHECK(absl::StrContains(error.message(), "options struct_size 24, need at least 32"));
  options.struct_size = sizeof(options);
  REQUIRE(r.create(&options, &profiler, error.get()) == XDL_TRACE_PLUGIN_OK);
  r.destroy(profiler);
}

}  // namespace internal
}  // namespace xdl_trace
#else
TEST_CASE("plugin loader tests need the test plugins", "[plugin]") {
  WARN("SKIPPED: built without XDL_TRACE_BUILD_PLUGINS (no test plugins)");
}
#endif
