// libFuzzer entry for the Meta parser: any bytes go through ParseFileMeta as a .meta file's
// content.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz_check.h"
#include "xdl_trace/reader/file_meta.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::StatusOr<xdl_trace::FileMeta> meta =
      xdl_trace::ParseFileMeta(absl::string_view(reinterpret_cast<const char*>(data), size));
  // An error must say what was wrong.
  FUZZ_CHECK(meta.ok() || !meta.status().message().empty());
  if (!meta.ok()) return 0;
  // The writer that writes header_crc32c seals the Meta: one without its own checksum lost it.
  FUZZ_CHECK(!meta->header_crc32c || meta->has_meta_crc32c);
  // A Meta read as XDL's (no format_version) holds XDL's fields 1-6 only.
  if (meta->format_version == 0) {
    FUZZ_CHECK(!meta->header_crc32c && !meta->has_meta_crc32c);
    FUZZ_CHECK(meta->rank == 0 && meta->file_index == 0 && meta->record_count == 0 &&
               meta->data_bytes == 0 && meta->crc32c == 0 && !meta->closed_cleanly);
  }
  return 0;
}
