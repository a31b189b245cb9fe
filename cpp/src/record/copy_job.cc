// CopyJob: chunked memcpy's claimed by the training thread and the IO thread; contiguous frames.
#include "record/copy_job.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace xdl_trace {
namespace internal {

void CopyJob::Add(char* dst, const char* src, size_t size) {
  while (size > 0) {
    const size_t n = std::min(size, kChunkBytes);
    chunks_.push_back({dst, src, n});
    dst += n;
    src += n;
    size -= n;
  }
}

size_t CopyJob::CopyClaimed() {
  size_t copied = 0;
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= chunks_.size()) return copied;
    const Chunk& chunk = chunks_[i];
    std::memcpy(chunk.dst, chunk.src, chunk.size);
    ++copied;
  }
}

void CopyJob::Help() {
  const size_t copied = CopyClaimed();
  if (copied == 0) return;
  MutexLock lock(&mu_);
  done_ += copied;
  helped_ += copied;
  if (done_ == chunks_.size()) all_done_.SignalAll();
}

void CopyJob::RunAndWait() {
  const size_t copied = CopyClaimed();
  MutexLock lock(&mu_);
  done_ += copied;
  // The lock orders the helper's copies before whatever the owner does next.
  while (done_ < chunks_.size()) all_done_.Wait(&mu_);
}

size_t CopyJob::helped_chunks() const {
  MutexLock lock(&mu_);
  return helped_;
}

void PlanContiguousFrame(const EncodedRecord& record, std::string* buffer, CopyJob* job) {
  char* out = buffer->data();
  for (const FramePiece& piece : record.pieces) {
    if (piece.external != nullptr) {
      job->Add(out, piece.external, piece.size);
    } else {
      std::memcpy(out, record.frame.data() + piece.offset, piece.size);
    }
    out += piece.size;
  }
}

std::string AdoptFrame(EncodedRecord* record, std::string buffer) {
  std::string framing = std::move(record->frame);
  record->frame = std::move(buffer);
  record->pieces.clear();
  record->external_bytes = 0;
  return framing;
}

}  // namespace internal
}  // namespace xdl_trace
