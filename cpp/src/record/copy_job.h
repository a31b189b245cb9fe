// A record's tensor copies shared by two threads: the training thread and the IO thread (split
// copy).
#ifndef XDL_TRACE_RECORD_COPY_JOB_H_
#define XDL_TRACE_RECORD_COPY_JOB_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"
#include "record/encoded_record.h"

namespace xdl_trace {
namespace internal {

// A list of memcpy's cut into chunks that any thread may claim. The owner
// (the training thread) fills it, hands it to a helper (the IO thread, through
// its queue), copies chunks itself and waits only for the chunks the helper
// claimed: a helper busy with a write, or never arriving, costs the owner
// nothing but doing the copy alone. Once RunAndWait() returns, no thread reads
// or writes any range again (a late Help() finds nothing to claim), so the
// source memory may change and the destination may be written.
//
// Threading: Add() by the owner before sharing; Help() from any thread;
// RunAndWait() by the owner, once. The chunk list is read-only once shared
// (published by the queue's lock); claiming is one atomic counter.
class CopyJob {
 public:
  // Bytes per chunk: large enough that claiming costs nothing, small enough
  // that the owner never waits long for a chunk the helper is copying.
  static constexpr size_t kChunkBytes = size_t{256} << 10;

  CopyJob() = default;
  CopyJob(const CopyJob&) = delete;
  CopyJob& operator=(const CopyJob&) = delete;

  // Owner, before sharing: copy `size` bytes from `src` to `dst`.
  void Add(char* dst, const char* src, size_t size);
  // Any thread: copies unclaimed chunks until none is left.
  void Help() ABSL_LOCKS_EXCLUDED(mu_);
  // Owner: Help(), then waits until every chunk is copied.
  void RunAndWait() ABSL_LOCKS_EXCLUDED(mu_);

  size_t chunks() const { return chunks_.size(); }
  // Chunks copied by threads other than the owner (after RunAndWait).
  size_t helped_chunks() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Chunk {
    char* dst;
    const char* src;
    size_t size;
  };
  // Copies unclaimed chunks; returns how many this call copied.
  size_t CopyClaimed();

  std::vector<Chunk> chunks_;  // Written by Add() only, before sharing.
  std::atomic<size_t> next_{0};
  mutable Mutex mu_;
  CondVar all_done_;
  size_t done_ ABSL_GUARDED_BY(mu_) = 0;
  size_t helped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Makes `record` (in pieces, see EncodedRecord) contiguous in `buffer`, which
// must hold record.FrameBytes() bytes: its owned runs are copied now, its
// external runs are added to `job`. The record is contiguous once the job ran
// (RunAndWait) and `buffer` replaced its frame (see AdoptFrame).
void PlanContiguousFrame(const EncodedRecord& record, std::string* buffer, CopyJob* job);
// After the job ran: `buffer` becomes the record's frame; returns the framing
// bytes it held (capacity kept, for reuse).
std::string AdoptFrame(EncodedRecord* record, std::string buffer);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_COPY_JOB_H_
