// Helpers shared by the reader's tests (trace_file_test.cc, trace_cursor_test.cc,
// trace_reader_test.cc): data files and Metas written with protobuf's own serialization (not the
// writer), and the records or cursor events read back from them. They live in namespace xdl_trace,
// beside the types they return, so a test names them as its own.
#ifndef XDL_TRACE_TESTS_CPP_READER_READER_TEST_UTIL_H_
#define XDL_TRACE_TESTS_CPP_READER_READER_TEST_UTIL_H_

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/crc32c.h"
#include "test_util.h"
#include "xdl_trace.pb.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/trace_cursor.h"
#include "xdl_trace/reader/trace_file.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {

inline std::string HeaderFrame(const std::vector<std::string>& keys) {
  xdl::proto::Header header;
  for (const auto& k : keys) header.add_key(k);
  return test::Frame(header.SerializeAsString());
}

// A simple record: gstep, lstep = gstep / 2, timestamp, columns "w" (2x3
// float32) and "loss" (scalar float32).
inline xdl::proto::Record SimpleRecord(int64_t gstep) {
  xdl::proto::Record record;
  record.set_gstep(gstep);
  record.set_lstep(gstep / 2);
  record.set_timestamp(1700000000000 + gstep);
  const float g = static_cast<float>(gstep);
  test::AddColumn(&record, xdl::proto::Float, {2, 3},
                  test::Bytes<float>({g, g + 1, g + 2, g + 3, g + 4, g + 5}));
  test::AddColumn(&record, xdl::proto::Float, {}, test::Bytes<float>({g * 0.5f}));
  return record;
}

// A Meta covering `data` (Header + Record frames): the given record count and
// gstep range, the lstep and timestamp ranges of the records in `data`.
inline xdl::proto::Meta MetaFor(const std::string& data, int64_t records, int64_t gstep_begin,
                                int64_t gstep_end) {
  xdl::proto::Meta meta;
  meta.set_gstep_begin(gstep_begin);
  meta.set_gstep_end(gstep_end);
  uint32_t header;
  std::memcpy(&header, data.data(), 4);
  size_t pos = 4 + header;
  for (bool first = true; pos + 4 <= data.size(); first = false) {
    uint32_t n;
    std::memcpy(&n, data.data() + pos, 4);
    xdl::proto::Record r;
    if (pos + 4 + n > data.size() || !r.ParseFromArray(data.data() + pos + 4, n)) break;
    meta.set_lstep_begin(first ? r.lstep() : std::min(meta.lstep_begin(), r.lstep()));
    meta.set_lstep_end(first ? r.lstep() : std::max(meta.lstep_end(), r.lstep()));
    meta.set_timestamp_begin(first ? r.timestamp()
                                   : std::min(meta.timestamp_begin(), r.timestamp()));
    meta.set_timestamp_end(first ? r.timestamp() : std::max(meta.timestamp_end(), r.timestamp()));
    pos += 4 + n;
  }
  meta.set_record_count(records);
  meta.set_data_bytes(static_cast<int64_t>(data.size()));
  meta.set_crc32c(internal::crc32c::Value(data.data(), data.size()));
  meta.set_format_version(1);
  meta.set_closed_cleanly(true);
  return meta;
}

// Writes a data file of SimpleRecords for gsteps [first, first + count) and its
// Meta; returns the file's bytes.
inline std::string WriteSimpleFile(const std::string& path, int64_t first, int count,
                                   bool with_meta = true) {
  std::string data = HeaderFrame({"w", "loss"});
  for (int i = 0; i < count; ++i) data += test::Frame(SimpleRecord(first + i).SerializeAsString());
  test::WriteFile(path, data);
  if (with_meta) {
    test::WriteFile(path + ".meta",
                    MetaFor(data, count, first, first + count - 1).SerializeAsString());
  }
  return data;
}

inline std::vector<RecordView> ReadAll(const std::shared_ptr<TraceFile>& file,
                                       RecordCursor* cursor) {
  std::vector<RecordView> out;
  RecordView record;
  while (cursor->Next(&record)) out.push_back(record);
  return out;
}

// Opens `path`, which must open.
inline std::shared_ptr<TraceFile> MustOpen(const std::string& path) {
  auto file = TraceFile::Open(path);
  INFO(file.status().ToString());
  REQUIRE(file.ok());
  return *std::move(file);
}

// Every record of `file` (views into its mapping); the read must end cleanly.
inline std::vector<RecordView> ReadAllOk(const std::shared_ptr<TraceFile>& file) {
  RecordCursor cursor = file->Records();
  std::vector<RecordView> records = ReadAll(file, &cursor);
  REQUIRE(cursor.status().ok());
  CHECK_FALSE(cursor.torn_tail());
  return records;
}

// Writes SimpleRecords for `gsteps` (in that order) to `path`, with a Meta
// covering them unless with_meta is false; returns the file's bytes.
inline std::string WriteSteps(const std::string& path, const std::vector<int64_t>& gsteps,
                              bool with_meta = true) {
  std::string data = HeaderFrame({"w", "loss"});
  for (int64_t g : gsteps) data += test::Frame(SimpleRecord(g).SerializeAsString());
  test::WriteFile(path, data);
  if (with_meta) {
    const auto [lo, hi] = std::minmax_element(gsteps.begin(), gsteps.end());
    test::WriteFile(path + ".meta", MetaFor(data, static_cast<int64_t>(gsteps.size()),
                                            gsteps.empty() ? 0 : *lo, gsteps.empty() ? 0 : *hi)
                                        .SerializeAsString());
  }
  return data;
}

inline TraceReader MustOpenTrace(const std::string& path) {
  auto reader = TraceReader::Open(path);
  INFO(reader.status().ToString());
  REQUIRE(reader.ok());
  return *std::move(reader);
}

// What a cursor yields, flattened: records as (gstep, rank), torn tails, the end.
struct Drained {
  std::vector<std::pair<int64_t, int32_t>> records;
  std::vector<float> losses;  // Column "loss" of each record, when selected.
  std::vector<TornTail> torn_tails;
  absl::Status status;
};

inline Drained Drain(TraceCursor cursor) {
  Drained out;
  while (true) {
    absl::StatusOr<TraceCursor::Event> event = cursor.Next();
    if (!event.ok()) {
      out.status = event.status();
      return out;
    }
    if (*event == TraceCursor::Event::kEnd) return out;
    if (*event == TraceCursor::Event::kTornTail) {
      out.torn_tails.push_back(cursor.torn_tail());
      continue;
    }
    const TraceRecord& r = cursor.record();
    out.records.emplace_back(r.view.gstep, r.rank);
    const auto& keys = *r.keys;
    const auto loss = std::find(keys.begin(), keys.end(), "loss");
    if (loss != keys.end()) {
      float value;
      std::memcpy(&value, r.view.columns[loss - keys.begin()].data.data(), sizeof(value));
      out.losses.push_back(value);
    }
  }
}

}  // namespace xdl_trace

#endif  // XDL_TRACE_TESTS_CPP_READER_READER_TEST_UTIL_H_
