// KL estimators (k1, abs, k2, k3 with verl's clamps), as a loss term and as a reward penalty with
// a fixed or adaptive coefficient.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "support/batches.h"
#include <torch/csrc/autograd/autograd.h>

#include "turnrl/algo/kl.h"
#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"

using namespace turnrl;
using turnrl::testing::to_tensor;
using turnrl::testing::to_vector;

TEST_CASE("KL estimators match their definitions, k3 is clamped to [-10, 10]", "[kl]") {
  // d = logp − ref = [0.3, −0.5, 20, −2]; the last token is masked.
  const torch::Tensor logp = to_tensor({-1.0, -2.0, 0.0, -3.0}, at::kDouble).view({1, 4});
  const torch::Tensor ref = to_tensor({-1.3, -1.5, -20.0, -1.0}, at::kDouble).view({1, 4});
  const torch::Tensor mask = to_tensor({1, 1, 1, 0}).view({1, 4}).to(at::kBool);
  const auto k1 = to_vector(kl_estimate(logp, ref, mask, KLType::kl));
  const auto ab = to_vector(kl_estimate(logp, ref, mask, KLType::abs));
  const auto k2 = to_vector(kl_estimate(logp, ref, mask, KLType::mse));
  const auto k3 = to_vector(kl_estimate(logp, ref, mask, KLType::low_var_kl));
  const double d[] = {0.3, -0.5, 20.0};
  for (size_t k = 0; k < 3; ++k) {
    REQUIRE(k1[k] == Approx(d[k]));
    REQUIRE(ab[k] == Approx(std::abs(d[k])));
    REQUIRE(k2[k] == Approx(0.5 * d[k] * d[k]));
  }
  REQUIRE(k3[0] == Approx(std::exp(-0.3) + 0.3 - 1));
  REQUIRE(k3[1] == Approx(std::exp(0.5) - 0.5 - 1));
  REQUIRE(k3[2] == 10.0);  // e^{-20} + 20 - 1 = 19, clamped
  for (const auto* v : {&k1, &ab, &k2, &k3}) REQUIRE((*v)[3] == 0);
}

TEST_CASE("KL loss gradients are finite and zero on masked tokens holding NaN", "[kl][mask]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  torch::Tensor logp = to_tensor({-1.0, nan, -0.4}, at::kDouble).view({1, 3}).requires_grad_(true);
  const torch::Tensor ref = to_tensor({-1.2, nan, -0.1}, at::kDouble).view({1, 3});
  const torch::Tensor mask = to_tensor({1, 0, 1}).view({1, 3}).to(at::kBool);
  for (KLType type : {KLType::kl, KLType::abs, KLType::mse, KLType::low_var_kl}) {
    INFO(to_string(type));
    const torch::Tensor loss = kl_estimate(logp, ref, mask, type).sum();
    REQUIRE(std::isfinite(loss.item<double>()));
    const auto g = to_vector(torch::autograd::grad({loss}, {logp})[0]);
    REQUIRE(g[1] == 0);
    // d/dlogp of each estimator at d = 0.2 and d = −0.3.
    const double ds[] = {0.2, -0.3};
    for (int i = 0; i < 2; ++i) {
      const double dd = ds[i];
      const double want = type == KLType::kl ? 1 : type == KLType::abs ? (dd > 0 ? 1 : -1)
                        : type == KLType::mse ? dd : 1 - std::exp(-dd);
      REQUIRE(g[i == 0 ? 0 : 2] == Approx(want));
    }
  }
}

TEST_CASE("KL in the reward: per-turn penalty and the KL the controller tracks", "[kl]") {
  const torch::Tensor logp = to_tensor({-1.0, -1.0, 0, -2.0, -2.0, -2.0}).view({2, 3});
  const torch::Tensor ref = to_tensor({-1.5, -0.5, 0, -2.2, -2.2, -2.2}).view({2, 3});
  const torch::Tensor mask = to_tensor({1, 1, 0, 1, 1, 1}).view({2, 3}).to(at::kBool);
  const KLRewardPenalty p = kl_reward_penalty(logp, ref, mask, KLType::kl, 0.5);
  const auto pen = to_vector(p.penalty), turn = to_vector(p.turn_kl);
  REQUIRE(pen[0] == Approx(0.0).margin(1e-7));   // 0.5 + (−0.5)
  REQUIRE(pen[1] == Approx(0.5 * 0.6));          // 3 × 0.2
  REQUIRE(turn[1] == Approx(0.2));
  REQUIRE(p.batch_kl.item<double>() == Approx(0.1));
}

TEST_CASE("KL controller: fixed stays, adaptive moves by clip(kl/target - 1, ±0.2) n/horizon", "[kl]") {
  KLController fixed(KLControllerOptions().with_coef(0.1));
  fixed.update(5.0, 100);
  REQUIRE(fixed.coef() == 0.1);
  KLController adaptive(KLControllerOptions().with_adaptive(true).with_coef(0.1).with_target(0.1).with_horizon(1000));
  adaptive.update(0.2, 100);  // error clipped to 0.2: × 1.02
  REQUIRE(adaptive.coef() == Approx(0.102));
  adaptive.update(0.095, 1000);  // error −0.05: × 0.95
  REQUIRE(adaptive.coef() == Approx(0.102 * 0.95));

  KLControllerOptions o;
  ConfigReader r(parse_yaml("adaptive: true\ncoef: 0.2\ntarget: 6\nhorizon: 500\ntype: k1", "test"), "kl");
  read_options(r, o);
  r.finish();
  REQUIRE(o.adaptive);
  REQUIRE(o.coef == 0.2);
  REQUIRE(o.type == KLType::kl);
  REQUIRE_THROWS_WITH(parse_kl_type("k4"), Catch::Contains("kl.type"));
}
