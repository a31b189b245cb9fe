// One framed record on its way from the training thread to the IO thread (record/ -> io/).
#ifndef XDL_TRACE_RECORD_ENCODED_RECORD_H_
#define XDL_TRACE_RECORD_ENCODED_RECORD_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "xdl_trace/deferred.h"

namespace xdl_trace {
namespace internal {

// Bytes of a frame's length prefix (little-endian uint32).
inline constexpr size_t kFrameLengthBytes = 4;
// Bytes of the Record.crc32c field that ends every frame the encoder writes:
// a two-byte tag (field 16, fixed32) and the CRC-32C of the body before it.
inline constexpr size_t kRecordCrcBytes = 6;
// Largest frame body the length prefix can describe (4 GiB - 1): the one
// record-size limit, checked by the encoder and the writer.
inline constexpr uint64_t kMaxFrameBytes = 0xFFFFFFFFull;

// One run of a frame's bytes: `size` bytes at `external` (memory the record
// does not own), or, when `external` is null, bytes [offset, offset + size)
// of the record's own `frame` string (an offset, so moving the string keeps
// it valid). A deferred piece (`deferred` >= 0) is external bytes not in host
// memory yet: `offset` bytes into EncodedRecord::deferred[deferred], and
// `external` is set by ResolveDeferred.
struct FramePiece {
  const char* external = nullptr;
  size_t offset = 0;
  size_t size = 0;
  int32_t deferred = -1;

  bool is_external() const { return external != nullptr || deferred >= 0; }
};

// One record, already framed for the data file: 4-byte little-endian length
// followed by the serialized xdl.proto.Record. The step fields ride along so
// the IO thread can keep Meta current without parsing.
//
// Contiguous (the usual case, `pieces` empty): `frame` holds the whole frame.
// In pieces (write mode "inline"): the frame is the concatenation of
// `pieces`; `frame` holds the framing bytes they point into (always the first
// piece, with the length prefix) and the other pieces point at tensor memory
// that whoever submitted the record keeps alive and unchanged until the IO
// thread has written it (TraceWriter::WriteThrough waits for that).
struct EncodedRecord {
  int64_t gstep = 0;
  int64_t lstep = 0;
  int64_t timestamp_ms = 0;
  std::string frame;
  std::vector<FramePiece> pieces;  // Empty: `frame` is the whole frame.
  // Bytes the record owns outside `frame` (EncodeOptions::moved_fields): the
  // external pieces pointing into them stay valid while the record lives
  // (moving the vector keeps its elements where they are).
  std::vector<std::string> owned;
  size_t external_bytes = 0;  // Sum of the external pieces' sizes.
  // The frame ends in its checksum field (Record.crc32c, kRecordCrcBytes, in
  // `frame`, counted by the length prefix) whose value the encoder left to the
  // IO thread (off the training thread; in pieces, tensor bytes may not be in
  // host memory yet). The writer fills it in (SealFrame) before writing it.
  bool crc_at_write = false;
  // The copies in flight the deferred pieces wait for (one per step as a
  // rule), held until the record is written or dropped.
  std::vector<std::shared_ptr<DeferredBytes>> deferred;

  // Bytes of the whole frame, length prefix included.
  size_t FrameBytes() const { return frame.size() + external_bytes; }
};

// Waits for the record's deferred bytes (DeferredBytes::Wait, each at most
// `timeout` after it was armed) and points its deferred pieces at them; the
// first error otherwise (the record must then be dropped). On the IO thread,
// before the record is written.
// Cancelled soon after `*abandon` turns true (DeferredBytes::Wait).
absl::Status ResolveDeferred(EncodedRecord* record, std::chrono::steady_clock::duration timeout,
                             const std::atomic<bool>* abandon = nullptr);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_ENCODED_RECORD_H_
