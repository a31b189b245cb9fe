// RepairUtf8Strings and DeviceEventTable against names that are not UTF-8 (issue 24 #5): a plugin
// may send any bytes as a kernel name, and protobuf refuses a proto3 string that is not UTF-8.
#include "analysis/utf8_repair.h"

#include <catch2/catch.hpp>
#include <string>

#include "analysis/device_event_table.h"
#include "device_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

// A trace with a kernel named `kernel` on device 0's stream 7 (names: "", kernel, "bytes").
std::string TraceWith(const std::string& kernel, const std::string& device_name = "GPU 0") {
  xdl::proto::DeviceTrace trace;
  trace.set_tracer("fake");
  trace.add_name("");
  trace.add_name("x");  // Set below, bypassing the setter's checks (none in release builds).
  trace.add_name("bytes");
  *trace.mutable_name(1) = kernel;
  xdl::proto::Device* device = trace.add_device();
  device->set_name(device_name);
  xdl::proto::DeviceLine* line = device->add_line();
  line->set_id(7);
  xdl::proto::DeviceEvent* event = line->add_event();
  event->set_name_index(1);
  event->set_kind(xdl::proto::DEVICE_EVENT_KERNEL);
  event->set_start_ns(100);
  event->set_end_ns(250);
  xdl::proto::DeviceStat* stat = event->add_stat();
  stat->set_name_index(2);
  stat->set_str_value("4096");  // A string where a number is expected: parses, read as is.
  std::string out;
  REQUIRE(trace.SerializePartialToString(&out));
  return out;
}

TEST_CASE("UTF-8 validation rejects what protobuf rejects", "[utf8]") {
  CHECK(IsValidUtf8(""));
  CHECK(IsValidUtf8("plain"));
  CHECK(IsValidUtf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));  // é € 😀
  CHECK_FALSE(IsValidUtf8("\xFF"));
  CHECK_FALSE(IsValidUtf8("\xC0\xAF"));          // Overlong "/".
  CHECK_FALSE(IsValidUtf8("\xED\xA0\x80"));      // A surrogate.
  CHECK_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // Past U+10FFFF.
  CHECK_FALSE(IsValidUtf8("\xE2\x82"));          // Cut short.
  CHECK(ReplaceInvalidUtf8("a\xFF\xFE"
                           "b") ==
        "a\xEF\xBF\xBD\xEF\xBF\xBD"
        "b");
  CHECK(ReplaceInvalidUtf8("\xC3\xA9") == "\xC3\xA9");
}

TEST_CASE("a trace whose strings are UTF-8 is left alone", "[utf8]") {
  const std::string payload = TraceWith("kernel");
  std::string repaired = "untouched";
  CHECK(RepairUtf8Strings(*xdl::proto::DeviceTrace::descriptor(), payload, &repaired) == 0);
  CHECK(repaired == "untouched");
}

TEST_CASE("names that are not UTF-8 are replaced, nested ones too, the rest kept", "[utf8]") {
  const std::string payload = TraceWith("fake_\xFF\xFE_kernel", "GPU \xC0");
  xdl::proto::DeviceTrace refused;
  CHECK_FALSE(refused.ParseFromString(payload));  // What the readers met before.
  std::string repaired;
  CHECK(RepairUtf8Strings(*xdl::proto::DeviceTrace::descriptor(), payload, &repaired) == 2);
  xdl::proto::DeviceTrace trace;
  REQUIRE(trace.ParseFromString(repaired));
  CHECK(trace.name(1) == "fake_\xEF\xBF\xBD\xEF\xBF\xBD_kernel");
  CHECK(trace.device(0).name() == "GPU \xEF\xBF\xBD");
  const xdl::proto::DeviceEvent& event = trace.device(0).line(0).event(0);
  CHECK(event.start_ns() == 100);
  CHECK(event.end_ns() == 250);
  CHECK(event.stat(0).str_value() == "4096");
  CHECK(trace.tracer() == "fake");
}

TEST_CASE("the report's event table reads such a trace and counts the names", "[utf8]") {
  DeviceEventTable table;
  REQUIRE(table.Append(TraceWith("fake_\xFF_kernel"), 0).ok());
  REQUIRE(table.size() == 1);
  CHECK(table.names()[static_cast<size_t>(table.name()[0])] == "fake_\xEF\xBF\xBD_kernel");
  CHECK(table.replaced_strings() == 1);
  CHECK_FALSE(table.Append("\xFF\xFF\xFF", 0).ok());  // Bytes that are no message: refused.
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
