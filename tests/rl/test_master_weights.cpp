// Float32 master weights: updates below a bf16 weight's spacing accumulate on the master and
// reach the model, float32 parameters are their own masters, gradients move to float32, and a
// checkpoint round trip keeps the masters' low bits.
#include <catch2/catch.hpp>

#include <filesystem>

#include <torch/optim/adamw.h>

#include "turnrl/core/error.h"
#include "turnrl/rl/master_weights.h"

using namespace turnrl;

namespace {

// AdamW (no weight decay) for `steps` steps with the constant gradient 1 on every weight.
void train_constant_gradient(const std::vector<torch::Tensor>& stepped, MasterWeights* masters,
                             const std::vector<torch::Tensor>& model, int steps, double lr) {
  torch::optim::AdamW optimizer(stepped, torch::optim::AdamWOptions(lr).weight_decay(0));
  for (int i = 0; i < steps; ++i) {
    for (const auto& p : model) p.mutable_grad() = torch::ones_like(p);
    if (masters) masters->gather_gradients();
    optimizer.step();
    if (masters) masters->publish();
  }
}

}  // namespace

TEST_CASE("master weights: updates below bf16's spacing accumulate instead of rounding away", "[trainer]") {
  // 0.02 in bf16 has spacing 2^-13 ≈ 1.2e-4. With a constant gradient Adam moves each weight by lr
  // per step (m̂ / √v̂ = 1), so 200 steps of 1e-6 move it by 2e-4: lost step by step on the bf16
  // weight itself, kept on the float32 master (hand value: 0.02 - 200 · 1e-6 = 0.0198).
  const torch::Tensor start = torch::full({4}, 0.02, torch::kBFloat16);
  const double start_value = start[0].item<double>();

  const torch::Tensor plain = start.clone().requires_grad_(true);
  train_constant_gradient({plain}, nullptr, {plain}, 200, 1e-6);
  CHECK(plain[0].item<double>() == start_value);

  const torch::Tensor model = start.clone().requires_grad_(true);
  MasterWeights masters({model});
  REQUIRE(masters.any());
  CHECK(masters.masters()[0].scalar_type() == torch::kFloat);
  train_constant_gradient(masters.masters(), &masters, {model}, 200, 1e-6);
  CHECK(masters.masters()[0][0].item<double>() == Approx(start_value - 200e-6).margin(1e-6));
  CHECK(model[0].item<double>() == torch::tensor(start_value - 200e-6).to(torch::kBFloat16).item<double>());
  CHECK(model[0].item<double>() < start_value);
  CHECK_FALSE(model.grad().defined());  // released after each gather
}

TEST_CASE("master weights: float32 parameters, and all when disabled, are their own masters", "[trainer]") {
  const torch::Tensor fp32 = torch::zeros({3}).requires_grad_(true);
  const torch::Tensor bf16 = torch::zeros({3}, torch::kBFloat16).requires_grad_(true);
  MasterWeights mixed({fp32, bf16});
  CHECK(mixed.masters()[0].is_same(fp32));
  CHECK_FALSE(mixed.masters()[1].is_same(bf16));
  MasterWeights off({fp32, bf16}, /*enabled=*/false);
  CHECK_FALSE(off.any());
  CHECK(off.masters()[1].is_same(bf16));

  // A parameter without a gradient gives its master zeros; zero_gradients clears every gradient.
  fp32.mutable_grad() = torch::ones({3});
  mixed.gather_gradients();
  CHECK(mixed.masters()[1].grad().eq(0).all().item<bool>());
  mixed.zero_gradients();
  CHECK(fp32.grad().eq(0).all().item<bool>());
}

TEST_CASE("master weights: save and load keep the float32 values, a mismatch is an error", "[trainer]") {
  const std::string path = (std::filesystem::temp_directory_path() / "turnrl_master_weights_test.pt").string();
  const torch::Tensor model = torch::full({5}, 1.0, torch::kBFloat16).requires_grad_(true);
  MasterWeights masters({model});
  {
    torch::NoGradGuard no_grad;
    masters.masters()[0].add_(1e-5);  // below bf16's spacing at 1.0 (2^-7)
  }
  masters.save(path);
  MasterWeights restored({model});
  CHECK(restored.masters()[0][0].item<double>() == 1.0);
  restored.load(path);
  CHECK(restored.masters()[0][0].item<double>() == Approx(1.0 + 1e-5).margin(1e-7));
  restored.reset_from_model();
  CHECK(restored.masters()[0][0].item<double>() == 1.0);

  MasterWeights two({model, torch::zeros({2}, torch::kHalf).requires_grad_(true)});
  CHECK_THROWS_WITH(two.load(path), Catch::Contains("1 tensors") && Catch::Contains("2 parameters"));
  std::filesystem::remove(path);
}
