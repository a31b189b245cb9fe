// The Meta sidecar "<data file>.meta": what the reader reads of it, and parsing it.
#ifndef XDL_TRACE_READER_FILE_META_H_
#define XDL_TRACE_READER_FILE_META_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace xdl_trace {

// The Meta sidecar "<data file>.meta": the fields the reader's own logic
// reads (file skipping, torn-tail vouching, Verify), plus the serialized
// message for everything else. The .proto is the one list of Meta fields:
// the Python binding turns `serialized` into a dict by protobuf reflection, so
// a new Meta field reaches Python with no edit here.
struct FileMeta {
  int64_t lstep_begin = 0;
  int64_t lstep_end = 0;
  int64_t gstep_begin = 0;
  int64_t gstep_end = 0;
  int64_t timestamp_begin = 0;
  int64_t timestamp_end = 0;
  int64_t record_count = 0;
  int64_t data_bytes = 0;
  uint32_t crc32c = 0;
  int32_t rank = 0;        // Meta.rank: the writer's rank, as in the file name.
  int64_t file_index = 0;  // Meta.file_index: the file's index, as in its name.
  // 0: a Meta written by XDL (fields 1-6 only: the first and last record's
  // steps and times, -1 where XDL never learnt one; no record count, no
  // checksum). kFormatVersion: ours. Anything else is refused.
  int32_t format_version = 0;
  bool closed_cleanly = false;
  // Meta.header_crc32c: the CRC-32C of the Header frame, checked at open.
  std::optional<uint32_t> header_crc32c;
  // The Meta ended with its own checksum (Meta.meta_crc32c), which held.
  bool has_meta_crc32c = false;
  std::string serialized;  // The whole xdl.proto.Meta as read.
};

// The newest Meta.format_version this reader knows.
inline constexpr int32_t kFormatVersion = 1;
// A Meta is about 100 bytes; a .meta larger than this is refused unread.
inline constexpr uint64_t kMaxMetaBytes = 64 * 1024;

// Parses a serialized Meta (the whole content of a .meta file).
absl::StatusOr<FileMeta> ParseFileMeta(absl::string_view bytes);
// Reads and parses "<path>"; NotFound when it does not exist. Only a regular
// file of at most kMaxMetaBytes is read (a FIFO or a link to /dev/zero is
// InvalidArgument naming it, and is never waited on or read to its end).
absl::StatusOr<FileMeta> ReadFileMeta(const std::string& meta_path);

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_FILE_META_H_
