// Registry one-call registration (TraceVariable & co.) and the missing-gradient payload a binding
// rewords.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "xdl_trace/registry.h"
#include "xdl_trace/tracer.h"
#include "xdl_trace/version.h"

namespace xdl_trace {
namespace {

EntrySpec Only(const std::vector<EntrySpec>& entries) {
  REQUIRE(entries.size() == 1);
  return entries[0];
}

TEST_CASE("TraceVariable registers stable memory in one call, dtype from the element type",
          "[registry]") {
  Registry registry;
  std::vector<float> w(6, 1.0f);
  REQUIRE(registry.TraceVariable("w", w.data(), {2, 3}).ok());
  const EntrySpec entry = Only(registry.Snapshot({""}));
  CHECK(entry.key == "w");
  CHECK(entry.kind == EntryKind::kVariable);
  CHECK(entry.has_view);
  CHECK(entry.view.dtype == DType::kFloat32);
  CHECK(entry.view.shape == Shape{2, 3});
  CHECK(entry.view.data == w.data());
  CHECK(entry.summary.empty());
}

TEST_CASE("TraceTensor TraceOnce TraceGradient TraceCallback take a scope and a summary",
          "[registry]") {
  Registry registry;
  std::vector<int64_t> ids = {1, 2, 3};
  const double lr = 0.5;
  REQUIRE(registry.TraceTensor("ids", ids.data(), {3}, {"data", {BuiltinSummary::kStats}}).ok());
  REQUIRE(registry.TraceOnce("lr", &lr, {}).ok());
  REQUIRE(registry.TraceGradient("grad/w", "w", {"model"}).ok());
  REQUIRE(registry
              .TraceCallback("loss",
                             [] {
                               Tensor t;
                               t.bytes.assign(4, '\0');
                               return absl::StatusOr<CapturedTensor>(
                                   CapturedTensor::Owning(std::move(t)));
                             })
              .ok());

  const EntrySpec ids_entry = Only(registry.Snapshot({"data"}));
  CHECK(ids_entry.FullKey() == "data/ids");
  CHECK(ids_entry.kind == EntryKind::kTensor);
  CHECK(ids_entry.view.dtype == DType::kInt64);
  CHECK(ids_entry.summary.builtin == BuiltinSummary::kStats);
  const EntrySpec grad = Only(registry.Snapshot({"model"}));
  CHECK(grad.kind == EntryKind::kGradient);
  CHECK(grad.gradient_name == "w");
  const std::vector<EntrySpec> defaults = registry.Snapshot({""});
  REQUIRE(defaults.size() == 2);
  CHECK(defaults[0].kind == EntryKind::kOnce);
  CHECK(defaults[0].view.dtype == DType::kFloat64);
  CHECK(defaults[0].view.shape.empty());
  CHECK(defaults[1].kind == EntryKind::kCallback);
  CHECK(static_cast<bool>(defaults[1].provider));
}

TEST_CASE("one-call registrations are validated as Register is", "[registry]") {
  Registry registry;
  float w[4] = {};
  REQUIRE(registry.TraceVariable("w", w, {4}).ok());
  const absl::Status twice = registry.TraceTensor("w", w, {4});
  CHECK(twice.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(twice.message(), "'w'"));
  const absl::Status null_data = registry.TraceTensor<float>("v", nullptr, {4});
  CHECK(null_data.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(null_data.message(), "null data"));
  CHECK(registry.Snapshot({""}).size() == 1);
}

TEST_CASE("DTypeOf maps C++ element types onto wire dtypes", "[registry]") {
  STATIC_REQUIRE(DTypeOf<float>() == DType::kFloat32);
  STATIC_REQUIRE(DTypeOf<const double>() == DType::kFloat64);
  STATIC_REQUIRE(DTypeOf<bool>() == DType::kBool);
  STATIC_REQUIRE(DTypeOf<int8_t>() == DType::kInt8);
  STATIC_REQUIRE(DTypeOf<int32_t>() == DType::kInt32);
  STATIC_REQUIRE(DTypeOf<uint8_t>() == DType::kUInt8);
  STATIC_REQUIRE(DTypeOf<int16_t>() == DType::kInt16);
  STATIC_REQUIRE(DTypeOf<int64_t>() == DType::kInt64);
  STATIC_REQUIRE(DTypeOf<long long>() == DType::kInt64);
  STATIC_REQUIRE(DTypeOf<uint16_t>() == DType::kUInt16);
  STATIC_REQUIRE(DTypeOf<uint32_t>() == DType::kUInt32);
  STATIC_REQUIRE(DTypeOf<uint64_t>() == DType::kUInt64);
}

TEST_CASE("a missing gradient names no API and carries the gradient name as a payload",
          "[registry][tracer]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("xdl_one_call_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto registry = std::make_shared<Registry>();
  REQUIRE(registry->TraceGradient("gradient/w", "w").ok());
  TraceConfig config;
  config.output_dir = dir.string();
  config.fsync = false;
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  const absl::Status missing = (*tracer)->Step(7, 7);
  CHECK(missing.code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(missing.message());
  INFO(message);
  CHECK(absl::StrContains(message, "'gradient/w'"));
  CHECK(absl::StrContains(message, "gstep=7"));
  CHECK_FALSE(absl::StrContains(message, "MissingGradientPolicy"));
  CHECK_FALSE(absl::StrContains(message, "SendGradient"));
  const auto payload = missing.GetPayload(kMissingGradientPayload);
  REQUIRE(payload.has_value());
  CHECK(std::string(*payload) == "w");
  REQUIRE((*tracer)->Close().ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("the version constant is major.minor.patch", "[registry]") {
  const std::string version = kVersion;
  CHECK(version == std::to_string(XDL_TRACE_VERSION_MAJOR) + "." +
                       std::to_string(XDL_TRACE_VERSION_MINOR) + "." +
                       std::to_string(XDL_TRACE_VERSION_PATCH));
}

}  // namespace
}  // namespace xdl_trace
