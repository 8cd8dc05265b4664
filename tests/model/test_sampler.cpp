#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "turnrl/core/error.h"
#include "turnrl/model/sampler.h"

using namespace turnrl;

namespace {

// The same next-token logits [V] for every row and step.
class FixedLogits : public NextTokenModel {
 public:
  explicit FixedLogits(torch::Tensor logits) : logits_(std::move(logits)) {}
  torch::Tensor prefill(const torch::Tensor& prompts, const torch::Tensor&) override {
    return logits_.expand({prompts.size(0), logits_.size(0)});
  }
  torch::Tensor extend(const torch::Tensor& token, const torch::Tensor&) override {
    return logits_.expand({token.size(0), logits_.size(0)});
  }

 private:
  torch::Tensor logits_;
};

// Row r emits script[r][step] (one-hot logits); records what it was fed.
class Scripted : public NextTokenModel {
 public:
  Scripted(std::vector<std::vector<int64_t>> script, int64_t vocab) : script_(std::move(script)), vocab_(vocab) {}
  torch::Tensor prefill(const torch::Tensor&, const torch::Tensor&) override { return next(); }
  torch::Tensor extend(const torch::Tensor& token, const torch::Tensor& valid) override {
    fed_valid.push_back(valid.clone());
    fed_token.push_back(token.clone());
    ++step_;
    return next();
  }
  std::vector<torch::Tensor> fed_valid, fed_token;

 private:
  torch::Tensor next() {
    torch::Tensor logits = torch::zeros({int64_t(script_.size()), vocab_});
    for (size_t r = 0; r < script_.size(); ++r) logits[int64_t(r)][script_[r][size_t(step_)]] = 50.0;
    return logits;
  }
  std::vector<std::vector<int64_t>> script_;
  int64_t vocab_;
  int64_t step_ = 0;
};

}  // namespace

TEST_CASE("sampler: left_pad aligns prompts to the right", "[model]") {
  const auto [tokens, mask] = left_pad({{5, 6, 7}, {9}}, 0);
  CHECK(torch::equal(tokens, torch::tensor({5, 6, 7, 0, 0, 9}, torch::kLong).view({2, 3})));
  CHECK(torch::equal(mask, torch::tensor({1, 1, 1, 0, 0, 1}, torch::kLong).view({2, 3}).to(torch::kBool)));
  CHECK_THROWS_WITH(left_pad({{1}, {}}, 0), Catch::Contains("prompt 1 is empty"));
}

TEST_CASE("sampler: options are validated with the field name", "[model]") {
  CHECK_THROWS_WITH(validate(SamplingOptions().max_new(0)), Catch::Contains("max_new_tokens"));
  CHECK_THROWS_WITH(validate(SamplingOptions().temp(-1)), Catch::Contains("temperature"));
  CHECK_THROWS_WITH(validate(SamplingOptions().topk(-2)), Catch::Contains("top_k"));
  CHECK_THROWS_WITH(validate(SamplingOptions().topp(0)), Catch::Contains("top_p"));
  CHECK_THROWS_WITH(validate(SamplingOptions().topp(1.5)), Catch::Contains("top_p"));
  CHECK_NOTHROW(validate(SamplingOptions().temp(0).topk(3).topp(0.5)));
}

TEST_CASE("sampler: temperature, top-k and top-p shape the sampling distribution", "[model]") {
  const torch::Tensor logits = torch::tensor({2.0, 1.0, 0.5, 0.0, -1.0}).unsqueeze(0);
  const auto probs = [&](const SamplingOptions& o) { return sampling_log_probs(logits, o).exp().squeeze(0); };

  CHECK(torch::allclose(probs(SamplingOptions()), logits.softmax(-1).squeeze(0)));
  CHECK(torch::allclose(probs(SamplingOptions().temp(0.5)), (logits / 0.5).softmax(-1).squeeze(0)));

  const torch::Tensor k2 = probs(SamplingOptions().topk(2));
  CHECK(k2[2].item<float>() == 0);
  CHECK(k2[4].item<float>() == 0);
  CHECK(k2[0].item<double>() == Approx(std::exp(2.0) / (std::exp(2.0) + std::exp(1.0))).epsilon(1e-6));

  // softmax = [.559, .206, .125, .076, .028]: the nucleus of p = 0.7 is the first two tokens
  // (mass before the third is 0.765 >= 0.7); p = 0.5 keeps only the first.
  const torch::Tensor p7 = probs(SamplingOptions().topp(0.7));
  CHECK(p7[0].item<float>() > 0);
  CHECK(p7[1].item<float>() > 0);
  CHECK(p7.slice(0, 2).sum().item<float>() == 0);
  CHECK(p7.sum().item<double>() == Approx(1.0).epsilon(1e-6));
  CHECK(probs(SamplingOptions().topp(0.5))[0].item<double>() == Approx(1.0).epsilon(1e-6));
  // top-k and top-p combine: k = 3 then p = 0.95 of the renormalised three.
  const torch::Tensor both = probs(SamplingOptions().topk(3).topp(0.95));
  CHECK(both.slice(0, 0, 3).gt(0).all().item<bool>());
  CHECK(both.slice(0, 0, 3).sum().item<double>() == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("sampler: seeded samples follow the distribution and record its log-probs", "[model]") {
  const torch::Tensor logits = torch::tensor({1.0, 0.0, 2.0, -1.0, 0.5});
  FixedLogits model(logits);
  const int64_t rows = 20000;
  const torch::Tensor prompts = torch::zeros({rows, 1}, torch::kLong);
  const SamplingOptions o = SamplingOptions().max_new(1).rng_seed(7);
  const Rollout r = sample(model, prompts, {}, o);
  const torch::Tensor sampled = r.tokens.select(1, 1);
  const torch::Tensor expected = logits.softmax(-1);
  const torch::Tensor counts = torch::bincount(sampled, {}, 5).to(torch::kDouble) / rows;
  for (int64_t v = 0; v < 5; ++v) CHECK(counts[v].item<double>() == Approx(expected[v].item<double>()).margin(0.015));
  CHECK(torch::allclose(r.logp.select(1, 1), logits.log_softmax(-1).index_select(0, sampled)));
  // Same seed, same rollout; another seed, another one.
  CHECK(torch::equal(sample(model, prompts, {}, o).tokens, r.tokens));
  CHECK_FALSE(torch::equal(sample(model, prompts, {}, SamplingOptions(o).rng_seed(8)).tokens, r.tokens));

  // Top-k: never outside the k most likely, and the logp is under the renormalised distribution.
  const Rollout k = sample(model, prompts.slice(0, 0, 2000), {}, SamplingOptions(o).topk(2));
  const torch::Tensor ks = k.tokens.select(1, 1);
  CHECK(ks.eq(2).logical_or(ks.eq(0)).all().item<bool>());
  const double p2 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));
  CHECK(k.logp.select(1, 1).masked_select(ks.eq(2)).sub(std::log(p2)).abs().max().item<double>() < 1e-5);
  // Greedy records the model's own log-prob.
  const Rollout g = sample(model, prompts.slice(0, 0, 3), {}, SamplingOptions(o).temp(0));
  CHECK(g.tokens.select(1, 1).eq(2).all().item<bool>());
  CHECK(g.logp[0][1].item<double>() == Approx(logits.log_softmax(-1)[2].item<double>()));
}

TEST_CASE("sampler: stop tokens end rows, pad after, and end the loop when all rows stopped", "[model]") {
  const int64_t stop = 9, pad = 7;
  Scripted model({{1, 2, stop, 3, 3, 3}, {4, stop, 5, 5, 5, 5}, {1, 1, 1, 1, 1, 1}}, 10);
  const auto [prompts, prompt_mask] = left_pad({{3, 3}, {3}, {3, 3}}, pad);
  const Rollout r = sample(model, prompts, prompt_mask, SamplingOptions().max_new(4).stop({stop}).pad(pad).temp(0));
  REQUIRE(r.prompt_length == 2);
  REQUIRE(r.tokens.size(1) == 6);  // row 2 never stops: max_new_tokens = 4
  const auto tensor = [](std::vector<int64_t> v) { return torch::tensor(v, torch::kLong).view({3, -1}); };
  CHECK(torch::equal(r.tokens.slice(1, 2), tensor({1, 2, stop, pad, 4, stop, pad, pad, 1, 1, 1, 1})));
  CHECK(torch::equal(r.response_mask.to(torch::kLong), tensor({0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1})));
  CHECK(torch::equal(r.attention_mask.to(torch::kLong), tensor({1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1})));
  CHECK(torch::equal(r.num_generated, torch::tensor({3, 2, 4}, torch::kLong)));
  CHECK(r.logp.masked_select(r.response_mask.logical_not()).eq(0).all().item<bool>());
  CHECK(r.logp.masked_select(r.response_mask).abs().max().item<double>() < 1e-6);  // near-one-hot logits
  // Tokens after a stop are fed as invalid: the model can mask them.
  REQUIRE(model.fed_valid.size() == 3);
  CHECK(torch::equal(model.fed_valid[2].to(torch::kLong), torch::tensor({1, 0, 1}, torch::kLong)));  // row 0 feeds its stop token

  Scripted all_stop({{stop, 1, 1}, {2, stop, 1}}, 10);
  const Rollout s = sample(all_stop, torch::zeros({2, 1}, torch::kLong), {}, SamplingOptions().max_new(50).stop({stop}).temp(0));
  CHECK(s.tokens.size(1) == 3);  // stopped after 2 steps, not 50
}

namespace {

// The first index whose float64 running sum reaches u * total and whose probability is positive;
// `margin` gets the distance from the target to the nearest running sum at a token boundary.
int64_t scalar_inverse_cdf(const std::vector<double>& p, double u, double& margin) {
  double total = 0;
  for (double v : p) total += v;
  const double target = u * total;
  double running = 0;
  margin = std::numeric_limits<double>::infinity();
  int64_t found = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    running += p[i];
    margin = std::min(margin, std::abs(running - target));
    if (found < 0 && p[i] > 0 && running >= target) found = int64_t(i);
  }
  if (found < 0)  // rounding put the target past the total: the last positive token
    for (size_t i = p.size(); i-- > 0;)
      if (p[i] > 0) return int64_t(i);
  return found;
}

}  // namespace

TEST_CASE("sampler: the two-level inverse CDF draws the token a float64 scan of the row draws", "[model]") {
  // Vocabularies below, at and around the chunk size, several chunks with a short tail, and
  // Qwen's; rows with zero-probability runs (top-k / top-p cut), a one-hot row, mass only in the
  // tail chunk, and uniforms at the ends of (0, 1].
  torch::manual_seed(3);
  const int64_t chunk = kInverseCdfChunk;
  for (const int64_t vocab : {int64_t(1), int64_t(7), chunk - 1, chunk, chunk + 1, 5 * chunk + 17, int64_t(151936)}) {
    INFO("vocab " << vocab);
    const int64_t rows = 8;
    torch::Tensor probs = torch::randn({rows, vocab}).mul(3).softmax(-1);
    if (vocab > 3) {
      probs[1].narrow(0, 0, vocab / 2).zero_();                // leading zeros
      probs[2].zero_(), probs[2][vocab / 3] = 1.0;              // one-hot
      probs[3].narrow(0, 0, vocab - 1).zero_();                 // all mass on the last token
      probs[4].masked_fill_(torch::rand({vocab}).lt(0.7), 0);   // scattered zeros
      probs[4][0] = 0.25;
    }
    const std::vector<double> uniforms = {1.0, std::ldexp(1.0, -53), 0.5, 0.999999, 0.25, 0.75, 1e-3, 0.6180339887};
    const torch::Tensor got = inverse_cdf(probs, torch::tensor(uniforms, torch::kDouble));
    REQUIRE(got.sizes() == torch::IntArrayRef({rows}));
    for (int64_t r = 0; r < rows; ++r) {
      INFO("row " << r << " u " << uniforms[size_t(r)]);
      const torch::Tensor row = probs[r].to(torch::kDouble).contiguous();
      const std::vector<double> p(row.data_ptr<double>(), row.data_ptr<double>() + vocab);
      double margin = 0;
      const int64_t want = scalar_inverse_cdf(p, uniforms[size_t(r)], margin);
      const int64_t token = got[r].item<int64_t>();
      REQUIRE(token >= 0);
      REQUIRE(token < vocab);
      CHECK(p[size_t(token)] > 0);  // never a token the filters removed
      // The same token, unless float32 rounding put the target on a boundary of the running sum.
      if (margin > 1e-5) CHECK(token == want);
    }
  }
  // Unnormalised rows: u of the row's own total.
  const torch::Tensor weights = torch::tensor({{0.0, 2.0, 0.0, 2.0}, {4.0, 0.0, 0.0, 0.0}});
  const torch::Tensor drawn = inverse_cdf(weights, torch::tensor({0.75, 1.0}, torch::kDouble));
  CHECK(drawn[0].item<int64_t>() == 3);
  CHECK(drawn[1].item<int64_t>() == 0);
}
