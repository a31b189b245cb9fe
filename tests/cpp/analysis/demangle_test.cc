// Tests of the read-time demangler and the device event table (cpp/src/analysis).
#include "analysis/demangle.h"

#include <catch2/catch.hpp>
#include <string>

#include "analysis/device_event_table.h"
#include "device_trace.pb.h"

namespace xdl_trace {
namespace internal {
namespace {

TEST_CASE("Demangle turns Itanium names into what Kineto and Nsight show", "[analysis]") {
  CHECK(Demangle("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPc"
                 "Lm1EEEEvi") ==
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int)");
  CHECK(Demangle("_Z3addPfS_i") == "add(float*, float*, int)");
  // The second call is answered from the cache, with the same result.
  CHECK(Demangle("_Z3addPfS_i") == "add(float*, float*, int)");
}

TEST_CASE("Demangle passes other names through unchanged", "[analysis]") {
  CHECK(Demangle("cudaLaunchKernel_v7000") == "cudaLaunchKernel_v7000");
  CHECK(Demangle("void add<float>(float*, int)") == "void add<float>(float*, int)");
  CHECK(Demangle("_Zbad") == "_Zbad");
  CHECK(Demangle("") == "");
}

TEST_CASE("DeviceEventTable interns names across payloads", "[analysis]") {
  xdl::proto::DeviceTrace trace;
  trace.add_name("");
  trace.add_name("k");
  auto* line = trace.add_device()->add_line();
  line->set_id(7);
  auto* event = line->add_event();
  event->set_name_index(1);
  event->set_kind(xdl::proto::DEVICE_EVENT_KERNEL);
  event->set_start_ns(10);
  event->set_end_ns(5);  // Reversed: clamped to the start.
  event->set_correlation_id(3);
  DeviceEventTable table;
  REQUIRE(table.Append(trace.SerializeAsString(), 2).ok());
  REQUIRE(table.Append(trace.SerializeAsString(), 3).ok());
  CHECK(!table.Append("\xff\xff", 0).ok());
  REQUIRE(table.size() == 2);
  CHECK(table.names().size() == 2);
  CHECK(table.name()[0] == table.name()[1]);
  CHECK(table.names()[table.name()[0]] == "k");
  CHECK(table.end_ns()[0] == 10);
  CHECK(table.rank()[1] == 3);
  CHECK(table.line()[0] == 7);
}

}  // namespace
}  // namespace internal
}  // namespace xdl_trace
