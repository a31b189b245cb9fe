// Checks core/wire.h and core/wire_reader.h against protobuf's own coder, and
// core/device_trace_fields.h against the .proto.
#include "core/wire.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/device_trace_fields.h"
#include "core/wire_reader.h"
#include "device_trace.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

using google::protobuf::internal::WireFormatLite;
namespace fields = device_trace_fields;

// The hand-kept field numbers of the CUPTI plugin equal the generated ones, so
// a renumbered .proto field fails this build instead of corrupting traces.
static_assert(fields::kTraceTracer == xdl::proto::DeviceTrace::kTracerFieldNumber);
static_assert(fields::kTraceName == xdl::proto::DeviceTrace::kNameFieldNumber);
static_assert(fields::kTraceDevice == xdl::proto::DeviceTrace::kDeviceFieldNumber);
static_assert(fields::kTraceDroppedEvents == xdl::proto::DeviceTrace::kDroppedEventsFieldNumber);
static_assert(fields::kTraceStatus == xdl::proto::DeviceTrace::kStatusFieldNumber);
static_assert(fields::kTraceDroppedBuffers == xdl::proto::DeviceTrace::kDroppedBuffersFieldNumber);
static_assert(fields::kDeviceId == xdl::proto::Device::kIdFieldNumber);
static_assert(fields::kDeviceName == xdl::proto::Device::kNameFieldNumber);
static_assert(fields::kDeviceLine == xdl::proto::Device::kLineFieldNumber);
static_assert(fields::kDeviceStat == xdl::proto::Device::kStatFieldNumber);
static_assert(fields::kLineId == xdl::proto::DeviceLine::kIdFieldNumber);
static_assert(fields::kLineName == xdl::proto::DeviceLine::kNameFieldNumber);
static_assert(fields::kLineEvent == xdl::proto::DeviceLine::kEventFieldNumber);
static_assert(fields::kEventNameIndex == xdl::proto::DeviceEvent::kNameIndexFieldNumber);
static_assert(fields::kEventKind == xdl::proto::DeviceEvent::kKindFieldNumber);
static_assert(fields::kEventStartNs == xdl::proto::DeviceEvent::kStartNsFieldNumber);
static_assert(fields::kEventEndNs == xdl::proto::DeviceEvent::kEndNsFieldNumber);
static_assert(fields::kEventCorrelationId == xdl::proto::DeviceEvent::kCorrelationIdFieldNumber);
static_assert(fields::kEventExternalId == xdl::proto::DeviceEvent::kExternalIdFieldNumber);
static_assert(fields::kEventStat == xdl::proto::DeviceEvent::kStatFieldNumber);
static_assert(fields::kStatNameIndex == xdl::proto::DeviceStat::kNameIndexFieldNumber);
static_assert(fields::kStatInt64Value == xdl::proto::DeviceStat::kInt64ValueFieldNumber);
static_assert(fields::kStatUint64Value == xdl::proto::DeviceStat::kUint64ValueFieldNumber);
static_assert(fields::kStatDoubleValue == xdl::proto::DeviceStat::kDoubleValueFieldNumber);
static_assert(fields::kStatStrValue == xdl::proto::DeviceStat::kStrValueFieldNumber);
using Span = xdl::proto::HostSpan;
static_assert(fields::kSpanKind == Span::kKindFieldNumber);
static_assert(fields::kSpanStartNs == Span::kStartNsFieldNumber);
static_assert(fields::kSpanEndNs == Span::kEndNsFieldNumber);
static_assert(fields::kSpanGstep == Span::kGstepFieldNumber);
static_assert(fields::kSpanLstep == Span::kLstepFieldNumber);
static_assert(fields::kSpanCorrelationId == Span::kCorrelationIdFieldNumber);
static_assert(fields::kSpanThreadId == Span::kThreadIdFieldNumber);
static_assert(fields::kSpanSpansDropped == Span::kSpansDroppedFieldNumber);
static_assert(fields::kSpanRecords == Span::kRecordsFieldNumber);
static_assert(fields::kRecordHostSpan == xdl::proto::Record::kHostSpanFieldNumber);
// RANGE (7) and its name/category fields (10, 11) are written by the core alone
// (record/host_spans.cc, from the generated constants), never by a plugin: the
// plugins' table leaves them out.
static_assert(Span::Kind_MAX == Span::RANGE,
              "a new HostSpan.Kind: add it to core/device_trace_fields.h");

constexpr int Kind(DeviceEventKind kind) { return static_cast<int>(kind); }
#define CHECK_KIND(name, proto_name, value)                                            \
  static_assert(Kind(DeviceEventKind::name) == xdl::proto::DEVICE_EVENT_##proto_name); \
  static_assert(value == xdl::proto::DEVICE_EVENT_##proto_name);
XDL_DEVICE_EVENT_KINDS(CHECK_KIND)
#undef CHECK_KIND
#define KIND_VALUE(name, proto_name, value) value,
static_assert(std::max({XDL_DEVICE_EVENT_KINDS(KIND_VALUE)}) == xdl::proto::DeviceEventKind_MAX,
              "a new DeviceEventKind: add its row to core/device_trace_fields.h");
#undef KIND_VALUE

static_assert(Tag(3, kWireLengthDelimited) == 0x1A);
static_assert(Tag(4, kWireVarint) == 0x20);

const std::vector<uint64_t>& Values() {
  static const std::vector<uint64_t> values = {0,
                                               1,
                                               127,
                                               128,
                                               300,
                                               16383,
                                               16384,
                                               (1ull << 35) + 7,
                                               std::numeric_limits<uint32_t>::max(),
                                               std::numeric_limits<uint64_t>::max(),
                                               SignExtend(-1),
                                               SignExtend(std::numeric_limits<int64_t>::min())};
  return values;
}

// What protobuf's CodedOutputStream writes for `write`.
template <typename Fn>
std::string Protobuf(Fn write) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    write(&coded);
  }
  return out;
}

TEST_CASE("varints, tags and fixed values match protobuf's coder", "[wire]") {
  for (uint64_t v : Values()) {
    INFO(v);
    std::string ours;
    AppendVarint(v, &ours);
    CHECK(ours == Protobuf([&](auto* coded) { coded->WriteVarint64(v); }));
    CHECK(VarintSize(v) == ours.size());
    CHECK(VarintSize(v) == google::protobuf::io::CodedOutputStream::VarintSize64(v));

    ours.clear();
    AppendFixed32(static_cast<uint32_t>(v), &ours);
    CHECK(ours ==
          Protobuf([&](auto* coded) { coded->WriteLittleEndian32(static_cast<uint32_t>(v)); }));
    CHECK(ReadFixed32(ours.data()) == static_cast<uint32_t>(v));
    ours.clear();
    AppendFixed64(v, &ours);
    CHECK(ours == Protobuf([&](auto* coded) { coded->WriteLittleEndian64(v); }));
    CHECK(ReadFixed64(ours.data()) == v);
  }
  for (uint32_t field : {1u, 15u, 16u, 2047u, 2048u, kMaxFieldNumber}) {
    INFO(field);
    for (WireType type : {kWireVarint, kWireFixed64, kWireLengthDelimited, kWireFixed32}) {
      CHECK(Tag(field, type) ==
            WireFormatLite::MakeTag(static_cast<int>(field), static_cast<WireFormatLite::WireType>(
                                                                 static_cast<uint32_t>(type))));
    }
    CHECK(TagSize(field) == static_cast<size_t>(WireFormatLite::TagSize(
                                static_cast<int>(field), WireFormatLite::TYPE_INT64)));
  }
}

TEST_CASE("field helpers write what protobuf writes", "[wire]") {
  for (uint64_t v : Values()) {
    INFO(v);
    std::string ours;
    AppendVarintField(9, v, &ours);
    CHECK(ours.size() == VarintFieldSize(9, v));
    const std::string expected =
        v == 0 ? std::string()  // proto3 leaves a zero scalar out.
               : Protobuf([&](auto* coded) { WireFormatLite::WriteUInt64(9, v, coded); });
    CHECK(ours == expected);
  }
  for (const std::string payload : {std::string(), std::string("x"), std::string(200, 'p')}) {
    std::string ours;
    AppendLengthDelimitedField(300, payload, &ours);
    CHECK(ours.size() == LengthDelimitedFieldSize(300, payload.size()));
    CHECK(ours == Protobuf([&](auto* coded) { WireFormatLite::WriteBytes(300, payload, coded); }));
  }
}

TEST_CASE("ReadVarint decodes what AppendVarint wrote and refuses bad input", "[wire]") {
  for (uint64_t v : Values()) {
    std::string bytes;
    AppendVarint(v, &bytes);
    bytes += "tail";
    const char* p = bytes.data();
    uint64_t decoded = 0;
    REQUIRE(ReadVarint(&p, bytes.data() + bytes.size(), &decoded));
    CHECK(decoded == v);
    CHECK(p == bytes.data() + VarintSize(v));
  }
  const std::string cut = "\x80\x80";  // Continuation bit on the last byte.
  const char* p = cut.data();
  uint64_t value = 7;
  CHECK_FALSE(ReadVarint(&p, cut.data() + cut.size(), &value));
  CHECK(p == cut.data());  // Not advanced on failure.
  const std::string eleven(11, '\x80');
  p = eleven.data();
  CHECK_FALSE(ReadVarint(&p, eleven.data() + eleven.size(), &value));
}

TEST_CASE("WireReader agrees with protobuf's serialization and places errors", "[wire]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    xdl::proto::Record record;
    record.set_gstep(static_cast<int64_t>(rng()));  // Negative values too.
    record.set_lstep(static_cast<int64_t>(rng() % 1000));
    record.set_timestamp(static_cast<int64_t>(rng() >> (rng() % 64)));
    const std::string body = record.SerializeAsString();
    WireReader reader(body);
    WireField field;
    int64_t values[5] = {0, 0, 0, 0, 0};
    while (reader.Next(&field)) {
      REQUIRE(field.wire_type == kWireVarint);
      values[field.number] = static_cast<int64_t>(field.varint);
    }
    REQUIRE(reader.error() == nullptr);
    CHECK(values[1] == record.gstep());
    CHECK(values[2] == record.lstep());
    CHECK(values[4] == record.timestamp());
  }
  // Cut-short varints and overrunning lengths are errors at the right offset.
  const std::string bad_varint("\x08\xff\xff", 3);
  WireReader r1(bad_varint);
  WireField field;
  CHECK_FALSE(r1.Next(&field));
  CHECK(std::string(r1.error()) == "bad varint");
  CHECK(r1.error_offset() == 1);
  const std::string overrun("\x08\x01\x1a\x05\x01", 5);
  WireReader r2(overrun);
  CHECK(r2.Next(&field));
  CHECK_FALSE(r2.Next(&field));
  CHECK(r2.error_offset() == 2);
  const std::string group("\x0b", 1);  // Field 1, wire type 3 (start group).
  WireReader r3(group);
  CHECK_FALSE(r3.Next(&field));
  CHECK(std::string(r3.error()) == "unsupported wire type");
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
