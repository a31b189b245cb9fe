// How a read is asked for: the file options, the steps selected and the options of a whole read.
#ifndef XDL_TRACE_READER_OPTIONS_H_
#define XDL_TRACE_READER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xdl_trace {

// How a TraceFile reads its records.
struct FileOptions {
  // Check each record's Record.crc32c (docs/format.md, "Record checksums")
  // before decoding it: a mismatch is DataLoss naming the file and offset. A
  // record without one (XDL's files, older writers) is read unchecked. Off:
  // a hot path that trusts its disk skips one pass over the record's bytes
  // (the cost is in docs/benchmarks.md); Verify checks them either way.
  bool check_record_crc = true;
};

// Which gsteps a read selects: an inclusive range (either end open) and,
// optionally, an exact set of steps inside it.
struct StepSelection {
  std::optional<int64_t> begin;
  std::optional<int64_t> end;
  std::optional<std::vector<int64_t>> steps;  // Any order; duplicates are fine.
};

// What TraceReader::Read yields.
struct ReadOptions {
  std::optional<std::vector<std::string>> keys;  // nullopt: every key of each file, in order.
  StepSelection steps;
  std::optional<std::vector<int32_t>> ranks;  // nullopt: every rank; unknown ranks are ignored.
  // Also yield the device-only records (docs/format.md "Device events") of a
  // read that selects keys, with no column and TraceRecord::device_only set;
  // a read of no key yields them anyway.
  bool device_only_records = false;
  // A read of one file: the byte offset it starts at instead of the file's
  // first record (or where its Meta lets a read start, when that is later).
  // It must be a frame boundary: an earlier read's TraceCursor::end_offset(),
  // so that a file being written is read on from where the last read ended
  // (xdl-trace serve). A read of several files is refused (InvalidArgument).
  std::optional<uint64_t> start_offset;

  // One lane of a one-rank read split into `lanes` reads that decode in
  // parallel: the rank's frames (from where the read starts, selected or not)
  // are numbered in blocks that end after `block_frames` frames or
  // `block_bytes` bytes, whichever comes first; this read decodes the blocks
  // whose number % lanes == lane and hops over the others by their length
  // prefixes (no decode). After each of its blocks it returns kBlockEnd. So
  // the lanes' blocks, taken in turn, are the plain read's records in order;
  // a torn tail belongs to the block it is met in (TraceCursor::block()), and
  // so does the end. A read of several ranks is refused (InvalidArgument).
  struct Interleave {
    int lanes = 1;
    int lane = 0;
    uint64_t block_frames = 1024;
    uint64_t block_bytes = uint64_t{64} << 20;
  };
  std::optional<Interleave> interleave;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_OPTIONS_H_
