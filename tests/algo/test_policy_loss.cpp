// PPO policy loss: research §6.1/§6.2 worked values, aggregation modes against their scalar
// definitions on ragged rows, gradients (fused hand-written backward vs autograd vs finite
// differences, in double), padded tokens filled with NaN and huge values, entropy and KL terms.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include <torch/csrc/autograd/autograd.h>

#include "support/batches.h"
#include "turnrl/algo/policy_loss.h"
#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"

using namespace turnrl;
using turnrl::testing::to_tensor;
using turnrl::testing::to_vector;

namespace {

const LossAggMode kModes[] = {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                              LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm,
                              LossAggMode::seq_sum_no_norm};

torch::Tensor grad_of(const torch::Tensor& loss, const torch::Tensor& x) {
  return torch::autograd::grad({loss}, {x}, {}, /*retain_graph=*/true)[0];
}

// A random ragged batch in double: rows of different lengths (one empty), ratios spread so that
// every clip region is visited, per-turn or per-token advantages, mismatch weights.
struct Batch {
  torch::Tensor logp, old_logp, adv_turn, adv_token, mask, weights;
  std::vector<int64_t> lengths;
};

Batch random_batch(uint64_t seed, int64_t n = 5, int64_t len = 7) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> logp(-4.0, -0.1), log_ratio(-1.2, 1.2), adv(-2.0, 2.0), w(0.0, 2.0);
  std::uniform_int_distribution<int64_t> length(1, len);
  Batch b;
  b.logp = at::empty({n, len}, at::kDouble);
  b.old_logp = at::empty({n, len}, at::kDouble);
  b.adv_token = at::empty({n, len}, at::kDouble);
  b.weights = at::empty({n, len}, at::kDouble);
  b.adv_turn = at::empty({n}, at::kDouble);
  for (int64_t r = 0; r < n; ++r) {
    b.lengths.push_back(r == 2 ? 0 : length(rng));
    b.adv_turn[r] = adv(rng);
    for (int64_t k = 0; k < len; ++k) {
      const double old = logp(rng);
      b.old_logp[r][k] = old;
      b.logp[r][k] = old + log_ratio(rng);
      b.adv_token[r][k] = adv(rng);
      b.weights[r][k] = w(rng);
    }
  }
  b.mask = at::arange(len).unsqueeze(0) < at::tensor(b.lengths).unsqueeze(1);
  return b;
}

PolicyLossInputs inputs_of(const Batch& b, const torch::Tensor& logp, bool per_token, bool weighted) {
  PolicyLossInputs in;
  in.logp = logp;
  in.old_logp = b.old_logp;
  in.advantages = per_token ? b.adv_token : b.adv_turn;
  in.response_mask = b.mask;
  if (weighted) in.weights = b.weights;
  return in;
}

// The scalar definition of each aggregation mode on plain nested loops.
double scalar_aggregate(const torch::Tensor& values, const std::vector<int64_t>& lengths, LossAggMode mode,
                        int64_t width) {
  const auto v = to_vector(values);
  double total = 0, tokens = 0, rows = 0, row_mean_sum = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    double s = 0;
    for (int64_t k = 0; k < lengths[r]; ++k) s += v[r * size_t(width) + size_t(k)];
    total += s;
    tokens += double(lengths[r]);
    if (lengths[r] > 0) rows += 1, row_mean_sum += s / double(lengths[r]);
  }
  switch (mode) {
    case LossAggMode::token_mean: return total / tokens;
    case LossAggMode::seq_mean_token_sum: return total / rows;
    case LossAggMode::seq_mean_token_mean: return row_mean_sum / rows;
    case LossAggMode::seq_mean_token_sum_norm: return total / double(width);
    case LossAggMode::seq_sum_no_norm: return total;
  }
  return 0;
}

}  // namespace

TEST_CASE("research 6.1: dual-clip token losses sum to 3.12, clip fractions 0.8 / 0.6 / 0.2 / 0.2", "[policy_loss][worked]") {
  // (A, ρ): (+1, 1.5) (+1, 0.5) (−1, 0.5) (−1, 5.0) (−1, 1.1) with old_logp 0.
  const torch::Tensor ratio = to_tensor({1.5, 0.5, 0.5, 5.0, 1.1}).view({1, 5});
  PolicyLossInputs in;
  in.logp = ratio.log().requires_grad_(true);
  in.old_logp = at::zeros_like(ratio);
  in.advantages = to_tensor({1, 1, -1, -1, -1}).view({1, 5});
  in.response_mask = at::ones({1, 5}, at::kBool);
  const auto token = to_vector(ppo_token_loss(in.logp, in.old_logp, in.advantages, in.response_mask));
  const std::vector<double> want = {-1.28, -0.5, 0.8, 3.0, 1.1};
  for (size_t k = 0; k < 5; ++k) REQUIRE(token[k] == Approx(want[k]).margin(1e-6));
  for (bool fused : {true, false}) {
    INFO("fused " << fused);
    const auto o = PPOLossOptions().with_agg_mode(LossAggMode::seq_sum_no_norm).with_loss_scale_factor(1).with_fused(fused);
    const PolicyLossResult r = policy_loss(in, o);
    REQUIRE(r.loss.item<double>() == Approx(3.12).margin(1e-6));
    const auto m = r.metrics.to_map();
    REQUIRE(m.at("actor/clip_frac") == Approx(0.8));
    REQUIRE(m.at("actor/clip_frac_lower") == Approx(0.6));
    REQUIRE(m.at("actor/clip_frac_upper") == Approx(0.2));
    REQUIRE(m.at("actor/clip_frac_dual") == Approx(0.2));
    REQUIRE(m.at("actor/ratio_max") == Approx(5.0));
    REQUIRE(m.at("actor/ratio_mean") == Approx(8.6 / 5));
    REQUIRE(m.at("actor/nonzero_weight_fraction") == 1);
    // Gradient −A ρ only where no clip binds: tokens 2 (A=+1, ρ=0.5) and 5 (A=−1, ρ=1.1).
    const auto g = to_vector(grad_of(r.loss, in.logp));
    const std::vector<double> want_g = {0, -0.5, 0, 0, 1.1};
    for (size_t k = 0; k < 5; ++k) REQUIRE(g[k] == Approx(want_g[k]).margin(1e-6));
  }
}

TEST_CASE("research 6.2: aggregation modes on rows of 3, 2 and 0 valid tokens", "[policy_loss][worked]") {
  PolicyLossInputs in;
  in.logp = at::full({3, 4}, -1.0).requires_grad_(true);
  in.old_logp = at::full({3, 4}, -1.0);  // ρ = 1: token loss −A
  in.advantages = to_tensor({0.7, -0.5, 0.3});
  in.response_mask = at::arange(4).unsqueeze(0) < at::tensor(std::vector<int64_t>{3, 2, 0}).unsqueeze(1);
  const std::vector<std::pair<LossAggMode, double>> cases = {
      {LossAggMode::token_mean, -0.22},          {LossAggMode::seq_mean_token_sum, -0.55},
      {LossAggMode::seq_mean_token_mean, -0.1},  {LossAggMode::seq_mean_token_sum_norm, -0.275},
      {LossAggMode::seq_sum_no_norm, -1.1}};
  for (bool fused : {true, false})
    for (const auto& c : cases) {
      INFO(to_string(c.first) << " fused " << fused);
      const auto o = PPOLossOptions().with_agg_mode(c.first).with_loss_scale_factor(1).with_fused(fused);
      REQUIRE(policy_loss(in, o).loss.item<double>() == Approx(c.second).margin(1e-6));
    }
  // The recipe's defaults: seq-mean-token-sum / 1000.
  REQUIRE(policy_loss(in).loss.item<double>() == Approx(-0.00055).margin(1e-9));
  REQUIRE(policy_loss(in, PPOLossOptions().with_agg_mode(LossAggMode::seq_mean_token_sum_norm)
                                .with_norm_length(10).with_loss_scale_factor(1))
              .loss.item<double>() == Approx(-0.11).margin(1e-7));
}

TEST_CASE("every aggregation mode equals its scalar definition on ragged lengths", "[policy_loss]") {
  for (uint64_t seed : {1, 2, 3}) {
    const Batch b = random_batch(seed, 6, 9);
    torch::Tensor values = b.adv_token.clone();
    values.masked_fill_(~b.mask, std::numeric_limits<double>::quiet_NaN());  // padding never counts
    for (LossAggMode mode : kModes) {
      INFO(to_string(mode) << " seed " << seed);
      REQUIRE(aggregate_loss(values, b.mask, mode).item<double>() ==
              Approx(scalar_aggregate(values, b.lengths, mode, 9)).epsilon(1e-12));
    }
  }
}

TEST_CASE("fused backward equals autograd and finite differences in double", "[policy_loss][grad]") {
  for (uint64_t seed : {7, 8}) {
    const Batch b = random_batch(seed);
    for (bool per_token : {false, true})
      for (bool weighted : {false, true})
        for (LossAggMode mode : kModes) {
          INFO("seed " << seed << " per_token " << per_token << " weighted " << weighted << " " << to_string(mode));
          const auto o = PPOLossOptions().with_agg_mode(mode).with_loss_scale_factor(3.0);
          torch::Tensor x = b.logp.clone().requires_grad_(true);
          const PolicyLossResult fused = policy_loss(inputs_of(b, x, per_token, weighted), o);
          const PolicyLossResult plain = policy_loss(inputs_of(b, x, per_token, weighted), PPOLossOptions(o).with_fused(false));
          REQUIRE(fused.loss.item<double>() == Approx(plain.loss.item<double>()).epsilon(1e-12));
          const torch::Tensor g_fused = grad_of(fused.loss, x), g_plain = grad_of(plain.loss, x);
          REQUIRE(at::allclose(g_fused, g_plain, 1e-12, 1e-14));
          for (const auto& kv : plain.metrics.to_map()) REQUIRE(fused.metrics.to_map().at(kv.first) == Approx(kv.second));

          // Central differences on every entry.
          const double eps = 1e-6;
          torch::Tensor fd = at::zeros_like(b.logp);
          for (int64_t i = 0; i < b.logp.numel(); ++i) {
            torch::Tensor up = b.logp.clone(), down = b.logp.clone();
            up.view(-1)[i] += eps;
            down.view(-1)[i] -= eps;
            const double f_up = policy_loss(inputs_of(b, up, per_token, weighted), o).loss.item<double>();
            const double f_down = policy_loss(inputs_of(b, down, per_token, weighted), o).loss.item<double>();
            fd.view(-1)[i] = (f_up - f_down) / (2 * eps);
          }
          REQUIRE(at::allclose(g_fused, fd, 1e-6, 1e-8));
        }
  }
}

TEST_CASE("the analytic gradient: -c_r w A rho where no clip binds, 0 elsewhere", "[policy_loss][grad]") {
  const Batch b = random_batch(21);
  torch::Tensor x = b.logp.clone().requires_grad_(true);
  const auto o = PPOLossOptions().with_agg_mode(LossAggMode::token_mean).with_loss_scale_factor(1);
  const torch::Tensor g = grad_of(policy_loss(inputs_of(b, x, true, true), o).loss, x);
  const double tokens = double(b.mask.sum().item<int64_t>());
  const auto gv = to_vector(g), lp = to_vector(b.logp), old = to_vector(b.old_logp), a = to_vector(b.adv_token),
             w = to_vector(b.weights), m = to_vector(b.mask);
  for (size_t i = 0; i < gv.size(); ++i) {
    const double rho = std::exp(lp[i] - old[i]);
    const bool clipped = (a[i] > 0 && rho > 1.28) || (a[i] < 0 && rho < 0.8) || (a[i] < 0 && -a[i] * 3 < -a[i] * rho);
    const double want = (m[i] != 0 && !clipped) ? -a[i] * rho * w[i] / tokens : 0.0;
    REQUIRE(gv[i] == Approx(want).margin(1e-12));
  }
}

TEST_CASE("padded tokens contribute nothing whatever their values (NaN, inf, huge)", "[policy_loss][mask]") {
  const Batch b = random_batch(31);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Batch dirty = b;
  const torch::Tensor pad = ~b.mask;
  dirty.logp = b.logp.masked_fill(pad, nan);
  dirty.old_logp = b.old_logp.masked_fill(pad, -inf);
  dirty.adv_token = b.adv_token.masked_fill(pad, 1e300);
  dirty.weights = b.weights.masked_fill(pad, nan);
  const torch::Tensor ent = at::rand_like(b.logp), ent_dirty = ent.masked_fill(pad, inf);
  const torch::Tensor ref = b.old_logp - 0.1, ref_dirty = ref.masked_fill(pad, nan);
  for (bool fused : {true, false})
    for (LossAggMode mode : kModes) {
      INFO(to_string(mode) << " fused " << fused);
      const auto o = PPOLossOptions().with_agg_mode(mode).with_fused(fused).with_entropy_coef(0.01).with_kl_loss(0.1);
      torch::Tensor x = b.logp.clone().requires_grad_(true), xd = dirty.logp.clone().requires_grad_(true);
      torch::Tensor e = ent.clone().requires_grad_(true), ed = ent_dirty.clone().requires_grad_(true);
      PolicyLossInputs in = inputs_of(b, x, true, true), ind = inputs_of(dirty, xd, true, true);
      in.entropy = e, ind.entropy = ed;
      in.ref_logp = ref, ind.ref_logp = ref_dirty;
      const PolicyLossResult clean = policy_loss(in, o), dirt = policy_loss(ind, o);
      REQUIRE(dirt.loss.item<double>() == clean.loss.item<double>());
      const auto grads = torch::autograd::grad({dirt.loss}, {xd, ed});
      const auto clean_grads = torch::autograd::grad({clean.loss}, {x, e});
      for (int i = 0; i < 2; ++i) {
        REQUIRE(at::isfinite(grads[size_t(i)]).all().item<bool>());
        REQUIRE(at::equal(grads[size_t(i)], clean_grads[size_t(i)]));
        REQUIRE((grads[size_t(i)].masked_select(pad) == 0).all().item<bool>());
      }
      for (const auto& kv : clean.metrics.to_map()) REQUIRE(dirt.metrics.to_map().at(kv.first) == kv.second);
    }
}

TEST_CASE("fused and plain paths agree in float on a larger batch, with zero weights", "[policy_loss]") {
  const int64_t n = 64, len = 300;
  at::manual_seed(4);
  PolicyLossInputs in;
  in.old_logp = -3 * at::rand({n, len});
  in.logp = (in.old_logp + 0.5 * at::randn({n, len})).requires_grad_(true);
  in.advantages = at::randn({n});
  in.response_mask = at::rand({n, len}) < 0.8;
  in.weights = (at::rand({n, len}) < 0.9).to(at::kFloat) * 1.5;
  const PolicyLossResult f = policy_loss(in), p = policy_loss(in, PPOLossOptions().with_fused(false));
  REQUIRE(f.loss.item<double>() == Approx(p.loss.item<double>()).epsilon(1e-5));
  REQUIRE(at::allclose(grad_of(f.loss, in.logp), grad_of(p.loss, in.logp), 1e-5, 1e-9));
  const auto fm = f.metrics.to_map(), pm = p.metrics.to_map();
  for (const auto& kv : pm) REQUIRE(fm.at(kv.first) == Approx(kv.second).epsilon(1e-5));
  REQUIRE(fm.at("actor/nonzero_weight_fraction") == Approx(0.9).margin(0.02));
}

TEST_CASE("entropy bonus and KL loss enter with their coefficients", "[policy_loss]") {
  const Batch b = random_batch(41);
  torch::Tensor x = b.logp.clone().requires_grad_(true);
  PolicyLossInputs in = inputs_of(b, x, false, false);
  in.entropy = at::rand_like(b.logp).requires_grad_(true);
  in.ref_logp = b.old_logp + 0.2;
  const auto base = PPOLossOptions().with_agg_mode(LossAggMode::token_mean).with_loss_scale_factor(2);
  const double pg = policy_loss(in, base).loss.item<double>();
  const PolicyLossResult r = policy_loss(in, PPOLossOptions(base).with_entropy_coef(0.05).with_kl_loss(0.3, KLType::mse));
  const double ent = aggregate_loss(in.entropy, b.mask, LossAggMode::token_mean).item<double>();
  const double kl = aggregate_loss(kl_estimate(x, in.ref_logp, b.mask, KLType::mse), b.mask, LossAggMode::token_mean).item<double>();
  REQUIRE(r.loss.item<double>() == Approx(pg - 0.05 * ent / 2 + 0.3 * kl / 2).epsilon(1e-12));
  REQUIRE(r.metrics.kl_loss.item<double>() == Approx(kl / 2));
  REQUIRE(r.metrics.entropy.item<double>() == Approx(ent));
  const torch::Tensor ge = grad_of(r.loss, in.entropy);
  REQUIRE(at::allclose(ge, -0.05 / 2 * b.mask.to(at::kDouble) / double(b.mask.sum().item<int64_t>())));
}

TEST_CASE("policy loss options: defaults are the recipe's, YAML maps one-to-one, bad values throw", "[policy_loss][config]") {
  const PPOLossOptions d;
  REQUIRE(d.clip_low == 0.2);
  REQUIRE(d.clip_high == 0.28);
  REQUIRE(d.dual_clip == 3.0);
  REQUIRE(d.agg_mode == LossAggMode::seq_mean_token_sum);
  REQUIRE(d.loss_scale_factor == 1000);
  REQUIRE(d.entropy_coef == 0);
  REQUIRE(d.kl_loss_coef == 0);

  PPOLossOptions o;
  ConfigReader r(parse_yaml("clip_low: 0.1\nclip_high: 0.2\ndual_clip: 0\nagg_mode: token-mean\n"
                            "loss_scale_factor: 1\nkl_loss_coef: 0.01\nkl_type: k2\nfused: false", "test"), "policy_loss");
  read_options(r, o);
  r.finish();
  REQUIRE(o.clip_low == 0.1);
  REQUIRE(o.dual_clip == 0);
  REQUIRE(o.agg_mode == LossAggMode::token_mean);
  REQUIRE(o.kl_type == KLType::mse);
  REQUIRE_FALSE(o.fused);

  PPOLossOptions bad;
  ConfigReader r2(parse_yaml("dual_clip: 0.5", "test"), "policy_loss");
  REQUIRE_THROWS_WITH(read_options(r2, bad), Catch::Contains("policy_loss.dual_clip"));
  ConfigReader r3(parse_yaml("agg_mode: seq-mean", "test"), "policy_loss");
  REQUIRE_THROWS_WITH(read_options(r3, bad), Catch::Contains("policy_loss.agg_mode"));

  PolicyLossInputs in;
  in.logp = at::zeros({2, 3});
  in.old_logp = at::zeros({2, 3});
  in.response_mask = at::ones({2, 3}, at::kBool);
  in.advantages = at::zeros({3});
  REQUIRE_THROWS_WITH(policy_loss(in), Catch::Contains("advantages"));
  in.advantages = at::zeros({2});
  REQUIRE_THROWS_WITH(policy_loss(in, PPOLossOptions().with_kl_loss(0.1)), Catch::Contains("ref_logp"));
}
