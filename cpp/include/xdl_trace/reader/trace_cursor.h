// The scan of a trace: the selected records of every rank, merged by gstep as they are read.
#ifndef XDL_TRACE_READER_TRACE_CURSOR_H_
#define XDL_TRACE_READER_TRACE_CURSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/record_view.h"

namespace xdl_trace {

// One record from a TraceCursor. `view` holds the selected columns (named by
// `keys`, in selection order); its data points into the file's mapping.
struct TraceRecord {
  RecordView view;
  const std::vector<std::string>* keys = nullptr;
  size_t file = 0;  // Index into TraceReader::files().
  int32_t rank = 0;
  bool device_only = false;  // A device-only record (IsDeviceOnlyRecord): `view` has no column.
};

class TraceReader;

// Yields the selected records of a TraceReader, merged across ranks by
// (gstep, rank) as they are read: each rank is its files in index order, and
// the next record is the smallest head among the ranks (heapq.merge's rule).
// Files are opened and their keys checked as the read reaches them; a file
// whose Meta proves it holds none of the steps is not read. Not thread-safe;
// keeps its reader's files alive.
class TraceCursor {
 public:
  enum class Event {
    kRecord,    // record() holds the next record.
    kTornTail,  // torn_tail() names a file that ends inside a frame (once per file).
    kEnd,       // Nothing more.
    kBlockEnd,  // ReadOptions::interleave only: one of this lane's blocks ended.
  };

  TraceCursor(TraceCursor&&) noexcept;
  TraceCursor& operator=(TraceCursor&&) noexcept;
  ~TraceCursor();

  // Moves on. Corruption (DataLoss naming the file and offset) and a missing
  // key (IsMissingKeyError) are errors, returned again by every later call.
  absl::StatusOr<Event> Next();

  // The record of the last kRecord; valid until the next call to Next().
  const TraceRecord& record() const;
  // DataLoss naming the file of the last record returned if it shrank since it
  // was opened (TraceFile::CheckNotCut): records handed out as views of its
  // mapping read zeros past its new end. Returned again by every later Next().
  // For a caller that hands records on in batches, at each batch's start.
  absl::Status CheckNotCut();
  // The torn tail of the last kTornTail.
  const TornTail& torn_tail() const;
  // Frame bytes walked so far (including frames outside the step selection).
  uint64_t bytes_read() const;
  // A read of one file, once Next() returned kEnd: the offset just past its
  // last complete frame (a torn tail's start), where a read of the file after
  // it grew resumes (ReadOptions::start_offset). 0 before the end.
  uint64_t end_offset() const;
  // ReadOptions::interleave: the number of the block the next frame is in
  // (at kTornTail and kEnd, the block they are met in).
  uint64_t block() const;

 private:
  friend class TraceReader;
  struct Impl;
  explicit TraceCursor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdl_trace

#endif  // XDL_TRACE_READER_TRACE_CURSOR_H_
