// Tracer end to end with the real writer: register, step, read the files back with protobuf.
#include "xdl_trace/tracer.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/wire.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "io/trace_writer.h"
#include "test_util.h"
#include "tracer/tracer_internal.h"
#include "xdl_trace.pb.h"

namespace xdl_trace {
namespace {

namespace fs = std::filesystem;

using test::ReadFile;
using test::TempDir;

// A data file parsed with the generated protobuf: 4-byte LE length + message.
struct DataFile {
  xdl::proto::Header header;
  std::vector<xdl::proto::Record> records;
};

DataFile ReadDataFile(const std::string& path) {
  const std::vector<std::string> frames = test::SplitFrames(ReadFile(path));
  DataFile file;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i == 0) {
      REQUIRE(file.header.ParseFromString(frames[i]));
    } else {
      file.records.emplace_back();
      REQUIRE(file.records.back().ParseFromString(frames[i]));
    }
  }
  return file;
}

std::vector<std::string> HeaderKeys(const DataFile& file) {
  return std::vector<std::string>(file.header.key().begin(), file.header.key().end());
}

template <typename T>
std::vector<T> Values(const xdl::proto::Column& column) {
  std::vector<T> values(column.data().size() / sizeof(T));
  std::memcpy(values.data(), column.data().data(), values.size() * sizeof(T));
  return values;
}

std::vector<int32_t> ShapeOf(const xdl::proto::Column& column) {
  return std::vector<int32_t>(column.shape().begin(), column.shape().end());
}

bool IsEmptyFloatColumn(const xdl::proto::Column& column) {
  return column.dtype() == xdl::proto::Float && ShapeOf(column) == std::vector<int32_t>{0} &&
         column.data().empty();
}

TraceConfig Config(const std::string& dir) {
  TraceConfig config;
  config.output_dir = dir;
  config.fsync = false;  // Tests do not need durability; keeps 1000 cycles fast.
  config.meta_interval_s = 0;
  return config;
}

std::string FirstDataFile(const TraceConfig& config) { return internal::DataFilePath(config, 1); }

CapturedTensor OwnedScalar(float value) {
  Tensor t;
  t.dtype = DType::kFloat32;
  t.bytes.assign(reinterpret_cast<const char*>(&value), sizeof(value));
  return CapturedTensor::Owning(std::move(t));
}

EntrySpec ViewEntry(std::string key, TensorView view, EntryKind kind = EntryKind::kTensor) {
  EntrySpec spec;
  spec.key = std::move(key);
  spec.kind = kind;
  spec.has_view = true;
  spec.view = std::move(view);
  return spec;
}

EntrySpec ProviderEntry(std::string key, TensorProvider provider,
                        EntryKind kind = EntryKind::kCallback) {
  EntrySpec spec;
  spec.key = std::move(key);
  spec.kind = kind;
  spec.provider = std::move(provider);
  return spec;
}

EntrySpec GradientEntry(std::string key, std::string name) {
  EntrySpec spec;
  spec.key = std::move(key);
  spec.kind = EntryKind::kGradient;
  spec.gradient_name = std::move(name);
  return spec;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

}  // namespace

TEST_CASE("a traced run writes the header and one record per step", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::vector<float> weights = {0, 0, 0, 0, 0, 0};
  const int64_t labels[3] = {7, 8, 9};
  float loss = 0;
  REQUIRE(registry
              ->Register(
                  ViewEntry("w", {DType::kFloat32, {2, 3}, weights.data()}, EntryKind::kVariable))
              .ok());
  REQUIRE(registry->Register(ProviderEntry("loss", [&] { return OwnedScalar(loss); })).ok());
  REQUIRE(registry->Register(GradientEntry("grad/w", "w")).ok());
  REQUIRE(
      registry->Register(ViewEntry("labels", {DType::kInt64, {3}, labels}, EntryKind::kOnce)).ok());
  EntrySpec stats = ViewEntry("w_stats", {DType::kFloat32, {2, 3}, weights.data()});
  stats.summary.builtin = BuiltinSummary::kStats;
  REQUIRE(registry->Register(stats).ok());
  EntrySpec hist = ViewEntry("w_hist", {DType::kFloat32, {2, 3}, weights.data()});
  hist.summary.builtin = BuiltinSummary::kHistogram;
  hist.summary.histogram_bins = 4;
  REQUIRE(registry->Register(hist).ok());
  EntrySpec user = ViewEntry("w_sum", {DType::kFloat32, {2, 3}, weights.data()});
  user.summary.fn = [](const TensorView& v) -> absl::StatusOr<Tensor> {
    double sum = 0;
    for (int64_t i = 0; i < v.NumElements(); ++i) sum += static_cast<const float*>(v.data)[i];
    Tensor t;
    t.dtype = DType::kFloat64;
    t.bytes.assign(reinterpret_cast<const char*>(&sum), sizeof(sum));
    return t;
  };
  REQUIRE(registry->Register(user).ok());

  const TraceConfig config = Config(dir.path());
  absl::StatusOr<std::unique_ptr<Tracer>> started = Tracer::Start(config, registry);
  REQUIRE(started.ok());
  Tracer& tracer = **started;
  const std::vector<std::string> keys = {"w",       "loss",   "grad/w", "labels",
                                         "w_stats", "w_hist", "w_sum"};
  CHECK(tracer.keys() == keys);

  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(step * 10 + i);
    loss = 1.0f / step;
    Tensor grad;
    grad.dtype = DType::kFloat32;
    grad.shape = {2};
    const float g[2] = {-static_cast<float>(step), static_cast<float>(step)};
    grad.bytes.assign(reinterpret_cast<const char*>(g), sizeof(g));
    REQUIRE(registry->SendGradient("w", CapturedTensor::Owning(std::move(grad))).ok());
    REQUIRE(tracer.StepAt(100 + step, step, 1700000000000 + step).ok());
  }
  REQUIRE(tracer.Close().ok());
  CHECK(tracer.stats().steps_traced == 3);
  CHECK(tracer.stats().records_written == 3);

  const DataFile file = ReadDataFile(FirstDataFile(config));
  CHECK(HeaderKeys(file) == keys);
  REQUIRE(file.records.size() == 3);
  for (int step = 1; step <= 3; ++step) {
    INFO("step " << step);
    const xdl::proto::Record& record = file.records[step - 1];
    CHECK(record.gstep() == 100 + step);
    CHECK(record.lstep() == step);
    CHECK(record.timestamp() == 1700000000000 + step);
    REQUIRE(record.column_size() == 7);
    const auto& w = record.column(0);
    CHECK(w.dtype() == xdl::proto::Float);
    CHECK(ShapeOf(w) == std::vector<int32_t>{2, 3});
    std::vector<float> expected_w;
    for (int i = 0; i < 6; ++i) expected_w.push_back(static_cast<float>(step * 10 + i));
    CHECK(Values<float>(w) == expected_w);
    CHECK(Values<float>(record.column(1)) == std::vector<float>{1.0f / step});
    CHECK(ShapeOf(record.column(1)).empty());
    CHECK(Values<float>(record.column(2)) ==
          std::vector<float>{-static_cast<float>(step), static_cast<float>(step)});
    if (step == 1) {
      CHECK(record.column(3).dtype() == xdl::proto::Int64);
      CHECK(Values<int64_t>(record.column(3)) == std::vector<int64_t>{7, 8, 9});
    } else {
      CHECK(IsEmptyFloatColumn(record.column(3)));
    }
    const std::vector<double> st = Values<double>(record.column(4));
    REQUIRE(st.size() == 8);
    CHECK(record.column(4).dtype() == xdl::proto::Double);
    CHECK(st[0] == 6);
    CHECK(st[1] == step * 10);
    CHECK(st[2] == step * 10 + 5);
    CHECK(st[3] == Approx(step * 10 + 2.5));
    const std::vector<double> h = Values<double>(record.column(5));
    REQUIRE(h.size() == 10);
    CHECK(h[0] == step * 10);
    CHECK(h[1] == step * 10 + 5);
    CHECK(h[6] + h[7] + h[8] + h[9] == 6);
    CHECK(Values<double>(record.column(6)) == std::vector<double>{6.0 * step * 10 + 15});
  }
}

TEST_CASE("the Header describes every column: content, source, layout, input", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::vector<float> weights(6, 1.0f);
  const int64_t labels[3] = {7, 8, 9};
  REQUIRE(registry
              ->Register(
                  ViewEntry("w", {DType::kFloat32, {2, 3}, weights.data()}, EntryKind::kVariable))
              .ok());
  REQUIRE(registry->Register(ProviderEntry("loss", [] { return OwnedScalar(1); })).ok());
  REQUIRE(registry->Register(GradientEntry("grad/w", "w")).ok());
  REQUIRE(
      registry->Register(ViewEntry("labels", {DType::kInt64, {3}, labels}, EntryKind::kOnce)).ok());
  EntrySpec stats = ViewEntry("w_stats", {DType::kFloat32, {2, 3}, weights.data()});
  stats.summary.builtin = BuiltinSummary::kStats;
  REQUIRE(registry->Register(stats).ok());
  EntrySpec hist = ViewEntry("w_hist", {DType::kFloat32, {6}, weights.data()});
  hist.summary.builtin = BuiltinSummary::kHistogram;
  hist.summary.histogram_bins = 4;
  REQUIRE(registry->Register(hist).ok());
  EntrySpec user = ProviderEntry(
      "loss_user", [] { return OwnedScalar(2); }, EntryKind::kTensor);
  user.summary.fn = [](const TensorView&) -> absl::StatusOr<Tensor> { return Tensor(); };
  user.summary.name = "mine.user_fn";
  REQUIRE(registry->Register(user).ok());
  // A gradient's tensor declared at registration (xdl.watch: its parameter's dtype and shape).
  EntrySpec declared = GradientEntry("grad/w_stats", "w");
  declared.summary.builtin = BuiltinSummary::kStats;
  declared.declared_input = TensorSpec{DType::kFloat32, {2, 3}};
  REQUIRE(registry->Register(declared).ok());

  const TraceConfig config = Config(dir.path());
  absl::StatusOr<std::unique_ptr<Tracer>> started = Tracer::Start(config, registry);
  REQUIRE(started.ok());
  REQUIRE((*started)->Close().ok());

  using Column = xdl::proto::ColumnDescriptor;
  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.header.column_size() == 8);  // One per key, in key order.
  REQUIRE(file.header.key_size() == 8);
  const Column& w = file.header.column(0);
  CHECK(w.content() == Column::VALUE);
  CHECK(w.source() == Column::VARIABLE);
  CHECK(w.layout_version() == 0);
  REQUIRE(w.has_input());
  CHECK(w.input().dtype() == xdl::proto::Float);
  CHECK(std::vector<int32_t>(w.input().shape().begin(), w.input().shape().end()) ==
        std::vector<int32_t>{2, 3});
  const Column& loss = file.header.column(1);  // A provider: its tensor is unknown at Start.
  CHECK(loss.content() == Column::VALUE);
  CHECK(loss.source() == Column::CALLBACK);
  CHECK_FALSE(loss.has_input());
  CHECK(file.header.column(2).source() == Column::GRADIENT);
  CHECK_FALSE(file.header.column(2).has_input());
  const Column& once = file.header.column(3);
  CHECK(once.source() == Column::ONCE);
  CHECK(once.content() == Column::VALUE);
  CHECK(once.input().dtype() == xdl::proto::Int64);
  const Column& st = file.header.column(4);
  CHECK(st.content() == Column::STATS);
  CHECK(st.layout_version() == 1);
  CHECK(st.histogram_bins() == 0);
  CHECK(st.input().dtype() == xdl::proto::Float);
  const Column& h = file.header.column(5);
  CHECK(h.content() == Column::HISTOGRAM);
  CHECK(h.layout_version() == 1);
  CHECK(h.histogram_bins() == 4);
  CHECK(std::vector<int32_t>(h.input().shape().begin(), h.input().shape().end()) ==
        std::vector<int32_t>{6});
  const Column& u = file.header.column(6);
  CHECK(u.content() == Column::USER_SUMMARY);
  CHECK(u.source() == Column::TENSOR);
  CHECK(u.summary_name() == "mine.user_fn");
  CHECK(u.layout_version() == 0);
  const Column& g = file.header.column(7);
  CHECK(g.content() == Column::STATS);
  CHECK(g.source() == Column::GRADIENT);
  REQUIRE(g.has_input());
  CHECK(g.input().dtype() == xdl::proto::Float);
  CHECK(std::vector<int32_t>(g.input().shape().begin(), g.input().shape().end()) ==
        std::vector<int32_t>{2, 3});

  // XDL's reader: a Header of field 1 only (XDL's trace.proto), built at run
  // time. It parses our Header, sees the keys, and keeps field 2 as unknown.
  google::protobuf::FileDescriptorProto xdl_proto;
  xdl_proto.set_name("xdl_trace_test_xdl_header.proto");
  xdl_proto.set_package("xdl_test");
  xdl_proto.set_syntax("proto3");
  google::protobuf::DescriptorProto* header = xdl_proto.add_message_type();
  header->set_name("Header");
  google::protobuf::FieldDescriptorProto* key = header->add_field();
  key->set_name("key");
  key->set_number(1);
  key->set_type(google::protobuf::FieldDescriptorProto::TYPE_STRING);
  key->set_label(google::protobuf::FieldDescriptorProto::LABEL_REPEATED);
  google::protobuf::DescriptorPool pool;
  const google::protobuf::FileDescriptor* built = pool.BuildFile(xdl_proto);
  REQUIRE(built != nullptr);
  google::protobuf::DynamicMessageFactory factory(&pool);
  std::unique_ptr<google::protobuf::Message> xdl_header(
      factory.GetPrototype(built->FindMessageTypeByName("Header"))->New());
  const std::string header_bytes = test::SplitFrames(ReadFile(FirstDataFile(config)))[0];
  REQUIRE(xdl_header->ParseFromString(header_bytes));
  const auto* reflection = xdl_header->GetReflection();
  const auto* key_field = xdl_header->GetDescriptor()->FindFieldByNumber(1);
  std::vector<std::string> xdl_keys;
  for (int i = 0; i < reflection->FieldSize(*xdl_header, key_field); ++i) {
    xdl_keys.push_back(reflection->GetRepeatedString(*xdl_header, key_field, i));
  }
  CHECK(xdl_keys == HeaderKeys(file));
  // Unknown to XDL: the 8 descriptors (field 2) and the run info (field 3, issue 11).
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(*xdl_header);
  std::map<int, int> unknown_by_number;
  for (int i = 0; i < unknown.field_count(); ++i) ++unknown_by_number[unknown.field(i).number()];
  CHECK(unknown_by_number == std::map<int, int>{{2, 8}, {3, 1}});
}

TEST_CASE("once values are captured at the first traced step, whichever it is", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  int calls = 0;
  REQUIRE(registry
              ->Register(ProviderEntry(
                  "config",
                  [&] {
                    ++calls;
                    return OwnedScalar(42);
                  },
                  EntryKind::kOnce))
              .ok());
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  REQUIRE((*tracer)->StepAt(5000, 17, 1).ok());
  REQUIRE((*tracer)->StepAt(5001, 18, 2).ok());
  REQUIRE((*tracer)->StepAt(5002, 19, 3).ok());
  REQUIRE((*tracer)->Close().ok());
  CHECK(calls == 1);  // The provider of a once-value runs once.
  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 3);
  CHECK(Values<float>(file.records[0].column(0)) == std::vector<float>{42});
  CHECK(IsEmptyFloatColumn(file.records[1].column(0)));
  CHECK(IsEmptyFloatColumn(file.records[2].column(0)));
}

TEST_CASE("a missing gradient fails the step naming the key, under kError", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  const float one = 1;
  REQUIRE(
      registry->Register(ViewEntry("seen", {DType::kFloat32, {}, &one}, EntryKind::kOnce)).ok());
  REQUIRE(registry->Register(GradientEntry("grad/w", "w")).ok());
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());

  absl::Status missing = (*tracer)->StepAt(1, 1, 1);
  CHECK(missing.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(Message(missing), Catch::Contains("'grad/w'") && Catch::Contains("gstep=1"));

  REQUIRE(registry->SendGradient("w", OwnedScalar(3)).ok());
  REQUIRE((*tracer)->StepAt(2, 2, 2).ok());
  // Taken by step 2: step 3 misses it again.
  CHECK((*tracer)->StepAt(3, 3, 3).code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->stats().steps_traced == 1);

  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 1);  // The failed steps queued nothing.
  CHECK(file.records[0].gstep() == 2);
  // The failed first step did not use up the once-value.
  CHECK(Values<float>(file.records[0].column(0)) == std::vector<float>{1});
  CHECK(Values<float>(file.records[0].column(1)) == std::vector<float>{3});
}

TEST_CASE("a missing gradient is an empty column and a counter, under kEmptyColumn", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  REQUIRE(registry->Register(GradientEntry("grad/w", "w")).ok());
  REQUIRE(registry->Register(GradientEntry("grad/b", "b")).ok());
  TraceConfig config = Config(dir.path());
  config.missing_gradient = MissingGradientPolicy::kEmptyColumn;
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  REQUIRE(registry->SendGradient("b", OwnedScalar(2)).ok());
  StepNotes notes;
  REQUIRE((*tracer)->StepAt(1, 1, 1, &notes).ok());
  // Each column written empty is listed with the error kError would return.
  REQUIRE(notes.empty_columns.size() == 1);
  const absl::Status& missing = notes.empty_columns[0];
  CHECK(missing.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(missing.message(), "gradient 'grad/w'"));
  CHECK(missing.GetPayload(kEntryKeyPayload) == absl::Cord("grad/w"));
  CHECK(missing.GetPayload(kMissingGradientPayload) == absl::Cord("w"));
  REQUIRE((*tracer)->StepAt(2, 2, 2, &notes).ok());
  CHECK(notes.empty_columns.size() == 2);  // Cleared by each step, then filled.
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->stats().missing_gradients == 3);

  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 2);
  CHECK(IsEmptyFloatColumn(file.records[0].column(0)));
  CHECK(Values<float>(file.records[0].column(1)) == std::vector<float>{2});
  CHECK(IsEmptyFloatColumn(file.records[1].column(0)));
  CHECK(IsEmptyFloatColumn(file.records[1].column(1)));
}

TEST_CASE("Repoint moves an in-place entry to new memory, or to an empty column", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::vector<float> old_memory = {1, 2};
  std::vector<float> new_memory = {3, 4};
  REQUIRE(registry->Register(ViewEntry("w", {DType::kFloat32, {2}, old_memory.data()})).ok());
  REQUIRE(registry->Register(GradientEntry("grad/w", "w")).ok());
  TraceConfig config = Config(dir.path());
  config.missing_gradient = MissingGradientPolicy::kEmptyColumn;
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  Tracer& t = **tracer;
  REQUIRE(t.StepAt(0, 0, 0).ok());
  // The view's memory moved: read where it is now (kept alive by the tracer).
  auto keep = std::make_shared<std::vector<float>>(new_memory);
  REQUIRE(t.Repoint("w", TensorView{DType::kFloat32, {2}, keep->data()}, keep).ok());
  keep.reset();
  REQUIRE(t.StepAt(1, 1, 1).ok());
  // Another dtype or shape than the Header's is refused, naming both; the entry is unchanged.
  const absl::Status cast = t.Repoint("w", TensorView{DType::kFloat64, {2}, nullptr}, nullptr);
  CHECK(cast.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(cast.message(), "float64[2] where the Header declared float32[2]"));
  CHECK(t.Repoint("grad/w", std::nullopt, nullptr).code() == absl::StatusCode::kNotFound);
  CHECK(t.Repoint("nope", std::nullopt, nullptr).code() == absl::StatusCode::kNotFound);
  REQUIRE(t.StepAt(2, 2, 2).ok());
  // No view reaches the values: an empty column from then on.
  REQUIRE(t.Repoint("w", std::nullopt, nullptr).ok());
  REQUIRE(t.StepAt(3, 3, 3).ok());
  REQUIRE(t.Close().ok());

  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 4);
  CHECK(Values<float>(file.records[0].column(0)) == std::vector<float>{1, 2});
  CHECK(Values<float>(file.records[1].column(0)) == std::vector<float>{3, 4});
  CHECK(Values<float>(file.records[2].column(0)) == std::vector<float>{3, 4});
  CHECK(IsEmptyFloatColumn(file.records[3].column(0)));
}

TEST_CASE("entries tracing one gradient name share one send", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  REQUIRE(registry->Register(GradientEntry("grad/w", "w")).ok());
  EntrySpec stats = GradientEntry("grad_stats/w", "w");
  stats.summary.builtin = BuiltinSummary::kStats;
  REQUIRE(registry->Register(stats).ok());
  TraceConfig config = Config(dir.path());
  config.missing_gradient = MissingGradientPolicy::kEmptyColumn;
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  REQUIRE(registry->SendGradient("w", OwnedScalar(4)).ok());
  REQUIRE((*tracer)->StepAt(1, 1, 1).ok());
  REQUIRE((*tracer)->StepAt(2, 2, 2).ok());  // Nothing sent: both columns miss it.
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->stats().missing_gradients == 2);

  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 2);
  CHECK(Values<float>(file.records[0].column(0)) == std::vector<float>{4});
  const std::vector<double> summary = Values<double>(file.records[0].column(1));
  REQUIRE(summary.size() == 8);
  CHECK(summary[0] == 1);  // Count and mean of the one shared value.
  CHECK(summary[3] == 4);
  CHECK(IsEmptyFloatColumn(file.records[1].column(0)));
  CHECK(IsEmptyFloatColumn(file.records[1].column(1)));
}

TEST_CASE("entry errors name the key and queue nothing", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  int mode = 0;
  const float ok_value = 1;
  REQUIRE(registry->Register(ViewEntry("fine", {DType::kFloat32, {}, &ok_value})).ok());
  REQUIRE(registry
              ->Register(ProviderEntry("cb",
                                       [&]() -> absl::StatusOr<CapturedTensor> {
                                         switch (mode) {
                                           case 1:
                                             return absl::InternalError("callback raised");
                                           case 2: {
                                             CapturedTensor bad = OwnedScalar(1);
                                             bad.view.dtype = static_cast<DType>(77);
                                             return bad;
                                           }
                                           case 3: {
                                             CapturedTensor bad = OwnedScalar(1);
                                             bad.view.shape = {int64_t{1} << 40};
                                             return bad;
                                           }
                                           default:
                                             return OwnedScalar(5);
                                         }
                                       }))
              .ok());
  EntrySpec summarized = ViewEntry("sum", {DType::kFloat32, {}, &ok_value});
  summarized.summary.fn = [&](const TensorView& v) -> absl::StatusOr<Tensor> {
    if (mode == 4) return absl::InvalidArgumentError("bad summary input");
    Tensor t = Tensor::CopyOf(v);
    if (mode == 5) t.bytes.push_back('x');  // Bytes disagree with dtype and shape.
    return t;
  };
  REQUIRE(registry->Register(summarized).ok());
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());

  struct Case {
    int mode;
    absl::StatusCode code;
    const char* key;
    const char* text;
  };
  const Case cases[] = {
      {1, absl::StatusCode::kInternal, "'cb'", "callback raised"},
      {2, absl::StatusCode::kInvalidArgument, "'cb'", "dtype 77"},
      {3, absl::StatusCode::kInvalidArgument, "'cb'", "int32"},
      {4, absl::StatusCode::kInvalidArgument, "'sum'", "bad summary input"},
      {5, absl::StatusCode::kInvalidArgument, "'sum'", "bytes"},
  };
  int64_t step = 0;
  for (const Case& c : cases) {
    mode = c.mode;
    ++step;
    absl::Status status = (*tracer)->StepAt(step, step, step);
    INFO("mode " << c.mode << ": " << status);
    CHECK(status.code() == c.code);
    CHECK_THAT(Message(status), Catch::Contains(c.key) && Catch::Contains(c.text));
  }
  mode = 0;
  REQUIRE((*tracer)->StepAt(100, 100, 100).ok());
  REQUIRE((*tracer)->Close().ok());
  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 1);
  CHECK(file.records[0].gstep() == 100);
  CHECK((*tracer)->stats().steps_traced == 1);
}

TEST_CASE("keep-alives are released once the record is encoded", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::weak_ptr<const void> last;
  REQUIRE(registry
              ->Register(ProviderEntry("v",
                                       [&] {
                                         CapturedTensor captured = OwnedScalar(1);
                                         last = captured.keep_alive;
                                         return captured;
                                       }))
              .ok());
  auto tracer = Tracer::Start(Config(dir.path()), registry);
  REQUIRE(tracer.ok());
  REQUIRE((*tracer)->Step(1, 1).ok());
  CHECK(last.expired());
  REQUIRE((*tracer)->Close().ok());
}

TEST_CASE("the header is fixed at Start and only the given scopes are traced", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  const float value = 1;
  EntrySpec train = ViewEntry("x", {DType::kFloat32, {}, &value});
  train.scope = "train";
  EntrySpec eval = ViewEntry("x", {DType::kFloat32, {}, &value});
  eval.scope = "eval";
  REQUIRE(registry->Register(train).ok());
  REQUIRE(registry->Register(eval).ok());
  TraceConfig config = Config(dir.path());
  config.is_training = false;
  auto tracer = Tracer::Start(config, registry, {"eval"});
  REQUIRE(tracer.ok());
  REQUIRE(registry->Register(ViewEntry("late", {DType::kFloat32, {}, &value})).ok());
  EntrySpec late_eval = ViewEntry("late", {DType::kFloat32, {}, &value});
  late_eval.scope = "eval";
  REQUIRE(registry->Register(late_eval).ok());
  registry->ClearScope("eval");  // The tracer keeps its own snapshot.
  REQUIRE((*tracer)->Step(1, 1).ok());
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->keys() == std::vector<std::string>{"eval/x"});
  const DataFile file = ReadDataFile(FirstDataFile(config));
  CHECK(HeaderKeys(file) == std::vector<std::string>{"eval/x"});
  CHECK(FirstDataFile(config).find("/test.trace.0.1") != std::string::npos);
  REQUIRE(file.records.size() == 1);
  CHECK(Values<float>(file.records[0].column(0)) == std::vector<float>{1});
}

TEST_CASE("Start validates; Close is idempotent; Step after Close fails", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  TraceConfig bad;
  CHECK(Tracer::Start(bad, registry).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Tracer::Start(Config(dir.path()), nullptr).status().code() ==
        absl::StatusCode::kInvalidArgument);
  TraceConfig negative_interval = Config(dir.path());
  negative_interval.device_collect_interval_s = -1;
  const absl::Status interval = Tracer::Start(negative_interval, registry).status();
  CHECK(interval.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(interval), Catch::Contains("device_collect_interval_s"));

  auto tracer = Tracer::Start(Config(dir.path()), registry);
  REQUIRE(tracer.ok());
  CHECK((*tracer)->keys().empty());
  REQUIRE((*tracer)->Step(1, 1).ok());  // A record without columns.
  REQUIRE((*tracer)->Flush().ok());
  REQUIRE((*tracer)->Close().ok());
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->Step(2, 2).code() == absl::StatusCode::kFailedPrecondition);
  const DataFile file = ReadDataFile(FirstDataFile(Config(dir.path())));
  REQUIRE(file.records.size() == 1);
  CHECK(file.records[0].column_size() == 0);
}

TEST_CASE("run_id is generated when empty and kept when given", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  TraceConfig config = Config(dir.path());
  auto generated = Tracer::Start(config, registry);
  REQUIRE(generated.ok());
  const std::string run_id = (*generated)->config().run_id;
  CHECK(run_id.size() == 32);
  CHECK(run_id.find_first_not_of("0123456789abcdef") == std::string::npos);
  REQUIRE((*generated)->Close().ok());
  xdl::proto::Meta meta;
  REQUIRE(meta.ParseFromString(ReadFile(FirstDataFile(config) + ".meta")));
  CHECK(meta.run_id() == run_id);

  config.run_id = "my-run";
  auto given = Tracer::Start(config, registry);
  REQUIRE(given.ok());
  CHECK((*given)->config().run_id == "my-run");
}

namespace {

// Records what the tracer calls and supplies field 15 = step count.
class FakeExtras : public internal::RecordExtras {
 public:
  explicit FakeExtras(std::vector<std::string>* calls) : calls_(calls) {}
  void OnStepCalled(int64_t gstep, int64_t lstep) override {
    calls_->push_back("called " + std::to_string(gstep));
  }
  std::string TakeTrailingFields() override {
    calls_->push_back("take");
    ++taken_;
    return std::string("\x78", 1) + static_cast<char>(taken_);  // Field 15 varint.
  }
  void OnStepEncoded(int64_t begin_ns, int64_t end_ns) override {
    calls_->push_back(begin_ns <= end_ns ? "encoded" : "encoded backwards");
  }
  void OnStepReturned(int64_t begin_ns, int64_t end_ns) override {
    calls_->push_back(begin_ns <= end_ns ? "returned" : "returned backwards");
  }
  void OnStepNotTraced(int64_t gstep, int64_t lstep) override {
    calls_->push_back("not traced " + std::to_string(gstep));
  }
  std::string Finish(std::vector<std::string>*) override {
    calls_->push_back("finish");
    return std::string(
        "\x72\x03"
        "end",
        5);  // Field 14 bytes "end".
  }
  void FillStats(TraceStats* stats) const override { stats->device_tracer_status = "fake: ok"; }

 private:
  std::vector<std::string>* calls_;
  int taken_ = 0;
};

}  // namespace

TEST_CASE("record extras supply trailing fields and a final device-only record", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  const float value = 4;
  REQUIRE(registry->Register(ViewEntry("x", {DType::kFloat32, {}, &value})).ok());
  REQUIRE(registry->Register(GradientEntry("g", "g")).ok());
  std::vector<std::string> calls;
  internal::TracerOptions options;
  options.extras = std::make_unique<FakeExtras>(&calls);
  const TraceConfig config = Config(dir.path());
  auto tracer = internal::TracerFactory::Start(config, registry, {""}, std::move(options));
  REQUIRE(tracer.ok());
  REQUIRE(registry->SendGradient("g", OwnedScalar(1)).ok());
  REQUIRE((*tracer)->StepAt(1, 1, 1).ok());
  CHECK_FALSE((*tracer)->StepAt(2, 2, 2).ok());  // Missing gradient: no fields taken.
  REQUIRE(registry->SendGradient("g", OwnedScalar(1)).ok());
  REQUIRE((*tracer)->StepAt(3, 3, 3).ok());
  (*tracer)->NoteStepNotTraced(4, 4);
  CHECK((*tracer)->stats().device_tracer_status == "fake: ok");
  REQUIRE((*tracer)->Close().ok());
  (*tracer)->NoteStepNotTraced(5, 5);  // After Close: not passed on.
  CHECK(calls == std::vector<std::string>{"called 1", "take", "encoded", "returned", "called 2",
                                          "returned", "called 3", "take", "encoded", "returned",
                                          "not traced 4", "finish"});

  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 3);
  for (int i = 0; i < 2; ++i) {
    const auto& unknown = file.records[i].GetReflection()->GetUnknownFields(file.records[i]);
    REQUIRE(unknown.field_count() == 1);
    CHECK(unknown.field(0).number() == 15);
    CHECK(unknown.field(0).varint() == static_cast<uint64_t>(i + 1));
  }
  const xdl::proto::Record& last = file.records[2];
  CHECK(last.gstep() == 3);
  CHECK(last.lstep() == 3);
  CHECK(last.column_size() == 0);  // No fake columns: readers skip it (docs/format.md).
  const auto& unknown = last.GetReflection()->GetUnknownFields(last);
  REQUIRE(unknown.field_count() == 1);
  CHECK(unknown.field(0).number() == 14);
  CHECK(unknown.field(0).length_delimited() == "end");
}

TEST_CASE("device_tracers reach the tracer through the record extras", "[tracer]") {
  // No GPU here: the built-in "cupti" tracer is reported unavailable, and the
  // run goes on; records stay readable by XDL's own message definitions.
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  const float value = 1;
  REQUIRE(registry->Register(ViewEntry("x", {DType::kFloat32, {}, &value})).ok());
  TraceConfig config = Config(dir.path());
  config.device_tracers = {"cupti"};
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  for (int step = 1; step <= 3; ++step) REQUIRE((*tracer)->Step(step, step).ok());
  REQUIRE((*tracer)->Close().ok());
  CHECK_THAT((*tracer)->stats().device_tracer_status, Catch::Contains("cupti"));
  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() >= 3);
  CHECK(Values<float>(file.records[0].column(0)) == std::vector<float>{1});
}

TEST_CASE("1000 Start/Step/Close cycles in one directory", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::vector<float> weights(64, 0.5f);
  REQUIRE(registry->Register(ViewEntry("w", {DType::kFloat32, {8, 8}, weights.data()})).ok());
  REQUIRE(registry->Register(GradientEntry("g", "g")).ok());
  const TraceConfig config = Config(dir.path());
  for (int cycle = 0; cycle < 1000; ++cycle) {
    auto tracer = Tracer::Start(config, registry);
    REQUIRE(tracer.ok());
    REQUIRE(registry->SendGradient("g", OwnedScalar(static_cast<float>(cycle))).ok());
    REQUIRE((*tracer)->StepAt(cycle, 0, cycle).ok());
    REQUIRE((*tracer)->Close().ok());
  }
  int data_files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    if (entry.path().extension() != ".meta") ++data_files;
  }
  CHECK(data_files == 1000);  // Every run continued after the highest index.
  TraceConfig last = config;
  const DataFile file = ReadDataFile(internal::DataFilePath(last, 1000));
  REQUIRE(file.records.size() == 1);
  CHECK(file.records[0].gstep() == 999);
  CHECK(Values<float>(file.records[0].column(1)) == std::vector<float>{999});
}

TEST_CASE("the embed example writes readable, rolled-over files", "[tracer][example]") {
  const std::string binary = std::string(XDL_TRACE_BINARY_DIR) + "/examples/xdl_trace_embed";
  if (!fs::exists(binary)) {
    WARN("SKIPPED: " << binary << " not built (XDL_TRACE_BUILD_EXAMPLES=OFF)");
    return;
  }
  TempDir dir;
  const std::string command = binary + " " + dir.path() + " 40 0.01 > " + dir.path() + "/out.txt";
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK_THAT(ReadFile(dir.path() + "/out.txt"), Catch::Contains("traced 40 steps"));
  TraceConfig config = Config(dir.path());
  config.output_file_name = "embed";
  size_t records = 0;
  int64_t files = 0;
  for (int64_t index = 1; fs::exists(internal::DataFilePath(config, index)); ++index) {
    const DataFile file = ReadDataFile(internal::DataFilePath(config, index));
    CHECK(HeaderKeys(file) == std::vector<std::string>{"loss", "learning_rate", "model/w",
                                                       "model/w_stats", "model/grad_w", "data/x"});
    for (const xdl::proto::Record& record : file.records) {
      CHECK(record.gstep() == static_cast<int64_t>(records + 1));
      CHECK(record.column(3).data().size() == 8 * 8);  // float64[8] stats.
      ++records;
    }
    ++files;
  }
  CHECK(records == 40);
  CHECK(files > 1);  // 0.01 MB files roll over.
}

namespace {

// Waits up to `seconds` for child `pid`; kills it and returns -1 on timeout
// (a hang fails the test instead of blocking the suite), else its exit code.
int WaitChild(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 100; ++i) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

bool SaysForkedChild(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         Message(status).find("forked child") != std::string::npos &&
         Message(status).find(std::to_string(getppid())) != std::string::npos;
}

}  // namespace

TEST_CASE("a forked child never touches the parent's tracer, and the parent goes on", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  const float value = 5;
  REQUIRE(registry->Register(ViewEntry("x", {DType::kFloat32, {}, &value})).ok());
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  REQUIRE((*tracer)->StepAt(1, 1, 1).ok());

  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: no Catch2 here; the exit code says what failed.
    int failures = 0;
    failures += SaysForkedChild((*tracer)->StepAt(2, 2, 2)) ? 0 : 1;
    failures += SaysForkedChild((*tracer)->Flush()) ? 0 : 2;
    failures += SaysForkedChild((*tracer)->Close()) ? 0 : 4;
    failures += SaysForkedChild((*tracer)->stats().last_error) ? 0 : 8;
    tracer->reset();  // The destructor must not wait for the parent's IO thread.
    _exit(failures);
  }
  CHECK(WaitChild(pid, 20) == 0);

  REQUIRE((*tracer)->StepAt(3, 3, 3).ok());
  REQUIRE((*tracer)->Close().ok());
  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 2);
  CHECK(file.records[0].gstep() == 1);
  CHECK(file.records[1].gstep() == 3);
  CHECK(Values<float>(file.records[1].column(0)) == std::vector<float>{5});
}

TEST_CASE("a Step while another thread is inside Step fails and writes nothing", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::atomic<int> calls{0};
  std::atomic<bool> inside{false};
  std::atomic<bool> release{false};
  // The first call holds its Step open until released; later calls return at once.
  REQUIRE(registry
              ->Register(ProviderEntry("slow",
                                       [&] {
                                         if (calls++ == 0) {
                                           inside = true;
                                           while (!release) std::this_thread::yield();
                                         }
                                         return OwnedScalar(1);
                                       }))
              .ok());
  const float value = 2;
  REQUIRE(registry->Register(ViewEntry("x", {DType::kFloat32, {}, &value})).ok());
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());

  absl::Status first;
  std::thread stepper([&] { first = (*tracer)->StepAt(1, 1, 1); });
  while (!inside) std::this_thread::yield();
  const absl::Status second = (*tracer)->StepAt(2, 2, 2);
  release = true;
  stepper.join();
  CHECK(first.ok());
  CHECK(second.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(Message(second), Catch::Contains("another thread") && Catch::Contains("gstep=2"));
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->stats().steps_traced == 1);
  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 1);
  CHECK(file.records[0].gstep() == 1);
  CHECK(file.records[0].column_size() == 2);
}

TEST_CASE("a provider calling Step, Flush or Close of its own tracer is refused, no hang",
          "[tracer]") {
  // Issue 24 #6 and #12: the same thread re-entering is named as such, and Flush and Close
  // (which wait for the step lock) are refused instead of waiting for themselves.
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  Tracer* self = nullptr;
  std::vector<absl::Status> inner;
  REQUIRE(registry
              ->Register(ProviderEntry("cb",
                                       [&] {
                                         inner.push_back(self->StepAt(9, 9, 9));
                                         inner.push_back(self->Flush());
                                         inner.push_back(self->Close());
                                         return OwnedScalar(1);
                                       }))
              .ok());
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  self = tracer->get();
  REQUIRE((*tracer)->StepAt(1, 1, 1).ok());
  REQUIRE(inner.size() == 3);
  const char* calls[] = {"Step(gstep=9)", "Flush()", "Close()"};
  for (size_t i = 0; i < 3; ++i) {
    INFO(Message(inner[i]));
    CHECK(inner[i].code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(Message(inner[i]), Catch::StartsWith(calls[i]) &&
                                      Catch::Contains("inside Step of the same tracer") &&
                                      !Catch::Contains("another thread"));
  }
  REQUIRE((*tracer)->Close().ok());
  const DataFile file = ReadDataFile(FirstDataFile(config));
  REQUIRE(file.records.size() == 1);
  CHECK(file.records[0].gstep() == 1);
}

TEST_CASE("threads hammering Step never write a corrupt record", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::vector<float> weights(64, 1.5f);
  constexpr int kEntries = 16;
  for (int i = 0; i < kEntries; ++i) {
    // Providers that yield widen the window in which steps overlap.
    auto provider = [&weights] {
      std::this_thread::yield();
      return CapturedTensor{{DType::kFloat32, {8, 8}, weights.data()}, nullptr};
    };
    REQUIRE(registry->Register(ProviderEntry("w" + std::to_string(i), provider)).ok());
  }
  const TraceConfig config = Config(dir.path());
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> refused{0};
  std::atomic<int64_t> other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const absl::Status s = (*tracer)->StepAt(t * 1000 + i, i, 1);
        if (s.ok()) {
          ++ok;
        } else if (s.code() == absl::StatusCode::kFailedPrecondition) {
          ++refused;
        } else {
          ++other;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  REQUIRE((*tracer)->Close().ok());
  CHECK(other == 0);
  CHECK(ok + refused == 2000);
  const DataFile file = ReadDataFile(FirstDataFile(config));
  CHECK(static_cast<int64_t>(file.records.size()) == ok.load());
  for (const xdl::proto::Record& record : file.records) {
    REQUIRE(record.column_size() == kEntries);
    for (const xdl::proto::Column& column : record.column()) {
      CHECK(Values<float>(column) == weights);
    }
  }
}

TEST_CASE("a missing gradient is counted under kError and its error carries the key", "[tracer]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  REQUIRE(registry->Register(GradientEntry("grad/w", "w")).ok());
  REQUIRE(
      registry
          ->Register(ProviderEntry(
              "bad", [] { return absl::StatusOr<CapturedTensor>(absl::InternalError("boom")); }))
          .ok());
  auto tracer = Tracer::Start(Config(dir.path()), registry);
  REQUIRE(tracer.ok());
  for (int step = 1; step <= 10; ++step) {
    const absl::Status missing = (*tracer)->StepAt(step, step, step);
    REQUIRE(missing.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(missing.GetPayload(kEntryKeyPayload) == absl::Cord("grad/w"));
  }
  CHECK((*tracer)->stats().missing_gradients == 10);
  REQUIRE(registry->SendGradient("w", OwnedScalar(1)).ok());
  const absl::Status failed = (*tracer)->StepAt(11, 11, 11);
  CHECK(failed.code() == absl::StatusCode::kInternal);
  CHECK(failed.GetPayload(kEntryKeyPayload) == absl::Cord("bad"));
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->stats().missing_gradients == 10);
}

// ---- Write modes (docs/writer.md, "Write modes") ----

namespace {

// The bytes of a Record body before its first field numbered above 4: gstep,
// lstep, the columns and the timestamp, exactly as written. The host spans
// (field 6: clock readings, and the IO thread's write groups) differ from run
// to run and are left out.
std::string FieldsUpToTimestamp(const std::string& body) {
  const char* p = body.data();
  const char* const end = p + body.size();
  while (p < end) {
    const char* field_begin = p;
    uint64_t tag = 0;
    REQUIRE(internal::ReadVarint(&p, end, &tag));
    if ((tag >> 3) > 4) return std::string(body.data(), field_begin);
    uint64_t value = 0;
    REQUIRE(internal::ReadVarint(&p, end, &value));
    if ((tag & 7) == internal::kWireLengthDelimited) {
      REQUIRE(value <= static_cast<uint64_t>(end - p));
      p += value;
    }
  }
  return body;
}

TraceConfig ModeConfig(const std::string& dir, WriteMode mode) {
  TraceConfig config = Config(dir);
  config.write_mode = mode;
  config.run_id = "run";
  return config;
}

// Random float32 values (a distinct stream per seed).
std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return values;
}

// One run of `steps` steps in `mode` over columns of the given byte sizes
// (views into buffers refilled at each step), a provider, a summary and a
// once-value; returns the data file's record frames, up to the timestamp.
std::vector<std::string> RunSteps(WriteMode mode, const std::vector<size_t>& column_floats,
                                  int steps) {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::vector<std::vector<float>> buffers;
  for (size_t n : column_floats) buffers.emplace_back(n);
  for (size_t i = 0; i < buffers.size(); ++i) {
    REQUIRE(registry
                ->Register(ViewEntry(
                    absl::StrCat("v", i),
                    {DType::kFloat32, {static_cast<int64_t>(buffers[i].size())}, buffers[i].data()},
                    EntryKind::kVariable))
                .ok());
  }
  int step = 0;
  REQUIRE(registry
              ->Register(ProviderEntry("provided",
                                       [&] {
                                         Tensor t;
                                         t.dtype = DType::kFloat32;
                                         const std::vector<float> v =
                                             RandomFloats(3000, 1000 + step);
                                         t.shape = {static_cast<int64_t>(v.size())};
                                         t.bytes.assign(reinterpret_cast<const char*>(v.data()),
                                                        v.size() * sizeof(float));
                                         return CapturedTensor::Owning(std::move(t));
                                       }))
              .ok());
  EntrySpec stats = ViewEntry(
      "v0_stats", {DType::kFloat32, {static_cast<int64_t>(buffers[0].size())}, buffers[0].data()});
  stats.summary.builtin = BuiltinSummary::kHistogram;
  stats.summary.histogram_bins = 2000;  // 16 KB of doubles: written in place when inline.
  REQUIRE(registry->Register(stats).ok());
  const std::vector<int64_t> labels(2000, 7);
  REQUIRE(
      registry
          ->Register(ViewEntry("labels", {DType::kInt64, {2000}, labels.data()}, EntryKind::kOnce))
          .ok());

  const TraceConfig config = ModeConfig(dir.path(), mode);
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  CHECK((*tracer)->stats().write_mode == config.ResolvedWriteMode());
  for (step = 1; step <= steps; ++step) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      const std::vector<float> v = RandomFloats(buffers[i].size(), step * 100 + i);
      std::copy(v.begin(), v.end(), buffers[i].begin());  // In place: the views stay valid.
    }
    REQUIRE((*tracer)->StepAt(step, step, 1700000000000 + step).ok());
  }
  REQUIRE((*tracer)->Close().ok());
  CHECK((*tracer)->stats().records_written == steps);
  const std::vector<std::string> frames = test::SplitFrames(ReadFile(FirstDataFile(config)));
  std::vector<std::string> records;
  for (size_t i = 1; i < frames.size(); ++i) records.push_back(FieldsUpToTimestamp(frames[i]));
  return records;
}

}  // namespace

TEST_CASE("inline and io_thread write identical records", "[tracer][write_mode]") {
  // Columns below, at and above the size inline writes in place (4096 bytes).
  const std::vector<size_t> floats = {6, 1023, 1024, 1025, 100000, 300000};
  const std::vector<std::string> io_thread = RunSteps(WriteMode::kIoThread, floats, 5);
  const std::vector<std::string> inline_mode = RunSteps(WriteMode::kInline, floats, 5);
  const std::vector<std::string> auto_mode = RunSteps(WriteMode::kAuto, floats, 2);
  REQUIRE(io_thread.size() == 5);
  REQUIRE(inline_mode.size() == 5);
  for (size_t i = 0; i < io_thread.size(); ++i) {
    INFO("record " << i);
    CHECK(io_thread[i].size() > 1'600'000);
    CHECK(inline_mode[i] == io_thread[i]);
  }
  REQUIRE(auto_mode.size() == 2);
  CHECK(auto_mode[1] == io_thread[1]);
}

TEST_CASE("the file holds each step's values, never a change made after Step returned",
          "[tracer][write_mode]") {
  for (const WriteMode mode : {WriteMode::kIoThread, WriteMode::kInline}) {
    INFO("write mode " << WriteModeName(mode));
    TempDir dir;
    auto registry = std::make_shared<Registry>();
    std::vector<float> values(1 << 20);  // 4 MiB: written from its own memory when inline.
    REQUIRE(registry
                ->Register(ViewEntry("w", {DType::kFloat32, {1 << 20}, values.data()},
                                     EntryKind::kVariable))
                .ok());
    internal::TracerOptions options;
    // A slow sink: a write still under way when Step returned would see the change.
    options.writer_hooks.before_record_write = [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    };
    const TraceConfig config = ModeConfig(dir.path(), mode);
    auto tracer = internal::TracerFactory::Start(config, registry, {""}, std::move(options));
    REQUIRE(tracer.ok());
    for (int step = 1; step <= 8; ++step) {
      std::fill(values.begin(), values.end(), static_cast<float>(step));
      REQUIRE((*tracer)->StepAt(step, step, step).ok());
      std::fill(values.begin(), values.end(), -1.0f);  // The next "optimizer update".
    }
    REQUIRE((*tracer)->Close().ok());
    const DataFile file = ReadDataFile(FirstDataFile(config));
    REQUIRE(file.records.size() == 8);
    for (int step = 1; step <= 8; ++step) {
      const std::vector<float> written = Values<float>(file.records[step - 1].column(0));
      REQUIRE(written.size() == values.size());
      CHECK(std::all_of(written.begin(), written.end(),
                        [&](float v) { return v == static_cast<float>(step); }));
    }
  }
}

TEST_CASE("inline under a failing writer returns the error, never hangs, and holds no capture",
          "[tracer][write_mode][errors]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  std::weak_ptr<const void> last;
  REQUIRE(registry
              ->Register(ProviderEntry("big",
                                       [&] {
                                         Tensor t;
                                         t.dtype = DType::kUInt8;
                                         t.shape = {8000};
                                         t.bytes.assign(8000, 'v');
                                         CapturedTensor captured =
                                             CapturedTensor::Owning(std::move(t));
                                         last = captured.keep_alive;
                                         return captured;
                                       }))
              .ok());
  const TraceConfig config = ModeConfig(dir.path(), WriteMode::kInline);
  absl::Status first_error;
  int steps_failed = 0;
  std::unique_ptr<Tracer> tracer;
  {
    test::FileSizeLimit limit(30000);  // EFBIG from the fourth record on.
    auto started = Tracer::Start(config, registry);
    REQUIRE(started.ok());
    tracer = std::move(*started);
    for (int step = 1; step <= 20; ++step) {
      const absl::Status s = tracer->StepAt(step, step, step);
      // Nothing refers to the captured tensor once Step returned, written or not.
      CHECK(last.expired());
      if (!s.ok()) {
        ++steps_failed;
        if (first_error.ok()) first_error = s;
        CHECK(s == first_error);  // Sticky.
      }
    }
    REQUIRE_FALSE(first_error.ok());
    CHECK(first_error.code() == absl::StatusCode::kOutOfRange);  // EFBIG.
    CHECK_THAT(Message(first_error), Catch::Contains(FirstDataFile(config)));
    CHECK(tracer->Close() == first_error);
  }
  const TraceStats stats = tracer->stats();
  CHECK(stats.write_mode == WriteMode::kInline);
  CHECK(stats.steps_traced == 20);
  CHECK(stats.records_written + stats.records_dropped == 20);
  CHECK(stats.records_dropped == steps_failed);
  CHECK(stats.last_error == first_error);
}

TEST_CASE("write_mode inline with overflow drop is refused naming both keys; auto picks io_thread",
          "[tracer][write_mode][config]") {
  TempDir dir;
  auto registry = std::make_shared<Registry>();
  TraceConfig config = ModeConfig(dir.path(), WriteMode::kInline);
  config.overflow = OverflowPolicy::kDrop;
  const absl::Status refused = Tracer::Start(config, registry).status();
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(refused), Catch::Contains("'write_mode'") && Catch::Contains("'inline'") &&
                                   Catch::Contains("'overflow'") && Catch::Contains("'drop'"));
  config.write_mode = WriteMode::kAuto;
  auto tracer = Tracer::Start(config, registry);
  REQUIRE(tracer.ok());
  CHECK((*tracer)->stats().write_mode == WriteMode::kIoThread);
  REQUIRE((*tracer)->Close().ok());
  CHECK(std::string(WriteModeName(WriteMode::kAuto)) == "auto");
  CHECK(std::string(WriteModeName(WriteMode::kIoThread)) == "io_thread");
  CHECK(std::string(WriteModeName(WriteMode::kInline)) == "inline");
}

}  // namespace xdl_trace
