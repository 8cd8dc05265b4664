// The plan action space: prompt layout, constrained sampling, and trainer log-probs that agree
// with the rollout's.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/kernel_env.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/model/transformer.h"
#include "turnrl/kernels/plan_actions.h"

using namespace turnrl;

namespace {
struct Fixture {
  TaskSet tasks = builtin_cpu_tasks();
  PlanActionSpace space{tasks, 3};
  std::unique_ptr<TransformerPolicy> policy;
  Fixture() {
    torch::manual_seed(3);
    policy = std::make_unique<TransformerPolicy>(
        TransformerOptions().vocab(space.vocab_size()).d_model(32).layers(1).heads(2).max_seq(32));
  }
  LogitsFn logits() {
    return [this](const torch::Tensor& t, const torch::Tensor& m) { return policy->model()->forward(t, m); };
  }
  torch::Tensor prompts(const std::vector<std::string>& compact) {
    torch::Tensor out = torch::empty({int64_t(compact.size()), space.prompt_length()}, torch::kLong);
    for (size_t i = 0; i < compact.size(); ++i) {
      const TokenIds ids = space.prompt(compact[i]);
      std::copy(ids.begin(), ids.end(), out[int64_t(i)].data_ptr<int64_t>());
    }
    return out;
  }
};
}  // namespace

TEST_CASE("prompts are left-padded compact words and plans map to one token per slot", "[trainer][plan]") {
  Fixture f;
  const TokenIds p = f.space.prompt("task=relu_bias turn=0 last=none");
  REQUIRE(int64_t(p.size()) == f.space.prompt_length());
  CHECK(p[0] == Tokenizer::kPad);
  CHECK(p[p.size() - 1] == Tokenizer::kAssistant);
  CHECK(p[p.size() - 2] == Tokenizer::kEndTurn);
  CHECK(p[p.size() - 3] == f.space.tokenizer().special_id("last=none"));
  const std::string plan = "fusion=fused vec=4 unroll=2 acc=f32 fallback=none bounds=checked shortcut=none";
  const TokenIds ids = f.space.plan_ids(plan);
  CHECK(f.space.plan_text(ids.data()) == plan);
  CHECK_THROWS_WITH(f.space.plan_ids("vec=4 fusion=fused unroll=2 acc=f32 fallback=none bounds=checked shortcut=none"),
                    Catch::Contains("slot 'fusion'"));
  CHECK_THROWS_WITH(f.space.prompt("task=relu_bias turn=9"), Catch::Contains("turn=9"));
  CHECK(f.space.slots() == int64_t(plan_slots().size()));
}

TEST_CASE("sampled plans are always valid and the trainer's log-probs equal the rollout's", "[trainer][plan]") {
  Fixture f;
  const torch::Tensor prompts = f.prompts({"task=relu_bias turn=0 last=none", "task=softmax_rows turn=1 last=correct speed=<1 own=>=0.7",
                                           "task=gelu_tanh turn=2 last=compile"});
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const PlanSample s = sample_plans(f.logits(), f.space, prompts, SamplingOptions(), gen);
  REQUIRE(s.plans.size() == 3);
  const Task relu = f.tasks.find("relu_bias");
  for (const std::string& plan : s.plans) CHECK(expand_plan(relu, plan).error.empty());
  CHECK(s.response_mask.sum().item<int64_t>() == 3 * f.space.slots());
  const torch::Tensor logits = f.policy->model()->forward(s.tokens, plan_attention_mask(s.tokens));
  const TokenLogp tl = plan_token_logp(logits, s.tokens, s.response_mask, f.space);
  CHECK(torch::allclose(tl.logp, s.logp, 1e-5, 1e-5));
  CHECK((tl.logp.masked_select(s.response_mask) < 0).all().item<bool>());
  CHECK((tl.entropy.masked_select(s.response_mask) > 0).all().item<bool>());
  CHECK((tl.logp.masked_select(~s.response_mask) == 0).all().item<bool>());
  // Same seed, same samples.
  at::Generator again = at::make_generator<at::CPUGeneratorImpl>(11);
  CHECK(torch::equal(sample_plans(f.logits(), f.space, prompts, SamplingOptions(), again).tokens, s.tokens));
  // A lower temperature is a different sampling distribution: the rollout log-probs differ.
  at::Generator cold = at::make_generator<at::CPUGeneratorImpl>(11);
  const PlanSample c = sample_plans(f.logits(), f.space, prompts, SamplingOptions().temp(0.5), cold);
  const TokenLogp ct = plan_token_logp(f.policy->model()->forward(c.tokens, plan_attention_mask(c.tokens)), c.tokens,
                                       c.response_mask, f.space);
  CHECK_FALSE(torch::allclose(ct.logp, c.logp, 1e-4, 1e-4));
  // Scored at the sampling temperature, the trainer's log-probs are the rollout's again.
  const TokenLogp warm = plan_token_logp(f.policy->model()->forward(c.tokens, plan_attention_mask(c.tokens)),
                                         c.tokens, c.response_mask, f.space, 0.5);
  CHECK(torch::allclose(warm.logp, c.logp, 1e-5, 1e-5));
  PlanPolicy plan(std::make_shared<PlanActionSpace>(f.space), std::move(f.policy));
  plan.set_logp_temperature(0.5);
  CHECK(torch::allclose(plan.forward_logp(c.tokens, plan_attention_mask(c.tokens), c.response_mask).logp, c.logp, 1e-5,
                        1e-5));
  CHECK_THROWS_WITH(plan.set_logp_temperature(0), Catch::Contains("finite and > 0"));
}

TEST_CASE("plan log-probs are differentiable and finite where slots have fewer choices", "[trainer][plan]") {
  Fixture f;
  const torch::Tensor prompts = f.prompts({"task=relu_bias turn=0 last=none"});
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const PlanSample s = sample_plans(f.logits(), f.space, prompts, SamplingOptions(), gen);
  const torch::Tensor logits = f.policy->model()->forward(s.tokens, plan_attention_mask(s.tokens));
  const TokenLogp tl = plan_token_logp(logits, s.tokens, s.response_mask, f.space);
  (tl.logp.sum() + tl.entropy.sum()).backward();
  for (const auto& p : f.policy->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(torch::isfinite(p.grad()).all().item<bool>());
  }
  // fusion has 2 choices: probabilities over the slot sum to 1.
  const int64_t col = f.space.prompt_length();
  const torch::Tensor ids = f.space.choice_ids()[0];
  const torch::Tensor slot = logits[0][col - 1].index_select(0, ids.narrow(0, 0, 2)).log_softmax(0);
  CHECK(slot.exp().sum().item<double>() == Approx(1.0));
}
