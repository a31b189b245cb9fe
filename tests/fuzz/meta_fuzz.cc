// libFuzzer entry for the Meta parser: any bytes go through ParseFileMeta as a .meta file's
// content.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz_check.h"
#include "xdl_trace/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::StatusOr<xdl_trace::FileMeta> meta =
      xdl_trace::ParseFileMeta(absl::string_view(reinterpret_cast<const char*>(data), size));
  // An error must say what was wrong.
  FUZZ_CHECK(meta.ok() || !meta.status().message().empty());
  return 0;
}
