#include <catch2/catch.hpp>

#include <torch/csrc/autograd/autograd.h>

#include "model/hf_fixtures.h"
#include "turnrl/model/hf_policy.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

// Gradients of a fixed weighted sum of forward_logp's outputs over a right-padded batch.
std::vector<torch::Tensor> policy_gradients(HFPolicy& policy, bool checkpointing) {
  policy.model()->set_activation_checkpointing(checkpointing);
  torch::manual_seed(21);
  const torch::Tensor tokens = torch::randint(policy.config().vocab_size, {2, 9}, torch::kLong);
  torch::Tensor attention = torch::ones({2, 9}, torch::kBool);
  attention[1].slice(0, 6).fill_(false);
  const torch::Tensor response = attention & (torch::arange(9) >= 3).unsqueeze(0);
  const torch::Tensor a = torch::randn({2, 9}), b = torch::randn({2, 9});
  const TokenLogp t = policy.forward_logp(tokens, attention, response);
  return torch::autograd::grad({(t.logp * a).sum() + (t.entropy * b).sum()}, policy.parameters());
}


}  // namespace

TEST_CASE("activation checkpointing: gradients equal the plain path, full fine-tuning", "[model]") {
  for (const std::string& family : hf_families()) {
    INFO(family);
    auto policy = load_fixture(family);
    const std::vector<torch::Tensor> plain = policy_gradients(*policy, false);
    const std::vector<torch::Tensor> checkpointed = policy_gradients(*policy, true);
    REQUIRE(checkpointed.size() == plain.size());
    CHECK(worst_relative_difference(checkpointed, plain) < 1e-6);
    double total = 0;
    for (const auto& g : plain) total += g.abs().sum().item<double>();
    CHECK(total > 0);  // a gradient that is all zeros would pass trivially
  }
}

TEST_CASE("activation checkpointing: LoRA adapters over a frozen embedding get their gradients", "[model]") {
  auto policy = load_fixture("qwen3", torch::kFloat, LoraOptions().rank(4).alpha(8));
  // peft initialises lora_B to 0, which makes lora_A's gradient 0: give B values first.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : policy->parameters()) p.normal_(0, 0.05);
  }
  const std::vector<torch::Tensor> plain = policy_gradients(*policy, false);
  const std::vector<torch::Tensor> checkpointed = policy_gradients(*policy, true);
  CHECK(worst_relative_difference(checkpointed, plain) < 1e-6);
  for (const auto& g : checkpointed) CHECK(g.abs().sum().item<double>() > 0);
}

TEST_CASE("activation checkpointing: no effect without autograd or with a KV cache", "[model]") {
  auto policy = load_fixture("llama");
  const std::vector<int64_t> prompt = read_hf_reference("llama").prompts[0];
  torch::Tensor plain;
  {
    torch::NoGradGuard no_grad;
    plain = policy->model()->forward(row(prompt));
    policy->model()->set_activation_checkpointing(true);
    CHECK(torch::equal(policy->model()->forward(row(prompt)), plain));
  }
  const Rollout r = policy->generate(row(prompt), torch::ones({1, int64_t(prompt.size())}, torch::kBool),
                                     SamplingOptions().max_new(4).temp(0));
  CHECK(r.tokens.size(1) == int64_t(prompt.size()) + 4);
}
