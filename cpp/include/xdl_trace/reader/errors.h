// What a read reports besides its records: a torn tail, and the error of a missing key.
#ifndef XDL_TRACE_READER_ERRORS_H_
#define XDL_TRACE_READER_ERRORS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace xdl_trace {

// Where a file ends inside a frame: the writer stopped mid-record (a crash),
// or the file ends in zeros a power loss left (docs/format.md, "Torn tails").
// The records before it are complete.
struct TornTail {
  std::string path;
  int32_t rank = 0;
  uint64_t offset = 0;       // The partial frame's first byte (0: the Header is cut short).
  bool zero_filled = false;  // The tail is zeros from `zero_from` to the end.
  uint64_t zero_from = 0;
  uint64_t file_bytes = 0;
  uint64_t meta_data_bytes = 0;  // What the file's Meta covers (0: no Meta).
  // The writer had not closed the file (no Meta, or closed_cleanly false): it
  // may still be writing it, or it stopped (a crash).
  bool writer_open = false;
  int64_t complete_records = 0;  // Record frames before `offset`.
};

// One line naming the file and offset: the warning every reader prints.
std::string DescribeTornTail(const TornTail& torn);

// True for the NotFound a read returns when a file lacks a selected key (the
// message names the file, the key and the file's keys).
bool IsMissingKeyError(const absl::Status& status);

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_ERRORS_H_
