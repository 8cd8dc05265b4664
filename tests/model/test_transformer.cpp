#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include <torch/optim/adam.h>
#include <unistd.h>

#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"
#include "turnrl/model/transformer.h"

using namespace turnrl;

namespace {

TransformerOptions tiny() { return TransformerOptions().vocab(40).d_model(32).layers(2).heads(4).ffn(64).max_seq(64); }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("turnrl_model_" + std::to_string(getpid()) + "_" + name)).string();
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

TokenLogp logp_no_grad(Policy& p, const Rollout& r) {
  torch::NoGradGuard no_grad;
  return p.forward_logp(r.tokens, r.attention_mask, r.response_mask);
}

}  // namespace

TEST_CASE("transformer: options are validated and the parameter count is exact", "[model]") {
  CHECK_THROWS_WITH(validate(tiny().heads(5)), Catch::Contains("transformer.heads"));
  CHECK_THROWS_WITH(validate(tiny().heads(32)), Catch::Contains("even head size"));  // head_dim 1
  CHECK_THROWS_WITH(validate(tiny().vocab(0)), Catch::Contains("transformer.vocab"));
  CHECK_THROWS_WITH(validate(tiny().dtype(torch::kHalf)), Catch::Contains("transformer.dtype"));
  CHECK(TransformerOptions().d_model(768).ffn_width() == 2048);

  torch::manual_seed(0);
  TransformerPolicy policy(tiny());
  int64_t count = 0;
  for (const auto& p : policy.parameters()) count += p.numel();
  CHECK(count == tiny().num_parameters());
  CHECK(policy.parameters().front().scalar_type() == torch::kFloat);
  // The budget check names the fields involved.
  const auto [prompts, mask] = left_pad({{1, 2, 3}}, 0);
  CHECK_THROWS_WITH(policy.generate(prompts, mask, SamplingOptions().max_new(62)), Catch::Contains("max_seq"));
}

TEST_CASE("transformer: forward_logp equals the sampler's recorded log-probs at fp32", "[model]") {
  torch::manual_seed(1);
  TransformerPolicy policy(tiny());
  policy.eval();
  const auto [prompts, mask] = left_pad({{1, 2, 3, 4, 5}, {6, 7}, {8, 9, 10}, {11}}, 0);
  for (bool cache : {true, false}) {
    const Rollout r = policy.generate(prompts, mask, SamplingOptions().max_new(16).stop({3, 4}).rng_seed(5).cache(cache));
    REQUIRE(r.response_mask.sum().item<int64_t>() > 4 * 2);
    const TokenLogp t = logp_no_grad(policy, r);
    CHECK(max_abs_diff(t.logp, r.logp) < 1e-5);
    // And the log-probs are real: far from zero on the response.
    CHECK(r.logp.masked_select(r.response_mask).mean().item<double>() < -1.0);
  }
}

TEST_CASE("transformer: KV-cache generation equals uncached generation", "[model]") {
  torch::manual_seed(2);
  TransformerPolicy policy(tiny());
  const auto [prompts, mask] = left_pad({{1, 2, 3, 4}, {5, 6}, {7, 8, 9}}, 0);
  for (const SamplingOptions& o : {SamplingOptions().max_new(20).temp(0),
                                   SamplingOptions().max_new(20).rng_seed(11),
                                   SamplingOptions().max_new(20).rng_seed(12).temp(0.7).topk(8).topp(0.9).stop({1})}) {
    const Rollout cached = policy.generate(prompts, mask, SamplingOptions(o).cache(true));
    const Rollout full = policy.generate(prompts, mask, SamplingOptions(o).cache(false));
    CHECK(torch::equal(cached.tokens, full.tokens));
    CHECK(torch::equal(cached.response_mask, full.response_mask));
    CHECK(max_abs_diff(cached.logp, full.logp) < 1e-5);
  }
}

TEST_CASE("transformer: left and right padding do not change a sequence's log-probs", "[model]") {
  torch::manual_seed(3);
  TransformerPolicy policy(tiny());
  torch::NoGradGuard no_grad;
  const torch::Tensor seq = torch::arange(1, 11, torch::kLong).unsqueeze(0);  // [1, 10]
  const torch::Tensor alone = policy.forward_logp(seq).logp;

  const torch::Tensor other = torch::randint(1, 40, {1, 13}, torch::kLong);
  const torch::Tensor left = torch::cat({torch::cat({torch::zeros({1, 3}, torch::kLong), seq}, 1), other});
  torch::Tensor left_mask = torch::ones({2, 13}, torch::kBool);
  left_mask[0].slice(0, 0, 3) = false;
  // The first valid token has no context either way (its left neighbour is a pad): compare the rest.
  CHECK(max_abs_diff(policy.forward_logp(left, left_mask).logp[0].slice(0, 4), alone[0].slice(0, 1)) < 1e-5);

  const torch::Tensor right = torch::cat({torch::cat({seq, torch::zeros({1, 3}, torch::kLong)}, 1), other});
  torch::Tensor right_mask = torch::ones({2, 13}, torch::kBool);
  right_mask[0].slice(0, 10) = false;
  CHECK(max_abs_diff(policy.forward_logp(right, right_mask).logp[0].slice(0, 0, 10), alone[0]) < 1e-5);
}

TEST_CASE("transformer: logp and entropy are aligned to tokens and zero outside the response mask", "[model]") {
  torch::manual_seed(4);
  TransformerPolicy policy(tiny());
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(0, 40, {3, 12}, torch::kLong);
  const TokenLogp all = policy.forward_logp(tokens);
  CHECK(all.logp.scalar_type() == torch::kFloat);
  CHECK(all.logp.select(1, 0).eq(0).all().item<bool>());  // column 0 has no context
  CHECK(all.logp.slice(1, 1).lt(0).all().item<bool>());
  CHECK(all.entropy.slice(1, 1).gt(0).all().item<bool>());
  CHECK(all.entropy.max().item<double>() <= std::log(40.0) + 1e-5);

  // logp[t] is the log-prob of token t under the logits at t-1.
  const torch::Tensor logits = policy.model()->forward(tokens);
  const double manual = logits[1][4].log_softmax(-1)[tokens[1][5].item<int64_t>()].item<double>();
  CHECK(all.logp[1][5].item<double>() == Approx(manual).margin(1e-6));

  const torch::Tensor response = torch::rand({3, 12}).gt(0.5);
  const TokenLogp masked = policy.forward_logp(tokens, torch::ones({3, 12}, torch::kBool), response);
  CHECK(torch::equal(masked.logp, masked_fill_zero(all.logp, response)));
  CHECK(torch::equal(masked.entropy, masked_fill_zero(all.entropy, response)));
  CHECK_THROWS_WITH(policy.forward_logp(tokens, torch::ones({3, 11}, torch::kBool)), Catch::Contains("attention_mask"));
}

TEST_CASE("transformer: gradients reach every parameter", "[model]") {
  torch::manual_seed(5);
  TransformerPolicy policy(tiny());
  const torch::Tensor tokens = torch::randint(0, 40, {2, 10}, torch::kLong);
  const TokenLogp t = policy.forward_logp(tokens);
  (-(t.logp.sum()) - 0.1 * t.entropy.sum()).backward();
  for (const auto& p : policy.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("transformer: save and load round trip", "[model]") {
  const std::string path = temp_path("roundtrip.pt");
  torch::manual_seed(6);
  TransformerPolicy a(tiny());
  a.save(path);
  torch::manual_seed(7);
  TransformerPolicy b(tiny());
  const torch::Tensor tokens = torch::randint(0, 40, {2, 9}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = a.forward_logp(tokens).logp;
  CHECK(max_abs_diff(b.forward_logp(tokens).logp, expected) > 1e-3);
  const std::vector<torch::Tensor> before = b.parameters();
  b.load(path);
  CHECK(torch::equal(b.forward_logp(tokens).logp, expected));
  CHECK(before.front().is_same(b.parameters().front()));  // an optimizer's references stay valid

  const auto c = TransformerPolicy::from_file(path);
  CHECK(c->options().d_model() == 32);
  CHECK(torch::equal(c->forward_logp(tokens).logp, expected));

  TransformerPolicy half(tiny().dtype(torch::kBFloat16));
  half.load(path);  // an fp32 checkpoint into a bf16 rollout copy
  CHECK(half.parameters().front().scalar_type() == torch::kBFloat16);
  CHECK(max_abs_diff(half.forward_logp(tokens).logp, expected) < 0.1);

  TransformerPolicy wider(tiny().d_model(64));
  CHECK_THROWS_WITH(wider.load(path), Catch::Contains("transformer.d_model = 32"));
  CHECK_THROWS_AS(b.load(temp_path("missing.pt")), Error);
  std::filesystem::remove(path);
}

TEST_CASE("transformer: a tiny model overfits a fixed sequence", "[model]") {
  torch::manual_seed(8);
  TransformerPolicy policy(tiny());
  const torch::Tensor tokens = torch::randint(0, 40, {2, 24}, torch::kLong);
  torch::optim::Adam optimizer(policy.parameters(), torch::optim::AdamOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    optimizer.zero_grad();
    const torch::Tensor loss = -policy.forward_logp(tokens).logp.slice(1, 1).mean();
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(first == Approx(std::log(40.0)).margin(0.3));  // starts near uniform
  CHECK(last < 0.1 * first);
}

TEST_CASE("transformer: bf16 KV-cache rollouts against fp32 training give a small nonzero mismatch", "[model]") {
  const std::string path = temp_path("mismatch.pt");
  torch::manual_seed(9);
  TransformerPolicy trainer(tiny());
  trainer.save(path);
  TransformerPolicy rollout(tiny().dtype(torch::kBFloat16));
  rollout.load(path);

  const auto [prompts, mask] = left_pad({{1, 2, 3, 4, 5, 6}, {7, 8, 9}, {10, 11, 12, 13}}, 0);
  const Rollout r = rollout.generate(prompts, mask, SamplingOptions().max_new(24).rng_seed(3));
  const TokenLogp t = logp_no_grad(trainer, r);
  const torch::Tensor diff = (t.logp - r.logp).abs().masked_select(r.response_mask);
  INFO("bf16 rollout vs fp32 trainer: mean |dlogp| " << diff.mean().item<double>() << ", max "
                                                      << diff.max().item<double>());
  CHECK(diff.max().item<double>() > 1e-4);  // a real mismatch, well above fp32 rounding
  CHECK(diff.mean().item<double>() < 0.05);
  CHECK(diff.max().item<double>() < 0.5);
  std::filesystem::remove(path);
}
