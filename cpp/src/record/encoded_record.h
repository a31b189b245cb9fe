// One framed record on its way from the training thread to the IO thread (record/ -> io/).
#ifndef XDL_TRACE_RECORD_ENCODED_RECORD_H_
#define XDL_TRACE_RECORD_ENCODED_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace xdl_trace {
namespace internal {

// Bytes of a frame's length prefix (little-endian uint32).
inline constexpr size_t kFrameLengthBytes = 4;
// Largest frame body the length prefix can describe (4 GiB - 1): the one
// record-size limit, checked by the encoder and the writer.
inline constexpr uint64_t kMaxFrameBytes = 0xFFFFFFFFull;

// One record, already framed for the data file: 4-byte little-endian length
// followed by the serialized xdl.proto.Record. The step fields ride along so
// the IO thread can keep Meta current without parsing.
struct EncodedRecord {
  int64_t gstep = 0;
  int64_t lstep = 0;
  int64_t timestamp_ms = 0;
  std::string frame;
};

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_RECORD_ENCODED_RECORD_H_
