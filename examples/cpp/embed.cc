// Embeds xdl_trace in a tiny C++ training loop (linear regression by SGD), traced N steps.
//
// Usage: xdl_trace_embed OUT_DIR [STEPS=100] [MAX_FILE_MB=300]
//
// Traced per step: the weight matrix (read in place), its built-in stats, the
// loss (a callback), the weight gradient (sent through the rendezvous) and,
// once, the input batch. Prints what was written.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "xdl_trace/registry.h"
#include "xdl_trace/tracer.h"

namespace {

constexpr int kBatch = 64;
constexpr int kIn = 16;
constexpr int kOut = 4;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "xdl_trace_embed: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// The model: y = x * w, trained toward y_true = x * w_true.
struct Model {
  std::vector<float> x = std::vector<float>(kBatch * kIn);
  std::vector<float> y_true = std::vector<float>(kBatch * kOut);
  std::vector<float> w = std::vector<float>(kIn * kOut, 0.0f);
  float loss = 0;

  explicit Model(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::vector<float> w_true(kIn * kOut);
    for (float& v : w_true) v = normal(rng);
    for (float& v : x) v = normal(rng);
    for (int b = 0; b < kBatch; ++b) {
      for (int o = 0; o < kOut; ++o) {
        float sum = 0;
        for (int i = 0; i < kIn; ++i) sum += x[b * kIn + i] * w_true[i * kOut + o];
        y_true[b * kOut + o] = sum;
      }
    }
  }

  // One SGD step; returns the gradient of w (mean squared error).
  xdl_trace::Tensor Train(float learning_rate) {
    std::vector<float> diff(kBatch * kOut);
    loss = 0;
    for (int b = 0; b < kBatch; ++b) {
      for (int o = 0; o < kOut; ++o) {
        float pred = 0;
        for (int i = 0; i < kIn; ++i) pred += x[b * kIn + i] * w[i * kOut + o];
        diff[b * kOut + o] = pred - y_true[b * kOut + o];
        loss += diff[b * kOut + o] * diff[b * kOut + o];
      }
    }
    loss /= kBatch * kOut;
    xdl_trace::Tensor grad;
    grad.dtype = xdl_trace::DType::kFloat32;
    grad.shape = {kIn, kOut};
    grad.bytes.resize(sizeof(float) * kIn * kOut);
    auto* g = reinterpret_cast<float*>(&grad.bytes[0]);
    for (int i = 0; i < kIn; ++i) {
      for (int o = 0; o < kOut; ++o) {
        float sum = 0;
        for (int b = 0; b < kBatch; ++b) sum += x[b * kIn + i] * diff[b * kOut + o];
        g[i * kOut + o] = 2 * sum / (kBatch * kOut);
      }
    }
    for (int k = 0; k < kIn * kOut; ++k) w[k] -= learning_rate * g[k];
    return grad;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s OUT_DIR [STEPS=100] [MAX_FILE_MB=300]\n", argv[0]);
    return 2;
  }
  const std::string out_dir = argv[1];
  const long steps = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 100;
  const double max_file_mb = argc > 3 ? std::strtod(argv[3], nullptr) : 300;
  if (steps < 0) {
    std::fprintf(stderr, "xdl_trace_embed: STEPS must be >= 0, got %s\n", argv[2]);
    return 2;
  }

  using xdl_trace::DType;
  Model model(/*seed=*/7);
  const float learning_rate = 0.05f;
  auto registry = std::make_shared<xdl_trace::Registry>();

  // One call per entry (Registry::TraceVariable & co.; EntrySpec spells out the rare cases).
  // The weights: stable memory, read in place at every traced step; also as built-in stats.
  absl::Status status = registry->TraceVariable("w", model.w.data(), {kIn, kOut}, {"model"});
  if (status.ok()) {
    status = registry->TraceVariable("w_stats", model.w.data(), {kIn, kOut},
                                     {"model", {xdl_trace::BuiltinSummary::kStats}});
  }
  // The gradient: the training code sends it each step as "model/w".
  if (status.ok()) status = registry->TraceGradient("grad_w", "model/w", {"model"});
  // The loss: a callback returning a small owned tensor.
  if (status.ok()) {
    status =
        registry->TraceCallback("loss", [&model]() -> absl::StatusOr<xdl_trace::CapturedTensor> {
          xdl_trace::Tensor t;
          t.dtype = DType::kFloat32;
          t.bytes.assign(reinterpret_cast<const char*>(&model.loss), sizeof(float));
          return xdl_trace::CapturedTensor::Owning(std::move(t));
        });
  }
  // The input batch and the learning rate: traced once, at the first traced step.
  if (status.ok()) status = registry->TraceOnce("x", model.x.data(), {kBatch, kIn}, {"data"});
  if (status.ok()) status = registry->TraceOnce("learning_rate", &learning_rate, {});
  if (!status.ok()) return Fail("register", status);

  xdl_trace::TraceConfig config;
  config.output_dir = out_dir;
  config.output_file_name = "embed";
  config.max_file_m_size = max_file_mb;
  auto tracer = xdl_trace::Tracer::Start(config, registry, {"", "model", "data"});
  if (!tracer.ok()) return Fail("start", tracer.status());

  for (long step = 1; step <= steps; ++step) {
    xdl_trace::Tensor g = model.Train(learning_rate);
    status = registry->SendGradient("model/w", xdl_trace::CapturedTensor::Owning(std::move(g)));
    if (status.ok()) status = (*tracer)->Step(/*gstep=*/step, /*lstep=*/step);
    if (!status.ok()) return Fail("step " + std::to_string(step), status);
  }
  status = (*tracer)->Close();
  if (!status.ok()) return Fail("close", status);

  const xdl_trace::TraceStats stats = (*tracer)->stats();
  std::printf("xdl_trace_embed: traced %lld steps, final loss %.6g, run %s\n",
              static_cast<long long>(stats.steps_traced), model.loss,
              (*tracer)->config().run_id.c_str());
  std::printf("  keys:");
  for (const std::string& key : (*tracer)->keys()) std::printf(" %s", key.c_str());
  std::printf(
      "\n  records written %lld, bytes %lld, files %lld, dropped %lld, queue high water %lld B\n",
      static_cast<long long>(stats.records_written), static_cast<long long>(stats.bytes_written),
      static_cast<long long>(stats.files_written), static_cast<long long>(stats.records_dropped),
      static_cast<long long>(stats.queue_high_water_bytes));
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("train.embed.", 0) == 0) files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  for (const std::string& name : files) {
    std::printf("  %s/%s (%llu bytes)\n", out_dir.c_str(), name.c_str(),
                static_cast<unsigned long long>(
                    std::filesystem::file_size(std::filesystem::path(out_dir) / name, error)));
  }
  return 0;
}
