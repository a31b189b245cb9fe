// Proves EncodeRecord writes exactly the bytes protobuf's own serializer writes.
#include "record/record_encoder.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/wire.h"
#include "io/data_file_segment.h"
#include "test_util.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using test::Frame;
using test::ProtobufFrame;
using test::Sealed;
using test::SealedProtobufFrame;

std::string Encode(int64_t gstep, int64_t lstep, int64_t timestamp,
                   const std::vector<TensorView>& columns, absl::string_view trailing = {}) {
  absl::StatusOr<EncodedRecord> record =
      EncodeRecord(gstep, lstep, timestamp, columns, {}, trailing);
  REQUIRE(record.ok());
  CHECK(record->gstep == gstep);
  CHECK(record->lstep == lstep);
  CHECK(record->timestamp_ms == timestamp);
  CHECK(record->crc_at_write);  // The IO thread's to fill in: as it will.
  SealFrame(&*record);
  return record->frame;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

const Shape kShapes[] = {{}, {1}, {7}, {3, 5}, {2, 3, 4}, {0}, {4, 0}, {1, 1, 1, 1, 2}};

}  // namespace

TEST_CASE("every dtype and shape encodes as protobuf does", "[encoder]") {
  uint32_t seed = 1;
  for (int32_t d = 0; d < kNumDTypes; ++d) {
    const DType dtype = static_cast<DType>(d);
    for (const Shape& shape : kShapes) {
      TensorView view{dtype, shape, nullptr};
      const std::string bytes = RandomBytes(view.NumBytes(), seed++);
      view.data = bytes.empty() ? nullptr : bytes.data();
      INFO("dtype " << DTypeName(dtype) << " rank " << shape.size());
      CHECK(Encode(12, 3, 1700000000123, {view}) ==
            SealedProtobufFrame(12, 3, 1700000000123, {view}));
    }
  }
}

TEST_CASE("zero, negative and extreme steps encode as protobuf does", "[encoder]") {
  const float value = 1.5f;
  const TensorView scalar{DType::kFloat32, {}, &value};
  const int8_t small = -3;
  const TensorView int8_scalar{DType::kInt8, {}, &small};  // dtype 0 is omitted.
  const int64_t min = std::numeric_limits<int64_t>::min();
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t steps[][3] = {{0, 0, 0},      {-1, -2, -3},  {min, max, 0},
                              {max, min, -1}, {1, 127, 128}, {16383, 16384, 1LL << 35}};
  for (const auto& s : steps) {
    INFO("gstep " << s[0] << " lstep " << s[1] << " timestamp " << s[2]);
    CHECK(Encode(s[0], s[1], s[2], {scalar, int8_scalar}) ==
          SealedProtobufFrame(s[0], s[1], s[2], {scalar, int8_scalar}));
  }
}

TEST_CASE("records without columns, and empty columns, encode as protobuf does", "[encoder]") {
  CHECK(Encode(0, 0, 0, {}) == SealedProtobufFrame(0, 0, 0, {}));
  CHECK(Encode(0, 0, 0, {}).size() == 10);  // The length prefix and the checksum field.
  const TensorView empty_f32{DType::kFloat32, {0}, nullptr};
  const TensorView wide_empty{DType::kInt16, {std::numeric_limits<int32_t>::max(), 0}, nullptr};
  // An int8 column with no data serializes as an empty Column message.
  const TensorView none{DType::kInt8, {0}, nullptr};
  CHECK(Encode(5, 5, 5, {empty_f32, wide_empty, none}) ==
        SealedProtobufFrame(5, 5, 5, {empty_f32, wide_empty, none}));
}

TEST_CASE("many columns and multi-byte lengths encode as protobuf does", "[encoder]") {
  std::vector<std::string> storage;
  std::vector<TensorView> columns;
  for (int i = 0; i < 40; ++i) {
    const Shape shape = {i + 1, (i * 37) % 300 + 1};
    const DType dtype = static_cast<DType>(i % kNumDTypes);
    TensorView view{dtype, shape, nullptr};
    storage.push_back(RandomBytes(view.NumBytes(), 100 + i));
  }
  for (int i = 0; i < 40; ++i) {
    const Shape shape = {i + 1, (i * 37) % 300 + 1};
    columns.push_back(TensorView{static_cast<DType>(i % kNumDTypes), shape, storage[i].data()});
  }
  CHECK(Encode(77, 7, 1234567, columns) == SealedProtobufFrame(77, 7, 1234567, columns));
}

TEST_CASE("trailing fields follow field 4 and round-trip through protobuf", "[encoder]") {
  const double value = 2.25;
  const TensorView scalar{DType::kFloat64, {}, &value};
  // Field 15 varint 300, field 14 bytes "hello": unknown to the Record message.
  const std::string trailing = std::string("\x78\xAC\x02", 3) + std::string("\x72\x05hello", 7);
  const std::string with = Encode(9, 8, 7, {scalar}, trailing);
  const std::string without = ProtobufFrame(9, 8, 7, {scalar});
  REQUIRE(with.size() == without.size() + trailing.size() + kRecordCrcBytes);
  CHECK(with == Sealed(without + trailing));
  xdl::proto::Record parsed;
  REQUIRE(parsed.ParseFromString(with.substr(4)));
  CHECK(parsed.gstep() == 9);
  CHECK(parsed.timestamp() == 7);
  // The checksum is a known field: the CRC-32C of the bytes before it, the unknown fields
  // included (protobuf would re-serialize it before them: a rewritten file is not ours).
  CHECK(parsed.crc32c() == crc32c::Value(with.data() + 4, with.size() - 10));
  std::string reserialized;
  REQUIRE(parsed.SerializeToString(&reserialized));
  CHECK(reserialized.size() == with.size() - 4);  // Unknown fields kept.
}

TEST_CASE("records over the 4 GiB frame limit are rejected naming the key", "[encoder]") {
  const char dummy = 0;  // Never read: sizes are checked before any copy.
  const std::vector<std::string> keys = {"small", "huge", "more"};
  const TensorView small{DType::kFloat32, {}, &dummy};
  SECTION("one column over the limit") {
    const TensorView huge{DType::kFloat32, {65536, 65536}, &dummy};  // 16 GiB.
    absl::StatusOr<EncodedRecord> record = EncodeRecord(1, 1, 1, {small, huge}, keys);
    REQUIRE(record.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(record.status().message()), Catch::Contains("'huge'"));
    CHECK_THAT(std::string(record.status().message()), Catch::Contains("4 GiB"));
  }
  SECTION("a shape whose element count overflows int64") {
    const TensorView huge{DType::kFloat64, {1 << 30, 1 << 30, 1 << 30, 1 << 30}, &dummy};
    absl::StatusOr<EncodedRecord> record = EncodeRecord(1, 1, 1, {small, huge}, keys);
    REQUIRE(record.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(record.status().message()), Catch::Contains("'huge'"));
  }
  SECTION("columns under the limit that add up over it") {
    const TensorView three_gib{DType::kFloat32, {3, 1 << 28}, &dummy};
    absl::StatusOr<EncodedRecord> record =
        EncodeRecord(1, 1, 1, {small, three_gib, three_gib}, keys);
    REQUIRE(record.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(record.status().message()), Catch::Contains("'more'"));
  }
  SECTION("a dimension that does not fit int32, or is negative") {
    const TensorView wide{DType::kInt8, {int64_t{1} << 31}, &dummy};
    absl::StatusOr<EncodedRecord> record = EncodeRecord(1, 1, 1, {small, wide}, keys);
    REQUIRE(record.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(record.status().message()), Catch::Contains("'huge'"));
    const TensorView negative{DType::kInt8, {-1}, &dummy};
    record = EncodeRecord(1, 1, 1, {negative});
    REQUIRE(record.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(record.status().message()), Catch::Contains("column 0"));
  }
  SECTION("null data and invalid dtype") {
    const TensorView null_data{DType::kInt32, {2}, nullptr};
    CHECK_THAT(std::string(EncodeRecord(1, 1, 1, {null_data}, keys).status().message()),
               Catch::Contains("'small'"));
    const TensorView bad{static_cast<DType>(99), {}, &dummy};
    CHECK(EncodeRecord(1, 1, 1, {bad}, keys).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("the frame is sized exactly", "[encoder]") {
  std::vector<float> values(1000, 0.5f);
  const TensorView view{DType::kFloat32, {10, 100}, values.data()};
  absl::StatusOr<EncodedRecord> record = EncodeRecord(1, 2, 3, {view});
  REQUIRE(record.ok());
  uint32_t length = 0;
  std::memcpy(&length, record->frame.data(), 4);  // Little-endian host.
  CHECK(length + 4 == record->frame.size());
  CHECK(record->frame.capacity() - record->frame.size() < 64);
}

}  // namespace internal
}  // namespace xdl_trace

namespace xdl_trace {
namespace internal {
namespace {

// The frame a record in pieces stands for: its pieces concatenated.
std::string Concatenate(const EncodedRecord& record) {
  if (record.pieces.empty()) return record.frame;
  std::string out;
  for (const FramePiece& piece : record.pieces) {
    out.append(piece.external != nullptr ? piece.external : record.frame.data() + piece.offset,
               piece.size);
  }
  return out;
}

}  // namespace

TEST_CASE("a record in pieces is the contiguous frame, its large columns left in place",
          "[encoder][pieces]") {
  // Columns around the threshold (4096 bytes), plus empty and tiny ones.
  const size_t kSizes[] = {0, 4, 4092, 4096, 4100, 20000, 1 << 20};
  std::vector<std::string> data;
  std::vector<TensorView> columns;
  uint32_t seed = 7;
  for (size_t bytes : kSizes) {
    data.push_back(RandomBytes(bytes, seed++));
  }
  for (const std::string& bytes : data) {
    columns.push_back({DType::kUInt8,
                       {static_cast<int64_t>(bytes.size())},
                       bytes.empty() ? nullptr : bytes.data()});
  }
  const std::string trailing = ProtobufFrame(1, 2, 3, {}).substr(4);  // Any bytes.
  for (const bool with_trailing : {false, true}) {
    for (const int64_t timestamp : {int64_t{0}, int64_t{1700000000123}}) {
      absl::StatusOr<EncodedRecord> contiguous =
          EncodeRecord(5, 6, timestamp, columns, {}, with_trailing ? trailing : "");
      REQUIRE(contiguous.ok());
      SealFrame(&*contiguous);
      CHECK(contiguous->pieces.empty());
      CHECK(contiguous->external_bytes == 0);
      for (const size_t threshold : {size_t{1}, size_t{4096}, size_t{20000}, SIZE_MAX}) {
        INFO("threshold " << threshold << " trailing " << with_trailing << " ts " << timestamp);
        EncodeOptions options;
        options.reference_min_bytes = threshold;
        absl::StatusOr<EncodedRecord> pieces = EncodeRecord(
            5, 6, timestamp, columns, {}, with_trailing ? trailing : "",
            [](size_t) { return std::string(); }, options);
        REQUIRE(pieces.ok());
        // The checksum's value is the writer's to fill in (SealFrame).
        CHECK(pieces->crc_at_write);
        SealFrame(&*pieces);
        CHECK(Concatenate(*pieces) == contiguous->frame);
        CHECK(pieces->FrameBytes() == contiguous->frame.size());
        // Exactly the columns at or above the threshold are referenced, in place.
        std::vector<const char*> referenced;
        size_t referenced_bytes = 0;
        for (const FramePiece& piece : pieces->pieces) {
          CHECK(piece.size > 0);
          if (piece.external != nullptr) {
            referenced.push_back(piece.external);
            referenced_bytes += piece.size;
          }
        }
        std::vector<const char*> expected;
        for (const std::string& bytes : data) {
          if (!bytes.empty() && bytes.size() >= threshold) expected.push_back(bytes.data());
        }
        CHECK(referenced == expected);
        CHECK(pieces->external_bytes == referenced_bytes);
        CHECK(pieces->frame.size() + referenced_bytes == contiguous->frame.size());
        if (!pieces->pieces.empty()) {
          CHECK(pieces->pieces.front().external == nullptr);  // The length prefix is owned.
          CHECK(pieces->pieces.front().offset == 0);
        }
      }
    }
  }
}

TEST_CASE("moved fields: the bytes of the same fields copied, without a copy", "[record]") {
  const std::vector<float> values = {1, 2, 3};
  const std::vector<TensorView> columns = {TensorView{DType::kFloat32, {3}, values.data()}};
  const std::vector<std::string> keys = {"w"};
  std::vector<std::string> payloads = {std::string(100000, 'a'), "", std::string(70, 'b')};
  std::string copied_fields;
  for (const std::string& p : payloads) AppendLengthDelimitedField(5, p, &copied_fields);
  const std::string spans = "\x32\x02\x08\x01";  // One field 6.
  absl::StatusOr<EncodedRecord> copied =
      EncodeRecord(7, 8, 9, columns, keys, copied_fields + spans);
  REQUIRE(copied.ok());
  std::vector<const char*> data;
  for (const std::string& p : payloads) data.push_back(p.data());
  EncodeOptions options;
  options.moved_fields = &payloads;
  options.moved_field_number = 5;
  absl::StatusOr<EncodedRecord> moved = EncodeRecord(
      7, 8, 9, columns, keys, spans, [](size_t) { return std::string(); }, options);
  REQUIRE(moved.ok());
  CHECK(payloads.empty());
  REQUIRE(moved->owned.size() == 3);
  // Moving the record keeps the pieces valid: they point into `owned`.
  EncodedRecord record = std::move(*moved);
  std::string joined;
  size_t external = 0;
  for (const FramePiece& piece : record.pieces) {
    const char* base =
        piece.external != nullptr ? piece.external : record.frame.data() + piece.offset;
    if (piece.external != nullptr) external += piece.size;
    joined.append(base, piece.size);
  }
  CHECK(external == 100070);
  CHECK(record.external_bytes == external);
  CHECK(record.pieces[1].external == record.owned[0].data());
  CHECK(joined == copied->frame);
  CHECK(record.FrameBytes() == copied->frame.size());
}

TEST_CASE("moved fields in a record without columns: the device-only record at close", "[record]") {
  std::vector<std::string> payloads = {std::string(300000, 'c'), std::string(5, 'd')};
  std::string copied_fields;
  for (const std::string& p : payloads) AppendLengthDelimitedField(5, p, &copied_fields);
  const std::string spans = "\x32\x02\x08\x01";
  absl::StatusOr<EncodedRecord> copied = EncodeRecord(3, 4, 5, {}, {}, copied_fields + spans);
  REQUIRE(copied.ok());
  EncodeOptions options;
  options.moved_fields = &payloads;
  options.moved_field_number = 5;
  absl::StatusOr<EncodedRecord> moved = EncodeRecord(
      3, 4, 5, {}, {}, spans, [](size_t) { return std::string(); }, options);
  REQUIRE(moved.ok());
  std::string joined;
  for (const FramePiece& piece : moved->pieces) {
    joined.append(piece.external != nullptr ? piece.external : moved->frame.data() + piece.offset,
                  piece.size);
  }
  CHECK(joined == copied->frame);
  CHECK(moved->frame.size() < 1000);  // The payloads were not copied into the frame.
}

}  // namespace internal
}  // namespace xdl_trace
