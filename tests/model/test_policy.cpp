#include <catch2/catch.hpp>

#include <filesystem>

#include <torch/nn/modules/embedding.h>
#include <torch/optim/adam.h>
#include <torch/script.h>
#include <unistd.h>

#include "turnrl/core/error.h"
#include "turnrl/model/policy.h"
#include "turnrl/model/torchscript_policy.h"

using namespace turnrl;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("turnrl_policy_" + std::to_string(getpid()) + "_" + name)).string();
}

// A user's model: a bigram table, logits of the next token from the current one.
struct BigramImpl : torch::nn::Module {
  explicit BigramImpl(int64_t vocab) : table(register_module("table", torch::nn::Embedding(vocab, vocab))) {}
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& /*attention_mask*/) { return table(tokens); }
  torch::nn::Embedding table;
};
TORCH_MODULE(Bigram);

// The log-prob of each token under a bigram table, by hand.
torch::Tensor bigram_logp(const torch::Tensor& table, const torch::Tensor& tokens) {
  torch::Tensor out = torch::zeros(tokens.sizes());
  for (int64_t b = 0; b < tokens.size(0); ++b)
    for (int64_t t = 1; t < tokens.size(1); ++t)
      out[b][t] = table[tokens[b][t - 1].item<int64_t>()].log_softmax(0)[tokens[b][t].item<int64_t>()];
  return out;
}

// Mean negative log-likelihood after `steps` Adam steps on a fixed batch.
double train(Policy& policy, const torch::Tensor& tokens, int steps) {
  torch::optim::Adam optimizer(policy.parameters(), torch::optim::AdamOptions(0.1));
  double loss_value = 0;
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    const torch::Tensor loss = -policy.forward_logp(tokens).logp.slice(1, 1).mean();
    loss.backward();
    optimizer.step();
    loss_value = loss.item<double>();
  }
  return loss_value;
}

}  // namespace

TEST_CASE("policy: token_logp_from_logits aligns position t-1's prediction with token t", "[model]") {
  const torch::Tensor logits = torch::randn({2, 4, 6});
  const torch::Tensor tokens = torch::randint(0, 6, {2, 4}, torch::kLong);
  const TokenLogp t = token_logp_from_logits(logits, tokens);
  CHECK(t.logp[1][3].item<double>() == Approx(logits[1][2].log_softmax(0)[tokens[1][3].item<int64_t>()].item<double>()));
  const torch::Tensor p = logits[0][1].softmax(0);
  CHECK(t.entropy[0][2].item<double>() == Approx(-(p * p.log()).sum().item<double>()));
  CHECK(t.logp.select(1, 0).eq(0).all().item<bool>());
  CHECK(token_logp_from_logits(logits.slice(1, 0, 1), tokens.slice(1, 0, 1)).logp.eq(0).all().item<bool>());
  CHECK_THROWS_AS(token_logp_from_logits(logits, tokens.slice(1, 0, 3)), Error);
  CHECK(torch::equal(positions_from_mask(torch::tensor({0, 0, 1, 1, 0, 1}).view({1, 6}).to(torch::kBool)),
                     torch::tensor({0, 0, 0, 1, 1, 2}, torch::kLong).view({1, 6})));
}

TEST_CASE("policy: ModulePolicy adapts a user's torch::nn::Module", "[model]") {
  torch::manual_seed(0);
  Bigram lm(7);
  ModulePolicy policy = ModulePolicy::wrap(lm.ptr());
  const torch::Tensor tokens = torch::randint(0, 7, {3, 8}, torch::kLong);
  {
    torch::NoGradGuard no_grad;
    CHECK(torch::allclose(policy.forward_logp(tokens).logp, bigram_logp(lm->table->weight, tokens), 1e-5, 1e-6));
  }
  CHECK(policy.parameters().size() == 1);
  CHECK(policy.device() == torch::Device(torch::kCPU));

  // Rollouts record the same log-probs the trainer recomputes.
  const auto [prompts, mask] = left_pad({{1, 2}, {3}}, 0);
  const Rollout r = policy.generate(prompts, mask, SamplingOptions().max_new(10).rng_seed(4).stop({6}));
  torch::Tensor recomputed;
  {
    torch::NoGradGuard no_grad;
    recomputed = policy.forward_logp(r.tokens, r.attention_mask, r.response_mask).logp;
  }
  CHECK((recomputed - r.logp).abs().max().item<double>() < 1e-5);

  // Save, train (changes the weights), load: back to the saved model.
  const std::string path = temp_path("bigram.pt");
  policy.save(path);
  const torch::Tensor saved = lm->table->weight.detach().clone();
  const double start = -policy.forward_logp(tokens).logp.slice(1, 1).mean().item<double>();
  CHECK(train(policy, tokens, 30) < 0.7 * start);
  CHECK_FALSE(torch::equal(lm->table->weight, saved));
  policy.load(path);
  CHECK(torch::equal(lm->table->weight, saved));
  std::filesystem::remove(path);
}

TEST_CASE("policy: TorchScriptPolicy loads, trains, samples and saves a TorchScript module", "[model]") {
  // The same kind of file torch.jit.script(model).save(path) writes in Python.
  const int64_t vocab = 9;
  torch::manual_seed(1);
  const torch::Tensor table = torch::randn({vocab, vocab});
  const std::string path = temp_path("scripted.pt");
  {
    torch::jit::Module m("TinyLM");
    m.register_parameter("table", table.clone().requires_grad_(true), false);
    m.define(R"(
      def forward(self, tokens: Tensor, attention_mask: Tensor) -> Tensor:
          return torch.embedding(self.table, tokens)
    )");
    m.save(path);
  }
  TorchScriptPolicy policy(path);
  const torch::Tensor tokens = torch::randint(0, vocab, {2, 7}, torch::kLong);
  {
    torch::NoGradGuard no_grad;
    CHECK(torch::allclose(policy.forward_logp(tokens).logp, bigram_logp(table, tokens), 1e-5, 1e-6));
  }
  REQUIRE(policy.parameters().size() == 1);
  CHECK(policy.parameters().front().requires_grad());

  const auto [prompts, mask] = left_pad({{1, 2, 3}, {4}}, 0);
  const Rollout r = policy.generate(prompts, mask, SamplingOptions().max_new(6).rng_seed(2));
  CHECK(r.tokens.size(1) == 9);
  {
    torch::NoGradGuard no_grad;
    CHECK((policy.forward_logp(r.tokens, r.attention_mask, r.response_mask).logp - r.logp).abs().max().item<double>() <
          1e-5);
  }

  const double start = -policy.forward_logp(tokens).logp.slice(1, 1).mean().item<double>();
  CHECK(train(policy, tokens, 30) < 0.7 * start);
  const std::string trained = temp_path("scripted_trained.pt");
  policy.save(trained);
  TorchScriptPolicy reloaded(trained);
  CHECK(torch::equal(reloaded.parameters().front(), policy.parameters().front()));
  const torch::Tensor param = policy.parameters().front();
  policy.load(path);  // back to the original weights, in the same tensor
  CHECK(torch::equal(param, table));

  CHECK_THROWS_WITH(TorchScriptPolicy(temp_path("missing.pt")), Catch::Contains("missing.pt"));
  std::filesystem::remove(path);
  std::filesystem::remove(trained);
}
