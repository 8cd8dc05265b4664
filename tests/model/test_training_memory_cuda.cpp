// Chunked log-probs and activation checkpointing on the GPU (tiny HF fixtures): the same values
// and gradients as full-vocabulary logits and the plain layer loop, in float32 (cuBLAS and SDPA
// may sum in another order than for the full batch: 1e-4) and in bf16 (logits rounded to bf16).
#include <catch2/catch.hpp>

#include <torch/csrc/autograd/autograd.h>

#include "model/hf_fixtures.h"
#include "turnrl/model/hf_policy.h"

using namespace turnrl;
using namespace turnrl::test;

namespace {

struct Outcome {
  TokenLogp values;
  std::vector<torch::Tensor> grads;
};

// forward_logp (or the full-logits path) and the gradients of a fixed weighted sum of its outputs.
Outcome run(HFPolicy& policy, const torch::Tensor& tokens, const torch::Tensor& response, bool full_logits) {
  torch::manual_seed(41);
  const torch::Tensor a = torch::randn(tokens.sizes()).to(tokens.device()),
                      b = torch::randn(tokens.sizes()).to(tokens.device());
  Outcome out;
  out.values = full_logits ? token_logp_from_logits(policy.model()->forward(tokens), tokens, response)
                           : policy.forward_logp(tokens, {}, response);
  out.grads = torch::autograd::grad({(out.values.logp * a).sum() + (out.values.entropy * b).sum()}, policy.parameters());
  return out;
}


}  // namespace

TEST_CASE("training memory on the GPU: chunked log-probs and checkpointing keep values and gradients", "[model][cuda]") {
  if (!at::hasCUDA()) {
    WARN("needs a GPU: skipped");
    return;
  }
  for (const torch::Dtype dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO(c10::toString(dtype));
    auto policy = load_hf_policy(HFModelOptions().path(hf_fixture("qwen3")).dtype(dtype).device(torch::kCUDA));
    policy->set_logp_chunk_size(7);
    torch::manual_seed(42);
    const torch::Tensor tokens = torch::randint(policy->config().vocab_size, {3, 24}, torch::kLong).to(torch::kCUDA);
    const torch::Tensor response = (torch::rand({3, 24}) < 0.6).to(torch::kCUDA);
    const Outcome full = run(*policy, tokens, response, true);
    const Outcome chunked = run(*policy, tokens, response, false);
    policy->model()->set_activation_checkpointing(true);
    const Outcome checkpointed = run(*policy, tokens, response, false);
    const double values_tolerance = dtype == torch::kFloat ? 1e-4 : 5e-2;
    const double grads_tolerance = dtype == torch::kFloat ? 1e-4 : 5e-2;
    CHECK(max_abs_diff(chunked.values.logp.cpu(), full.values.logp.cpu()) < values_tolerance);
    CHECK(max_abs_diff(chunked.values.entropy.cpu(), full.values.entropy.cpu()) < values_tolerance);
    CHECK(worst_relative_difference(chunked.grads, full.grads) < grads_tolerance);
    CHECK(worst_relative_difference(checkpointed.grads, chunked.grads) < grads_tolerance);
    WARN(c10::toString(dtype) << ": chunked vs full logits, max |logp diff| "
                              << max_abs_diff(chunked.values.logp.cpu(), full.values.logp.cpu())
                              << ", worst relative grad diff " << worst_relative_difference(chunked.grads, full.grads)
                              << "; checkpointed vs plain " << worst_relative_difference(checkpointed.grads, chunked.grads));
  }
}
