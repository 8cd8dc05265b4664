#pragma once
// The kernel-plan action space for a token policy (env/kernel_plan.h). Prompts are the compact
// observation (Observation::compact, one special token per word); a response is one token per
// plan slot, drawn from the policy's next-token logits restricted to that slot's choices. The
// same restriction gives the trainer's log-probs (plan_token_logp), so rollout and trainer
// differ only by the sampling options and by floating-point rounding, as a real rollout engine
// and trainer do.
//
// Layout of a turn's sequence, S = prompt_length() + slots():
//   <pad>... <|bos|> <|user|> word... <|end_turn|> <|assistant|> choice_1 ... choice_7
// prompts are left-padded to prompt_length() so the response always sits in the last columns.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include "turnrl/rl/task.h"
#include "turnrl/model/policy.h"
#include "turnrl/model/sampler.h"
#include "turnrl/model/tokenizer.h"
#include "turnrl/model/transformer.h"
#include "turnrl/rl/action_codec.h"

namespace turnrl {

class PlanActionSpace {
 public:
  // Registers compact_vocabulary(tasks, max_turns) and plan_vocabulary() as special tokens.
  PlanActionSpace(const TaskSet& tasks, int max_turns);

  const Tokenizer& tokenizer() const { return tokenizer_; }
  int64_t vocab_size() const { return tokenizer_.vocab_size(); }
  int64_t prompt_length() const { return prompt_length_; }
  int64_t slots() const { return int64_t(slot_choices_.size()); }
  int64_t sequence_length() const { return prompt_length_ + slots(); }

  // The left-padded prompt of a compact observation, prompt_length() ids; throws naming an
  // unknown word or an observation longer than the prompt.
  TokenIds prompt(const std::string& compact) const;
  // The plan text ("fusion=fused vec=4 ...") of slots() response ids.
  std::string plan_text(const int64_t* response_ids) const;
  // Response ids of a plan text (each slot once, in slot order).
  TokenIds plan_ids(const std::string& plan) const;

  // int64 [slots, max_choices]: token ids of each slot's choices, -1 where a slot has fewer.
  const torch::Tensor& choice_ids() const { return choice_ids_; }
  // int64 [vocab]: a plan token's index among its slot's choices, -1 for other tokens.
  const torch::Tensor& choice_index() const { return choice_index_; }

 private:
  Tokenizer tokenizer_;
  int64_t prompt_length_ = 0;
  std::vector<std::vector<int64_t>> slot_choices_;
  torch::Tensor choice_ids_, choice_index_;
};

// One sampled turn per prompt.
struct PlanSample {
  torch::Tensor tokens;         // int64 [B, S] prompt then response (pads: Tokenizer::kPad)
  torch::Tensor response_mask;  // bool  [B, S] the slots() response columns
  torch::Tensor logp;           // float [B, S] rollout log-prob of each response token, 0 elsewhere
  std::vector<std::string> plans;  // the plan text of each row
};

// attention mask of sequences built by PlanActionSpace: bool [B, S], false on pads.
torch::Tensor plan_attention_mask(const torch::Tensor& tokens);

// Samples one choice per slot for each prompt (int64 [B, prompt_length()]), each from
// sampling_log_probs(slot logits, options) (temperature, top-k, top-p over the slot's
// choices), drawing with `generator`. logits: the full-sequence model (position t predicts
// token t+1). No autograd.
PlanSample sample_plans(const LogitsFn& logits, const PlanActionSpace& space, const torch::Tensor& prompts,
                        const SamplingOptions& options, at::Generator generator);

// The trainer's log-probs and entropies of plan responses: logits float [B, S, V] of the
// sequences `tokens`, restricted at each response position to that slot's choices. Aligned as
// Policy::forward_logp (column 0 is 0); 0 outside response_mask. Differentiable in logits. The
// slot logits are divided by temperature first (Policy::logp_temperature).
TokenLogp plan_token_logp(const torch::Tensor& logits, const torch::Tensor& tokens,
                          const torch::Tensor& response_mask, const PlanActionSpace& space, double temperature = 1.0);

// The action codec of plan actions: the prompt is the observation's compact state (the plan policy
// reads nothing else, so history is not carried), the response's slots() tokens are the plan.
class PlanActionCodec : public ActionCodec {
 public:
  explicit PlanActionCodec(std::shared_ptr<const PlanActionSpace> space);

  TokenIds prompt(const EpisodeTokens& so_far, const Observation& observation) const override;
  std::string action_text(const TokenIds& response) const override;
  // `base` with the pad id; a plan has exactly slots() tokens, so there are no stop tokens.
  SamplingOptions sampling(const SamplingOptions& base) const override;
  std::string observation_text(const Observation& observation) const override { return observation.compact; }

 private:
  std::shared_ptr<const PlanActionSpace> space_;
};

// The plan model as a Policy: a TransformerPolicy whose every response position is restricted to
// its plan slot's choices, in sampling (sample_plans) and in scoring (plan_token_logp) alike.
// Prompts are PlanActionSpace prompts; their pad tokens are padding whatever prompt_mask says.
class PlanPolicy : public Policy {
 public:
  PlanPolicy(std::shared_ptr<const PlanActionSpace> space, std::unique_ptr<TransformerPolicy> model);

  // attention_mask undefined: every non-pad token. response_mask undefined: the last slots() columns.
  TokenLogp forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                         const torch::Tensor& response_mask = {}) override;
  // One plan per prompt, drawn from options.generator (or a generator seeded by options.seed).
  Rollout generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                   const SamplingOptions& options) override;
  std::vector<torch::Tensor> parameters() override { return model_->parameters(); }
  void save(const std::string& path) override { model_->save(path); }
  void load(const std::string& path) override { model_->load(path); }
  void train(bool on = true) override { model_->train(on); }
  void to(torch::Device device) override { model_->to(device); }
  void to(torch::Dtype dtype) override { model_->to(dtype); }
  torch::Device device() const override { return model_->device(); }

  TransformerPolicy& model() { return *model_; }
  const PlanActionSpace& space() const { return *space_; }

 private:
  std::shared_ptr<const PlanActionSpace> space_;
  std::unique_ptr<TransformerPolicy> model_;
};

}  // namespace turnrl
