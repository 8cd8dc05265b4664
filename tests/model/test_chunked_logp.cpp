#include <catch2/catch.hpp>

#include <torch/csrc/autograd/autograd.h>

#include "model/hf_fixtures.h"
#include "turnrl/core/error.h"
#include "turnrl/model/chunked_logp.h"
#include "turnrl/model/hf_policy.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

// The unchunked reference: the whole [K, V] logits (divided by the temperature), log_softmax in
// float32, plain autograd.
RowLogp whole_logp_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                           double temperature = 1.0) {
  const torch::Tensor log_probs = (torch::matmul(hidden, weight.t()).to(torch::kFloat) / temperature).log_softmax(-1);
  return {log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)};
}

struct Grads {
  torch::Tensor logp, entropy, hidden, weight;
};

// Values and the gradients of Σ a·logp + Σ b·entropy (a, b fixed random) with respect to hidden
// and weight, for one implementation.
template <typename F>
Grads run(F&& f, const torch::Tensor& hidden0, const torch::Tensor& weight0, const torch::Tensor& targets,
          const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor hidden = hidden0.detach().clone().requires_grad_(true);
  const torch::Tensor weight = weight0.detach().clone().requires_grad_(true);
  const RowLogp out = f(hidden, weight, targets);
  Grads g{out.logp.detach(), out.entropy.detach(), {}, {}};
  if (hidden.size(0) == 0) return g;
  const auto found = torch::autograd::grad({(out.logp * a).sum() + (out.entropy * b).sum()}, {hidden, weight});
  g.hidden = found[0];
  g.weight = found[1];
  return g;
}

double relative_error(const torch::Tensor& x, const torch::Tensor& reference) {
  return ((x.to(torch::kDouble) - reference.to(torch::kDouble)).abs().max() /
          reference.to(torch::kDouble).abs().max().clamp_min(1e-30))
      .item<double>();
}

}  // namespace

TEST_CASE("chunked_logp: values and gradients equal the whole-logits computation in float32", "[model]") {
  torch::manual_seed(11);
  const int64_t vocab = 37, width = 8;
  const torch::Tensor weight = torch::randn({vocab, width});
  for (const int64_t rows : {1, 7, 16}) {
    const torch::Tensor hidden = torch::randn({rows, width}) * 2;
    const torch::Tensor targets = torch::randint(vocab, {rows}, torch::kLong);
    const torch::Tensor a = torch::randn({rows}), b = torch::randn({rows});
    const Grads reference = run([](auto&& h, auto&& w, auto&& t) { return whole_logp_entropy(h, w, t); }, hidden, weight, targets, a, b);
    // 3 does not divide 7 or 16; 1 is one row per chunk; 64 is one chunk larger than the rows.
    for (const int64_t chunk : {1, 3, 4, 64}) {
      INFO("rows " << rows << ", chunk " << chunk);
      const Grads chunked = run([chunk](auto&& h, auto&& w, auto&& t) { return chunked_logp_entropy(h, w, t, chunk); },
                                hidden, weight, targets, a, b);
      CHECK(max_abs_diff(chunked.logp, reference.logp) < 1e-5);
      CHECK(max_abs_diff(chunked.entropy, reference.entropy) < 1e-5);
      CHECK(max_abs_diff(chunked.hidden, reference.hidden) < 1e-5);
      CHECK(max_abs_diff(chunked.weight, reference.weight) < 1e-5);
    }
  }
}

TEST_CASE("chunked_logp: scalar checks on a two-token vocabulary", "[model]") {
  // Logits (0, ln 3): p = (1/4, 3/4); logp of token 1 = ln 0.75; entropy = -(¼ ln ¼ + ¾ ln ¾).
  const torch::Tensor weight = torch::tensor({0.0f, 1.0f}).view({2, 1});
  const torch::Tensor hidden = torch::full({1, 1}, std::log(3.0f), torch::kFloat).requires_grad_(true);
  const RowLogp out = chunked_logp_entropy(hidden, weight, torch::tensor({int64_t(1)}), 1);
  CHECK(out.logp.item<double>() == Approx(std::log(0.75)).margin(1e-6));
  CHECK(out.entropy.item<double>() == Approx(-(0.25 * std::log(0.25) + 0.75 * std::log(0.75))).margin(1e-6));
  // d logp / d z = onehot - p = (-1/4, 1/4); d z / d h = weight = (0, 1), so d logp / d h = 1/4.
  out.logp.sum().backward();
  CHECK(hidden.grad().item<double>() == Approx(0.25).margin(1e-6));
}

TEST_CASE("chunked_logp: at a temperature, values and gradients of logits / temperature", "[model]") {
  // Logits (0, ln 3) at temperature 1/2 are (0, ln 9): p = (1/10, 9/10); logp of token 1 = ln 0.9;
  // d logp / d h = (onehot - p) / temperature · weight = 0.1 · 2 · 1 = 0.2.
  const torch::Tensor weight = torch::tensor({0.0f, 1.0f}).view({2, 1});
  const torch::Tensor hidden = torch::full({1, 1}, std::log(3.0f), torch::kFloat).requires_grad_(true);
  const RowLogp out = chunked_logp_entropy(hidden, weight, torch::tensor({int64_t(1)}), 1, false, 0.5);
  CHECK(out.logp.item<double>() == Approx(std::log(0.9)).margin(1e-6));
  CHECK(out.entropy.item<double>() == Approx(-(0.1 * std::log(0.1) + 0.9 * std::log(0.9))).margin(1e-6));
  out.logp.sum().backward();
  CHECK(hidden.grad().item<double>() == Approx(0.2).margin(1e-6));

  torch::manual_seed(15);
  const torch::Tensor w = torch::randn({37, 8}), h = torch::randn({7, 8}) * 2;
  const torch::Tensor targets = torch::randint(37, {7}, torch::kLong), a = torch::randn({7}), b = torch::randn({7});
  for (const double temperature : {0.3, 0.7, 1.6}) {
    INFO("temperature " << temperature);
    const Grads reference = run([temperature](auto&& hh, auto&& ww, auto&& t) { return whole_logp_entropy(hh, ww, t, temperature); },
                                h, w, targets, a, b);
    const Grads chunked = run([temperature](auto&& hh, auto&& ww, auto&& t) {
      return chunked_logp_entropy(hh, ww, t, 3, false, temperature);
    }, h, w, targets, a, b);
    CHECK(max_abs_diff(chunked.logp, reference.logp) < 1e-5);
    CHECK(max_abs_diff(chunked.entropy, reference.entropy) < 1e-5);
    CHECK(max_abs_diff(chunked.hidden, reference.hidden) < 1e-5);
    CHECK(max_abs_diff(chunked.weight, reference.weight) < 1e-5);
  }
  for (const double bad : {0.0, -1.0, std::nan("")})
    CHECK_THROWS_WITH(chunked_logp_entropy(h, w, targets, 3, false, bad), Catch::Contains("finite and > 0"));
}

TEST_CASE("chunked_logp: only logp differentiated, and no rows at all", "[model]") {
  torch::manual_seed(12);
  const torch::Tensor weight = torch::randn({11, 4}), hidden = torch::randn({5, 4});
  const torch::Tensor targets = torch::randint(11, {5}, torch::kLong), a = torch::randn({5});
  const Grads reference = run([](auto&& h, auto&& w, auto&& t) { return whole_logp_entropy(h, w, t); }, hidden, weight, targets, a, torch::zeros({5}));
  const torch::Tensor h = hidden.clone().requires_grad_(true);
  chunked_logp_entropy(h, weight, targets, 2).logp.mul(a).sum().backward();  // entropy's gradient undefined
  CHECK(max_abs_diff(h.grad(), reference.hidden) < 1e-5);

  const RowLogp empty = chunked_logp_entropy(torch::zeros({0, 4}), weight, torch::zeros({0}, torch::kLong), 3);
  CHECK(empty.logp.numel() == 0);
  CHECK(empty.entropy.numel() == 0);
}

TEST_CASE("chunked_logp: bfloat16 hidden and weight give the whole-logits result", "[model]") {
  torch::manual_seed(13);
  const torch::Tensor weight = torch::randn({50, 16}).to(torch::kBFloat16), hidden = torch::randn({9, 16}).to(torch::kBFloat16);
  const torch::Tensor targets = torch::randint(50, {9}, torch::kLong), a = torch::randn({9}), b = torch::randn({9});
  const Grads reference = run([](auto&& h, auto&& w, auto&& t) { return whole_logp_entropy(h, w, t); }, hidden, weight, targets, a, b);
  const Grads chunked = run([](auto&& h, auto&& w, auto&& t) { return chunked_logp_entropy(h, w, t, 4); }, hidden,
                            weight, targets, a, b);
  CHECK(chunked.logp.scalar_type() == torch::kFloat);
  CHECK(max_abs_diff(chunked.logp, reference.logp) < 1e-5);  // same bf16 logits, float32 softmax
  CHECK(max_abs_diff(chunked.entropy, reference.entropy) < 1e-5);
  CHECK(chunked.hidden.scalar_type() == torch::kBFloat16);
  // bf16 matmuls: the same products, rounded once more where chunks add up (weight).
  CHECK(relative_error(chunked.hidden, reference.hidden) < 1e-2);
  CHECK(relative_error(chunked.weight, reference.weight) < 1e-2);
}

TEST_CASE("chunked_logp: bad arguments are errors naming what is wrong", "[model]") {
  const torch::Tensor weight = torch::randn({5, 3}), hidden = torch::randn({2, 3}), targets = torch::zeros({2}, torch::kLong);
  CHECK_THROWS_WITH(chunked_logp_entropy(hidden, weight, targets, 0), Catch::Contains("model.logp_chunk_size: 0"));
  CHECK_THROWS_WITH(chunked_logp_entropy(torch::randn({2, 4}), weight, targets, 1), Catch::Contains("[K, H]"));
  CHECK_THROWS_WITH(chunked_logp_entropy(hidden, weight, targets.narrow(0, 0, 1), 1), Catch::Contains("targets"));
  CHECK_THROWS_WITH(chunked_logp_entropy(hidden.to(torch::kDouble), weight, targets, 1), Catch::Contains("must match"));
}

TEST_CASE("chunked_logp: HFPolicy::forward_logp equals log-probs of the full logits, values and gradients", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family);
    const int64_t vocab = policy->config().vocab_size;
    torch::manual_seed(14);
    const torch::Tensor tokens = torch::randint(vocab, {3, 10}, torch::kLong);
    torch::Tensor response = torch::rand({3, 10}) < 0.6;
    response[2].fill_(false);  // a row with nothing to score
    response[1].fill_(false);
    response[1][9] = true;  // a row with one position
    const torch::Tensor a = torch::randn({3, 10}), b = torch::randn({3, 10});
    const auto objective = [&](const TokenLogp& t) { return (t.logp * a).sum() + (t.entropy * b).sum(); };
    const std::vector<torch::Tensor> params = policy->parameters();

    const TokenLogp whole = token_logp_from_logits(policy->model()->forward(tokens), tokens, response);
    const auto reference = torch::autograd::grad({objective(whole)}, params);
    for (const int64_t chunk : {1, 4, 1024}) {
      INFO("chunk " << chunk);
      policy->set_logp_chunk_size(chunk);
      const TokenLogp chunked = policy->forward_logp(tokens, {}, response);
      CHECK(max_abs_diff(chunked.logp, whole.logp) < 1e-5);
      CHECK(max_abs_diff(chunked.entropy, whole.entropy) < 1e-5);
      CHECK(chunked.logp.slice(1, 0, 1).eq(0).all().item<bool>());
      CHECK(chunked.logp[2].eq(0).all().item<bool>());
      const auto found = torch::autograd::grad({objective(chunked)}, params);
      double worst = 0;
      for (size_t i = 0; i < params.size(); ++i) worst = std::max(worst, max_abs_diff(found[i], reference[i]));
      CHECK(worst < 1e-5);
    }
    // No response mask: every position but column 0, as token_logp_from_logits without one.
    const TokenLogp all = policy->forward_logp(tokens);
    const TokenLogp all_reference = token_logp_from_logits(policy->model()->forward(tokens), tokens);
    CHECK(max_abs_diff(all.logp, all_reference.logp) < 1e-5);
    CHECK(max_abs_diff(all.entropy, all_reference.entropy) < 1e-5);
    // Nothing to score: zeros, no error.
    const TokenLogp none = policy->forward_logp(tokens, {}, torch::zeros({3, 10}, torch::kBool));
    CHECK(none.logp.eq(0).all().item<bool>());
    // At a sampling temperature: the log-softmax of logits / temperature.
    policy->set_logp_temperature(0.7);
    const TokenLogp warm = policy->forward_logp(tokens, {}, response);
    const torch::Tensor scaled = (policy->model()->forward(tokens) / 0.7).log_softmax(-1);
    const torch::Tensor expected =
        scaled.narrow(1, 0, 9).gather(-1, tokens.narrow(1, 1, 9).unsqueeze(-1)).squeeze(-1).masked_fill(
            ~response.narrow(1, 1, 9), 0);
    CHECK(max_abs_diff(warm.logp.narrow(1, 1, 9), expected) < 1e-5);
    CHECK(max_abs_diff(warm.logp, token_logp_from_logits(policy->model()->forward(tokens), tokens, response, 0.7).logp) <
          1e-5);
  }
}

TEST_CASE("chunked_logp: model.logp_chunk_size below 1 is refused", "[model]") {
  auto policy = load_fixture("qwen3");
  CHECK_THROWS_WITH(policy->set_logp_chunk_size(0), Catch::Contains("model.logp_chunk_size: 0"));
  CHECK_THROWS_WITH(load_hf_policy(HFModelOptions().path(hf_fixture("qwen3")).logp_chunk_size(-2)),
                    Catch::Contains("model.logp_chunk_size: -2"));
}

TEST_CASE("chunked_logp: HFPolicy::forward_logp in bfloat16 equals log-probs of its full bf16 logits", "[model]") {
  auto policy = load_fixture("qwen3", torch::kBFloat16);
  torch::manual_seed(15);
  const torch::Tensor tokens = torch::randint(policy->config().vocab_size, {2, 12}, torch::kLong);
  const torch::Tensor response = torch::rand({2, 12}) < 0.5;
  policy->set_logp_chunk_size(5);
  const TokenLogp whole = token_logp_from_logits(policy->model()->forward(tokens), tokens, response);
  const TokenLogp chunked = policy->forward_logp(tokens, {}, response);
  CHECK(chunked.logp.scalar_type() == torch::kFloat);
  // The same bf16 hidden states and bf16 logits (the projection of the selected rows rounds as the
  // full projection does), then the same float32 log-softmax.
  CHECK(max_abs_diff(chunked.logp, whole.logp) < 1e-5);
  CHECK(max_abs_diff(chunked.entropy, whole.entropy) < 1e-5);
  CHECK(whole.logp.abs().sum().item<double>() > 1.0);
}
