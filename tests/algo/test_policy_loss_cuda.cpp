// The fused CUDA PPO loss (one kernel for the tokens, one for the aggregation and the metrics, a
// custom backward) against the CPU path: loss, gradient and metrics for every aggregation mode,
// per-turn and per-token advantages, with and without weights and the dual clip, in double and
// float; padded tokens holding NaN/inf; a large batch; entropy and KL terms alongside.
#include <catch2/catch.hpp>

#include <limits>

#include <torch/csrc/autograd/autograd.h>

#include "turnrl/algo/policy_loss.h"

using namespace turnrl;

namespace {

bool skip_without_cuda() {
  if (at::hasCUDA()) return false;
  WARN("no CUDA device visible: skipped");
  return true;
}

struct Batch {
  torch::Tensor logp, old_logp, adv_turn, adv_token, mask, weights;
  Batch to(const torch::Device& device, at::ScalarType dtype) const {
    return {logp.to(device, dtype), old_logp.to(device, dtype), adv_turn.to(device, dtype),
            adv_token.to(device, dtype), mask.to(device), weights.to(device, dtype)};
  }
};

// Ratios spread over every clip region, ragged rows (row 2 empty), weights in [0, 2] with zeros.
Batch random_batch(uint64_t seed, int64_t n, int64_t len) {
  at::manual_seed(seed);
  const auto d = at::TensorOptions(at::kDouble);
  Batch b;
  b.old_logp = -4 * at::rand({n, len}, d) - 0.1;
  b.logp = b.old_logp + 2.4 * at::rand({n, len}, d) - 1.2;
  b.adv_turn = 4 * at::rand({n}, d) - 2;
  b.adv_token = 4 * at::rand({n, len}, d) - 2;
  b.weights = (2 * at::rand({n, len}, d)).masked_fill(at::rand({n, len}, d) < 0.1, 0.0);
  torch::Tensor lengths = at::randint(1, len + 1, {n});
  if (n > 2) lengths[2] = 0;
  b.mask = at::arange(len).unsqueeze(0) < lengths.unsqueeze(1);
  return b;
}

struct Outcome {
  torch::Tensor loss, grad;
  std::map<std::string, double> metrics;
};

// The loss times 2.5 is differentiated so that the backward's scaling by the incoming gradient
// is checked too.
Outcome evaluate(const Batch& b, bool per_token, bool weighted, const PPOLossOptions& o) {
  PolicyLossInputs in;
  in.logp = b.logp.detach().clone().requires_grad_(true);
  in.old_logp = b.old_logp;
  in.advantages = per_token ? b.adv_token : b.adv_turn;
  in.response_mask = b.mask;
  if (weighted) in.weights = b.weights;
  const PolicyLossResult r = policy_loss(in, o);
  Outcome out;
  out.loss = r.loss.detach().cpu();
  out.grad = torch::autograd::grad({r.loss * 2.5}, {in.logp})[0].cpu();
  out.metrics = r.metrics.to_map();
  return out;
}

void require_same(const Outcome& gpu, const Outcome& cpu, double tol) {
  REQUIRE(gpu.loss.item<double>() == Approx(cpu.loss.item<double>()).epsilon(tol).margin(tol));
  REQUIRE(at::allclose(gpu.grad, cpu.grad, tol, tol * 1e-3));
  REQUIRE(gpu.metrics.size() == cpu.metrics.size());
  for (const auto& kv : cpu.metrics) {
    INFO(kv.first);
    REQUIRE(gpu.metrics.at(kv.first) == Approx(kv.second).epsilon(tol).margin(tol));
  }
}

}  // namespace

TEST_CASE("policy loss CUDA kernels equal the CPU path in every mode", "[cuda][policy_loss]") {
  if (skip_without_cuda()) return;
  const Batch cpu = random_batch(1, 9, 37);
  for (const at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const Batch host = cpu.to(torch::kCPU, dtype), gpu = cpu.to(torch::kCUDA, dtype);
    const double tol = dtype == at::kDouble ? 1e-10 : 1e-5;
    for (const LossAggMode mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                                   LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm,
                                   LossAggMode::seq_sum_no_norm})
      for (const bool per_token : {false, true})
        for (const bool weighted : {false, true})
          for (const double dual : {3.0, 0.0}) {
            INFO(to_string(mode) << " " << c10::toString(dtype) << " per_token " << per_token << " weighted "
                                 << weighted << " dual " << dual);
            const auto o = PPOLossOptions().with_agg_mode(mode).with_dual_clip(dual).with_norm_length(
                mode == LossAggMode::seq_mean_token_sum_norm ? 50.0 : 0.0);
            const Outcome g = evaluate(gpu, per_token, weighted, o);
            require_same(g, evaluate(host, per_token, weighted, o), tol);
            // The plain autograd composition on the GPU agrees as well.
            require_same(g, evaluate(gpu, per_token, weighted, PPOLossOptions(o).with_fused(false)), tol * 10);
          }
  }
}

TEST_CASE("policy loss CUDA kernels: padded tokens holding NaN/inf change nothing", "[cuda][policy_loss][mask]") {
  if (skip_without_cuda()) return;
  const Batch clean = random_batch(2, 6, 11).to(torch::kCUDA, at::kFloat);
  Batch dirty = clean;
  const torch::Tensor pad = ~clean.mask;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  dirty.logp = clean.logp.masked_fill(pad, nan);
  dirty.old_logp = clean.old_logp.masked_fill(pad, inf);
  dirty.adv_token = clean.adv_token.masked_fill(pad, -inf);
  dirty.weights = clean.weights.masked_fill(pad, nan);
  const Outcome a = evaluate(clean, true, true, {}), b = evaluate(dirty, true, true, {});
  REQUIRE(a.loss.item<double>() == b.loss.item<double>());
  REQUIRE(at::equal(a.grad, b.grad));
  REQUIRE(a.metrics == b.metrics);
  REQUIRE((b.grad.masked_select(pad.cpu()) == 0).all().item<bool>());
}

TEST_CASE("policy loss CUDA kernels on a large batch, with entropy and KL terms", "[cuda][policy_loss][large]") {
  if (skip_without_cuda()) return;
  const Batch cpu = random_batch(3, 700, 3000).to(torch::kCPU, at::kFloat);
  const Batch gpu = cpu.to(torch::kCUDA, at::kFloat);
  const auto o = PPOLossOptions().with_entropy_coef(0.01).with_kl_loss(0.1);
  const auto run = [&](const Batch& b) {
    PolicyLossInputs in;
    in.logp = b.logp.detach().clone().requires_grad_(true);
    in.old_logp = b.old_logp;
    in.advantages = b.adv_turn;
    in.response_mask = b.mask;
    in.weights = b.weights;
    in.entropy = (-b.logp).detach().clone();
    in.ref_logp = b.old_logp - 0.05;
    const PolicyLossResult r = policy_loss(in, o);
    Outcome out;
    out.loss = r.loss.detach().cpu();
    out.grad = torch::autograd::grad({r.loss}, {in.logp})[0].cpu();
    out.metrics = r.metrics.to_map();
    return out;
  };
  require_same(run(gpu), run(cpu), 1e-4);
}

TEST_CASE("policy loss on CUDA in bfloat16 takes whole-tensor ops and agrees with the plain composition",
          "[cuda][policy_loss]") {
  if (skip_without_cuda()) return;
  const Batch gpu = random_batch(4, 8, 29).to(torch::kCUDA, at::kBFloat16);
  for (const bool weighted : {false, true}) {
    const Outcome fused = evaluate(gpu, false, weighted, {});
    const Outcome plain = evaluate(gpu, false, weighted, PPOLossOptions().with_fused(false));
    REQUIRE(fused.loss.item<double>() == Approx(plain.loss.item<double>()).epsilon(2e-2).margin(1e-6));
    REQUIRE(at::allclose(fused.grad.to(at::kFloat), plain.grad.to(at::kFloat), 2e-2, 1e-6));
  }
}
