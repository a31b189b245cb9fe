// libFuzzer entry for the trace reader: the input is a data file, optionally followed by
// kMetaSeparator and the bytes of its .meta; it is opened, read record by record and verified.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "core/crc32c.h"
#include "fuzz_check.h"
#include "xdl_trace/reader/file_meta.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/trace_file.h"

namespace {

// Splits an input into data file and Meta (what make_seeds.py writes between them).
constexpr absl::string_view kMetaSeparator("\0--xdl-fuzz-meta--\0", 19);

// A private directory for this process's two files.
struct ScratchDir {
  std::string dir;
  std::string data_path;
  std::string meta_path;

  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/xdl_trace_fuzz.XXXXXX";
    FUZZ_CHECK(mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    data_path = dir + "/train.trace.0.0";
    meta_path = data_path + ".meta";
  }
  ~ScratchDir() {
    unlink(data_path.c_str());
    unlink(meta_path.c_str());
    rmdir(dir.c_str());
  }
};

void WriteFile(const std::string& path, absl::string_view bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FUZZ_CHECK(fd >= 0);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    FUZZ_CHECK(n > 0);
    done += static_cast<size_t>(n);
  }
  FUZZ_CHECK(close(fd) == 0);
}

bool Within(absl::string_view inner, absl::string_view outer) {
  if (inner.empty()) return true;
  return inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ScratchDir scratch;  // Removed at exit.

  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kMetaSeparator);
  WriteFile(scratch.data_path, input.substr(0, split));
  if (split == absl::string_view::npos) {
    unlink(scratch.meta_path.c_str());
  } else {
    WriteFile(scratch.meta_path, input.substr(split + kMetaSeparator.size()));
  }

  absl::StatusOr<std::shared_ptr<xdl_trace::TraceFile>> opened =
      xdl_trace::TraceFile::Open(scratch.data_path);
  if (!opened.ok()) {
    FUZZ_CHECK(!opened.status().message().empty());
    return 0;
  }
  const xdl_trace::TraceFile& file = **opened;
  FUZZ_CHECK(file.first_record_offset() <= file.size());

  // Checked at open (TraceFile::CheckHeader): a file opened under our Meta with header_crc32c
  // has that Header.
  const std::optional<xdl_trace::FileMeta>& meta = file.meta();
  const bool ours = meta && meta->format_version == xdl_trace::kFormatVersion;
  if (ours && meta->header_crc32c && !file.header_torn()) {
    FUZZ_CHECK(xdl_trace::internal::crc32c::Value(
                   file.bytes().data(), file.first_record_offset()) == *meta->header_crc32c);
  }
  // Under a Meta with its own checksum every record served is sealed: its frame ends in
  // Record.crc32c (field 16, fixed32: tag bytes 0x85 0x01, then 4 bytes).
  const bool sealed = ours && meta->has_meta_crc32c;

  xdl_trace::RecordCursor cursor = file.Records();
  xdl_trace::RecordView record;
  uint64_t next_offset = file.first_record_offset();
  int64_t records = 0;
  while (cursor.Next(&record)) {
    // Records come in file order, each inside the file, one column per header key (none
    // in a device-only record: docs/format.md).
    FUZZ_CHECK(record.offset >= next_offset);
    FUZZ_CHECK(record.frame_size > 0 && record.offset + record.frame_size <= file.size());
    next_offset = record.offset + record.frame_size;
    if (sealed) {
      FUZZ_CHECK(record.frame_size >= 10);
      const char* tag = file.bytes().data() + next_offset - 6;
      FUZZ_CHECK(static_cast<uint8_t>(tag[0]) == 0x85 && static_cast<uint8_t>(tag[1]) == 0x01);
    }
    FUZZ_CHECK(record.columns.size() == file.keys().size() ||
               xdl_trace::IsDeviceOnlyRecord(record, file.keys().size()));
    for (const xdl_trace::ColumnView& column : record.columns) {
      FUZZ_CHECK(Within(column.data, file.bytes()));
      FUZZ_CHECK(column.NumElements() >= 0);
    }
    for (const xdl_trace::RawField& field : record.extra_fields) {
      FUZZ_CHECK(Within(field.encoded, file.bytes()));
    }
    ++records;
  }
  FUZZ_CHECK(cursor.status().ok() || !cursor.status().message().empty());

  const xdl_trace::VerifyReport report = file.Verify();
  FUZZ_CHECK(!report.ok || report.problems.empty());
  FUZZ_CHECK(report.ok || !report.problems.empty() || !report.has_meta);
  return 0;
}
