// Read-time demangling of kernel names (see demangle.h): abi::__cxa_demangle behind a cache.
#include "analysis/demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"

namespace xdl_trace {
namespace internal {
namespace {

struct DemangleCache {
  Mutex mu;
  std::unordered_map<std::string, std::string> names ABSL_GUARDED_BY(mu);
};

DemangleCache& Cache() {
  static DemangleCache* cache = new DemangleCache();  // Never destroyed (used at exit).
  return *cache;
}

std::string DemangleUncached(const std::string& name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  if (status != 0 || out == nullptr) return name;
  return std::string(out.get());
}

}  // namespace

std::string Demangle(absl::string_view name) {
  if (name.size() < 3 || name.substr(0, 2) != "_Z") return std::string(name);
  std::string key(name);
  DemangleCache& cache = Cache();
  {
    MutexLock lock(&cache.mu);
    auto it = cache.names.find(key);
    if (it != cache.names.end()) return it->second;
  }
  std::string demangled = DemangleUncached(key);
  MutexLock lock(&cache.mu);
  if (cache.names.size() >= kDemangleCacheSize) cache.names.clear();
  cache.names.emplace(std::move(key), demangled);
  return demangled;
}

}  // namespace internal
}  // namespace xdl_trace
