// Encodes Records in protobuf wire format from tensor memory: one copy of each tensor's bytes.
#ifndef XDL_TRACE_RECORD_RECORD_ENCODER_H_
#define XDL_TRACE_RECORD_RECORD_ENCODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "record/encoded_record.h"
#include "xdl_trace/tensor.h"

namespace xdl_trace {
namespace internal {

// Supplies the string a frame is written into, given the frame's exact size:
// typically a recycled buffer (TraceWriter::TakeBuffer) whose capacity is at
// least that size, so encoding neither allocates nor page-faults. Its contents
// are discarded; a smaller capacity is grown.
using FrameBufferSource = absl::FunctionRef<std::string(size_t frame_bytes)>;

// Frames a Record {gstep, lstep, column..., timestamp, extra, crc32c} whose
// bytes equal protobuf's own serialization of the same message, crc32c (field
// 16, always last) being the CRC-32C of the body before it. `trailing_fields`
// holds already-serialized fields numbered 5..15 (device tracing), appended as
// is. The crc32c value is left to the writer (crc_at_write, SealFrame on the IO
// thread): the training thread never reads the bytes twice.
// Sizes are computed first, then one buffer of the exact size is filled.
// InvalidArgument when a dimension does not fit int32 or the record exceeds
// kMaxFrameBytes (naming the key from `keys` when given).
absl::StatusOr<EncodedRecord> EncodeRecord(int64_t gstep, int64_t lstep, int64_t timestamp_ms,
                                           absl::Span<const TensorView> columns,
                                           absl::Span<const std::string> keys = {},
                                           absl::string_view trailing_fields = {});

// Where a deferred column's bytes will be (CapturedTensor::deferred); `bytes`
// null: an ordinary column, read from its view.
struct DeferredSource {
  std::shared_ptr<DeferredBytes> bytes;
  size_t offset = 0;
};

// How EncodeRecord treats column data.
struct EncodeOptions {
  // Column data of at least this many bytes is not copied: the record gets a
  // piece pointing at the tensor's memory (EncodedRecord::pieces), which the
  // caller must keep alive and unchanged until the record is written. Smaller
  // data is copied, so a record of tiny columns stays a few iovecs. The
  // default copies everything (a contiguous frame). The frame's bytes are the
  // same either way.
  size_t reference_min_bytes = SIZE_MAX;
  // One per column, or fewer (the rest are not deferred): a column with a
  // source becomes a deferred piece (its view's data is not read) and the
  // record holds the source's bytes (EncodedRecord::deferred), whatever
  // reference_min_bytes says.
  absl::Span<const DeferredSource> deferred;
  // Already-serialized payloads of length-delimited field `moved_field_number`
  // (device traces, up to megabytes each), placed after the timestamp and
  // before `trailing_fields`: moved into the record (EncodedRecord::owned) and
  // written from there, never copied. Left empty.
  std::vector<std::string>* moved_fields = nullptr;
  uint32_t moved_field_number = 0;
};

// The same, writing into the buffer `buffer_source` returns (asked once, only
// after the sizes were validated, for the bytes the record owns). The bytes
// do not depend on the buffer.
absl::StatusOr<EncodedRecord> EncodeRecord(int64_t gstep, int64_t lstep, int64_t timestamp_ms,
                                           absl::Span<const TensorView> columns,
                                           absl::Span<const std::string> keys,
                                           absl::string_view trailing_fields,
                                           FrameBufferSource buffer_source,
                                           const EncodeOptions& options = {});

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_RECORD_ENCODER_H_
