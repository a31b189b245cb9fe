// Helpers shared by the C++ tests: temporary directories, whole-file I/O and data-file frames.
#ifndef XDL_TRACE_TESTS_CPP_TEST_UTIL_H_
#define XDL_TRACE_TESTS_CPP_TEST_UTIL_H_

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/crc32c.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace test {

// Polls `pred` until it holds or 10 s pass (a hang guard, not a timing assertion).
inline bool Eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

// A sink that holds the IO thread until opened (a deterministic slow disk).
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int waiting_ = 0;
};

// A fresh directory <build>/test_tmp/<name>.XXXXXX, removed (recursively) at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& name = "test") {
    const std::string base = std::string(XDL_TRACE_BINARY_DIR) + "/test_tmp";
    mkdir(base.c_str(), 0755);
    std::string pattern = base + "/" + name + ".XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The whole file into *bytes; false when it cannot be opened. No Catch2 macro:
// safe on a worker thread (Catch2 v2 assertions are main-thread only).
inline bool TryReadFile(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

// The whole file, which must exist.
inline std::string ReadFile(const std::string& path) {
  std::string bytes;
  INFO(path);
  REQUIRE(TryReadFile(path, &bytes));
  return bytes;
}

// Replaces the file with `bytes`.
inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Lowers RLIMIT_FSIZE for this process (SIGXFSZ ignored, so write(2) fails
// with EFBIG) and restores both at scope exit. ctest runs each TEST_CASE in its
// own process, so no other test sees the limit.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_) == 0);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = old_;
    lowered.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
};

// One frame of a data file: [4-byte little-endian length][body].
inline std::string Frame(const std::string& body) {
  const auto n = static_cast<uint32_t>(body.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + body;
}

// The bodies of the frames `bytes` holds, which must be whole frames only.
inline std::vector<std::string> SplitFrames(const std::string& bytes) {
  std::vector<std::string> frames;
  size_t at = 0;
  while (at < bytes.size()) {
    REQUIRE(at + 4 <= bytes.size());
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
    REQUIRE(at + 4 + n <= bytes.size());
    frames.push_back(bytes.substr(at + 4, n));
    at += 4 + n;
  }
  return frames;
}

// The bytes of `values`, as a Column's data holds them.
template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Appends a Column {dtype, shape, data} to `record`.
inline void AddColumn(xdl::proto::Record* record, xdl::proto::Type dtype, std::vector<int> shape,
                      const std::string& data) {
  xdl::proto::Column* column = record->add_column();
  column->set_dtype(dtype);
  for (int d : shape) column->add_shape(d);
  column->set_data(data);
}

// protobuf's own serialization of Record {gstep, lstep, columns, timestamp}, framed: what the
// hand-written encoder must reproduce byte for byte.
inline std::string ProtobufFrame(int64_t gstep, int64_t lstep, int64_t timestamp,
                                 const std::vector<TensorView>& columns) {
  xdl::proto::Record record;
  record.set_gstep(gstep);
  record.set_lstep(lstep);
  record.set_timestamp(timestamp);
  for (const TensorView& view : columns) {
    xdl::proto::Column* column = record.add_column();
    column->set_dtype(static_cast<xdl::proto::Type>(view.dtype));
    for (int64_t dim : view.shape) column->add_shape(static_cast<int32_t>(dim));
    if (view.NumBytes() > 0) column->set_data(static_cast<const char*>(view.data), view.NumBytes());
  }
  std::string body;
  REQUIRE(record.SerializeToString(&body));
  return Frame(body);
}

// `frame` (a framed Record without Record.crc32c) as the encoder seals it:
// field 16 (fixed32) appended, the CRC-32C of the body before it.
inline std::string Sealed(const std::string& frame) {
  std::string body = frame.substr(4);
  const uint32_t crc = internal::crc32c::Value(body.data(), body.size());
  body += std::string("\x85\x01", 2);
  for (int i = 0; i < 4; ++i) body.push_back(static_cast<char>(crc >> (8 * i)));
  return Frame(body);
}

// ProtobufFrame as the encoder writes it: sealed with its checksum.
inline std::string SealedProtobufFrame(int64_t gstep, int64_t lstep, int64_t timestamp,
                                       const std::vector<TensorView>& columns) {
  return Sealed(ProtobufFrame(gstep, lstep, timestamp, columns));
}

}  // namespace test
}  // namespace xdl_trace

#endif  // XDL_TRACE_TESTS_CPP_TEST_UTIL_H_
