// Registry: validation that names the key, scopes, clearing, snapshot order, gradient rendezvous;
// one-call registration (TraceVariable & co.) and the missing-gradient payload a binding rewords.
#include "xdl_trace/registry.h"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "xdl_trace/tracer.h"
#include "xdl_trace/version.h"

namespace xdl_trace {
namespace {

float kWeights[6] = {1, 2, 3, 4, 5, 6};

EntrySpec ViewEntry(std::string key, std::string scope = "") {
  EntrySpec spec;
  spec.scope = std::move(scope);
  spec.key = std::move(key);
  spec.kind = EntryKind::kTensor;
  spec.has_view = true;
  spec.view = TensorView{DType::kFloat32, {2, 3}, kWeights};
  return spec;
}

EntrySpec GradientEntry(std::string key, std::string name, std::string scope = "") {
  EntrySpec spec;
  spec.scope = std::move(scope);
  spec.key = std::move(key);
  spec.kind = EntryKind::kGradient;
  spec.gradient_name = std::move(name);
  return spec;
}

std::vector<std::string> Keys(const std::vector<EntrySpec>& entries) {
  std::vector<std::string> keys;
  for (const EntrySpec& e : entries) keys.push_back(e.FullKey());
  return keys;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

CapturedTensor Scalar(float value) {
  Tensor t;
  t.dtype = DType::kFloat32;
  t.bytes.assign(reinterpret_cast<const char*>(&value), sizeof(value));
  return CapturedTensor::Owning(std::move(t));
}

float ValueOf(const CapturedTensor& captured) {
  float v;
  std::memcpy(&v, captured.view.data, sizeof(v));
  return v;
}

}  // namespace

TEST_CASE("full keys join scope and key", "[registry]") {
  CHECK(ViewEntry("w").FullKey() == "w");
  CHECK(ViewEntry("w", "layer1").FullKey() == "layer1/w");
}

TEST_CASE("registration errors name the key", "[registry]") {
  Registry registry;
  REQUIRE(registry.Register(ViewEntry("w", "s")).ok());

  absl::Status duplicate = registry.Register(ViewEntry("w", "s"));
  CHECK(duplicate.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(duplicate), Catch::Contains("'s/w'") && Catch::Contains("already"));
  // Same full key from another scope split is a duplicate too (one header).
  CHECK_THAT(Message(registry.Register(ViewEntry("s/w"))), Catch::Contains("'s/w'"));

  absl::Status empty = registry.Register(ViewEntry("", "scope1"));
  CHECK(empty.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(empty), Catch::Contains("empty key") && Catch::Contains("scope1"));

  EntrySpec bad_dtype = ViewEntry("bad");
  bad_dtype.view.dtype = static_cast<DType>(42);
  absl::Status dtype = registry.Register(bad_dtype);
  CHECK(dtype.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(dtype), Catch::Contains("'bad'") && Catch::Contains("dtype 42"));

  EntrySpec no_source = ViewEntry("nosrc");
  no_source.has_view = false;
  CHECK_THAT(Message(registry.Register(no_source)), Catch::Contains("'nosrc'"));

  EntrySpec two_sources = ViewEntry("two");
  two_sources.provider = [] { return Scalar(1); };
  CHECK_THAT(Message(registry.Register(two_sources)), Catch::Contains("'two'"));

  EntrySpec callback_without_provider = ViewEntry("cb");
  callback_without_provider.kind = EntryKind::kCallback;
  CHECK_THAT(Message(registry.Register(callback_without_provider)), Catch::Contains("'cb'"));

  CHECK_THAT(Message(registry.Register(GradientEntry("g", ""))), Catch::Contains("'g'"));

  EntrySpec wide = ViewEntry("wide");
  wide.view.shape = {int64_t{1} << 31, 0};
  CHECK_THAT(Message(registry.Register(wide)),
             Catch::Contains("'wide'") && Catch::Contains("int32"));
  EntrySpec negative = ViewEntry("neg");
  negative.view.shape = {-1};
  CHECK_THAT(Message(registry.Register(negative)), Catch::Contains("'neg'"));
  EntrySpec null_data = ViewEntry("null");
  null_data.view.data = nullptr;
  CHECK_THAT(Message(registry.Register(null_data)), Catch::Contains("'null'"));

  EntrySpec bins = ViewEntry("hist");
  bins.summary.builtin = BuiltinSummary::kHistogram;
  bins.summary.histogram_bins = 0;
  CHECK_THAT(Message(registry.Register(bins)), Catch::Contains("'hist'"));

  EntrySpec declared_view = ViewEntry("declared_view");  // A view's input is its own.
  declared_view.declared_input = TensorSpec{DType::kFloat32, {2}};
  CHECK_THAT(Message(registry.Register(declared_view)),
             Catch::Contains("'declared_view'") && Catch::Contains("declared input with a view"));
  EntrySpec declared_dtype = GradientEntry("declared_dtype", "g");
  declared_dtype.declared_input = TensorSpec{static_cast<DType>(42), {2}};
  CHECK_THAT(Message(registry.Register(declared_dtype)), Catch::Contains("'declared_dtype'") &&
                                                             Catch::Contains("declared input") &&
                                                             Catch::Contains("dtype 42"));
  EntrySpec declared_shape = GradientEntry("declared_shape", "g");
  declared_shape.declared_input = TensorSpec{DType::kFloat32, {-1}};
  CHECK_THAT(Message(registry.Register(declared_shape)), Catch::Contains("'declared_shape'"));

  // Nothing invalid was added.
  CHECK(Keys(registry.Snapshot({"", "s", "scope1"})) == std::vector<std::string>{"s/w"});
}

TEST_CASE("every kind with a valid source registers", "[registry]") {
  Registry registry;
  EntrySpec variable = ViewEntry("v");
  variable.kind = EntryKind::kVariable;
  EntrySpec once = ViewEntry("o");
  once.kind = EntryKind::kOnce;
  EntrySpec callback;
  callback.key = "cb";
  callback.kind = EntryKind::kCallback;
  callback.provider = [] { return Scalar(3); };
  EntrySpec provided_gradient;  // Additive: a gradient read by a provider.
  provided_gradient.key = "pg";
  provided_gradient.kind = EntryKind::kGradient;
  provided_gradient.provider = [] { return Scalar(4); };
  EntrySpec empty_view = ViewEntry("empty");
  empty_view.view = TensorView{DType::kBFloat16, {0, 3}, nullptr};
  for (EntrySpec spec : {ViewEntry("t"), variable, once, callback, GradientEntry("g", "g"),
                         provided_gradient, empty_view}) {
    INFO(spec.key);
    CHECK(registry.Register(std::move(spec)).ok());
  }
  CHECK(Keys(registry.Snapshot({""})) ==
        std::vector<std::string>{"t", "v", "o", "cb", "g", "pg", "empty"});
}

TEST_CASE("snapshot is in registration order, scope by scope", "[registry]") {
  Registry registry;
  REQUIRE(registry.Register(ViewEntry("b", "eval")).ok());
  REQUIRE(registry.Register(ViewEntry("z")).ok());
  REQUIRE(registry.Register(ViewEntry("a", "eval")).ok());
  REQUIRE(registry.Register(ViewEntry("y")).ok());
  CHECK(Keys(registry.Snapshot({""})) == std::vector<std::string>{"z", "y"});
  CHECK(Keys(registry.Snapshot({"eval"})) == std::vector<std::string>{"eval/b", "eval/a"});
  CHECK(Keys(registry.Snapshot({"eval", ""})) ==
        std::vector<std::string>{"eval/b", "eval/a", "z", "y"});
  CHECK(Keys(registry.Snapshot({"", "eval", ""})) ==
        std::vector<std::string>{"z", "y", "eval/b", "eval/a"});
  CHECK(registry.Snapshot({"missing"}).empty());
}

TEST_CASE("ClearScope and Clear remove entries and their pending gradients", "[registry]") {
  Registry registry;
  REQUIRE(registry.Register(ViewEntry("w", "train")).ok());
  REQUIRE(registry.Register(GradientEntry("gw", "w_grad", "train")).ok());
  REQUIRE(registry.Register(ViewEntry("w", "eval")).ok());
  REQUIRE(registry.Register(GradientEntry("ge", "e_grad", "eval")).ok());
  REQUIRE(registry.SendGradient("w_grad", Scalar(1)).ok());
  REQUIRE(registry.SendGradient("e_grad", Scalar(2)).ok());

  registry.ClearScope("train");
  CHECK(registry.Snapshot({"train"}).empty());
  CHECK(Keys(registry.Snapshot({"eval"})) == std::vector<std::string>{"eval/w", "eval/ge"});
  CHECK(registry.TakeGradient("w_grad").status().code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.SendGradient("e_grad", Scalar(3)).ok());
  // The cleared key can be registered again.
  CHECK(registry.Register(ViewEntry("w", "train")).ok());

  registry.Clear();
  CHECK(registry.Snapshot({"", "train", "eval"}).empty());
  CHECK(registry.TakeGradient("e_grad").status().code() == absl::StatusCode::kNotFound);
  CHECK(registry.Register(ViewEntry("w", "eval")).ok());
}

TEST_CASE("gradient rendezvous: send, replace, take once, drop", "[registry]") {
  Registry registry;
  absl::StatusOr<CapturedTensor> none = registry.TakeGradient("g");
  CHECK(none.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(Message(none.status()), Catch::Contains("'g'"));

  REQUIRE(registry.SendGradient("g", Scalar(1)).ok());
  REQUIRE(registry.SendGradient("g", Scalar(2)).ok());  // Replaces the first.
  absl::StatusOr<CapturedTensor> taken = registry.TakeGradient("g");
  REQUIRE(taken.ok());
  CHECK(ValueOf(*taken) == 2);
  CHECK(registry.TakeGradient("g").status().code() == absl::StatusCode::kNotFound);

  REQUIRE(registry.SendGradient("g", Scalar(5)).ok());
  REQUIRE(registry.SendGradient("h", Scalar(6)).ok());
  registry.DropPendingGradients();
  CHECK(registry.TakeGradient("g").status().code() == absl::StatusCode::kNotFound);
  CHECK(registry.TakeGradient("h").status().code() == absl::StatusCode::kNotFound);

  CHECK(registry.SendGradient("", Scalar(1)).code() == absl::StatusCode::kInvalidArgument);
  CapturedTensor bad = Scalar(1);
  bad.view.dtype = static_cast<DType>(-1);
  CHECK_THAT(Message(registry.SendGradient("badg", bad)), Catch::Contains("'badg'"));
}

TEST_CASE("a taken gradient keeps its memory alive after the registry forgets it", "[registry]") {
  Registry registry;
  auto alive = std::make_shared<int>(7);
  std::weak_ptr<int> watch = alive;
  CapturedTensor gradient = Scalar(9);
  gradient.keep_alive = alive;  // Stand-in for a Python array.
  alive.reset();
  REQUIRE(registry.SendGradient("g", std::move(gradient)).ok());
  CHECK_FALSE(watch.expired());
  {
    absl::StatusOr<CapturedTensor> taken = registry.TakeGradient("g");
    REQUIRE(taken.ok());
    registry.Clear();
    CHECK_FALSE(watch.expired());
  }
  CHECK(watch.expired());
}

TEST_CASE("concurrent senders and takers never block or lose the last value", "[registry]") {
  Registry registry;
  std::atomic<bool> stop{false};
  std::atomic<int> send_errors{0};
  std::thread producer([&] {
    for (int i = 0; i < 20000; ++i) {
      if (!registry.SendGradient("g", Scalar(static_cast<float>(i))).ok()) ++send_errors;
    }
    stop = true;
  });
  float last_taken = -1;
  bool increasing = true;
  while (!stop) {
    absl::StatusOr<CapturedTensor> taken = registry.TakeGradient("g");
    if (!taken.ok()) continue;
    increasing = increasing && ValueOf(*taken) > last_taken;
    last_taken = ValueOf(*taken);
  }
  producer.join();
  CHECK(send_errors == 0);
  CHECK(increasing);
  absl::StatusOr<CapturedTensor> pending = registry.TakeGradient("g");
  CHECK((pending.ok() ? ValueOf(*pending) : last_taken) == 19999);
}

}  // namespace xdl_trace

// ---- One-call registration (TraceVariable & co.) ----

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
