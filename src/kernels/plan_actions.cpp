#include "turnrl/kernels/plan_actions.h"

#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "turnrl/core/error.h"
#include "turnrl/kernels/kernel_env.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/model/chunked_logp.h"

namespace turnrl {
namespace {

// Logit of a choice that does not exist (slots with fewer choices): exp() of it is exactly 0
// in float32, and unlike -inf it keeps every gradient finite.
constexpr double kMissingChoice = -1e9;

// Compact observations have at most this many words (compact_observation: task, turn, last,
// speed, own).
constexpr int64_t kMaxCompactWords = 5;

}  // namespace

PlanActionSpace::PlanActionSpace(const TaskSet& tasks, int max_turns) {
  for (const std::string& w : compact_vocabulary(tasks, max_turns)) tokenizer_.add_special_token(w);
  int64_t widest = 0;
  for (const PlanSlot& s : plan_slots()) {
    std::vector<int64_t> ids;
    for (const std::string& c : s.choices) ids.push_back(tokenizer_.add_special_token(s.name + "=" + c));
    widest = std::max<int64_t>(widest, int64_t(ids.size()));
    slot_choices_.push_back(std::move(ids));
  }
  prompt_length_ = 4 + kMaxCompactWords;
  choice_ids_ = torch::full({slots(), widest}, -1, torch::kLong);
  choice_index_ = torch::full({vocab_size()}, -1, torch::kLong);
  for (int64_t k = 0; k < slots(); ++k)
    for (int64_t c = 0; c < int64_t(slot_choices_[k].size()); ++c) {
      choice_ids_[k][c] = slot_choices_[k][c];
      choice_index_[slot_choices_[k][c]] = c;
    }
}

TokenIds PlanActionSpace::prompt(const std::string& compact) const {
  TokenIds words;
  std::istringstream in(compact);
  for (std::string w; in >> w;) words.push_back(tokenizer_.special_id(w));
  if (int64_t(words.size()) > kMaxCompactWords)
    fail("PlanActionSpace: the observation '{}' has {} words; at most {} fit the prompt", compact, words.size(),
         kMaxCompactWords);
  TokenIds ids(size_t(prompt_length_ - 4 - int64_t(words.size())), Tokenizer::kPad);
  ids.insert(ids.end(), {Tokenizer::kBos, Tokenizer::kUser});
  ids.insert(ids.end(), words.begin(), words.end());
  ids.insert(ids.end(), {Tokenizer::kEndTurn, Tokenizer::kAssistant});
  return ids;
}

std::string PlanActionSpace::plan_text(const int64_t* response_ids) const {
  std::string out;
  for (int64_t k = 0; k < slots(); ++k) {
    if (k) out += ' ';
    out += tokenizer_.decode({response_ids[k]});
  }
  return out;
}

TokenIds PlanActionSpace::plan_ids(const std::string& plan) const {
  TokenIds ids;
  std::istringstream in(plan);
  for (std::string w; in >> w;) ids.push_back(tokenizer_.special_id(w));
  if (int64_t(ids.size()) != slots()) fail("PlanActionSpace: '{}' has {} words; a plan has {}", plan, ids.size(), slots());
  for (int64_t k = 0; k < slots(); ++k)
    if (std::find(slot_choices_[k].begin(), slot_choices_[k].end(), ids[k]) == slot_choices_[k].end())
      fail("PlanActionSpace: word {} of '{}' is not a choice of slot '{}'", k + 1, plan, plan_slots()[k].name);
  return ids;
}

torch::Tensor plan_attention_mask(const torch::Tensor& tokens) { return tokens != Tokenizer::kPad; }

PlanSample sample_plans(const LogitsFn& logits, const PlanActionSpace& space, const torch::Tensor& prompts,
                        const SamplingOptions& options, at::Generator generator) {
  torch::NoGradGuard no_grad;
  const int64_t batch = prompts.size(0), slots = space.slots();
  torch::Tensor tokens = prompts.to(torch::kLong);
  const torch::Tensor choice_ids = space.choice_ids().to(tokens.device());
  std::vector<torch::Tensor> logps;
  for (int64_t k = 0; k < slots; ++k) {
    const torch::Tensor next = logits(tokens, plan_attention_mask(tokens)).select(1, tokens.size(1) - 1).to(torch::kFloat);
    const torch::Tensor ids = choice_ids[k];  // [C]
    const torch::Tensor slot_logits =
        next.index_select(1, ids.clamp_min(0)).masked_fill((ids < 0).unsqueeze(0), kMissingChoice);
    const torch::Tensor lp = sampling_log_probs(slot_logits, options);  // [B, C]
    const torch::Tensor choice = torch::multinomial(lp.exp().cpu(), 1, false, generator).to(tokens.device());
    logps.push_back(lp.gather(1, choice).squeeze(1));
    tokens = torch::cat({tokens, ids.index_select(0, choice.squeeze(1)).unsqueeze(1)}, 1);
  }
  PlanSample out;
  const int64_t prompt_len = prompts.size(1);
  out.tokens = tokens;
  out.response_mask = torch::zeros_like(tokens, torch::kBool);
  out.response_mask.narrow(1, prompt_len, slots).fill_(true);
  out.logp = torch::zeros(tokens.sizes(), tokens.options().dtype(torch::kFloat));
  out.logp.narrow(1, prompt_len, slots).copy_(torch::stack(logps, 1));
  const torch::Tensor host = tokens.narrow(1, prompt_len, slots).cpu().contiguous();
  for (int64_t b = 0; b < batch; ++b) out.plans.push_back(space.plan_text(host[b].data_ptr<int64_t>()));
  return out;
}

TokenLogp plan_token_logp(const torch::Tensor& logits, const torch::Tensor& tokens, const torch::Tensor& response_mask,
                          const PlanActionSpace& space, double temperature) {
  const torch::Device device = logits.device();
  const torch::Tensor mask = response_mask.narrow(1, 1, tokens.size(1) - 1).to(torch::kBool);  // [B, S-1]
  const torch::Tensor pred = logits.narrow(1, 0, tokens.size(1) - 1).to(torch::kFloat);       // [B, S-1, V]
  // Slot of each predicted token: its index among the row's response tokens.
  const torch::Tensor slot = (mask.to(torch::kLong).cumsum(1) - 1).clamp(0, space.slots() - 1);
  const torch::Tensor ids = space.choice_ids().to(device).index_select(0, slot.reshape(-1)).view(
      {slot.size(0), slot.size(1), -1});  // [B, S-1, C]
  const torch::Tensor slot_logits = pred.gather(2, ids.clamp_min(0)).masked_fill(ids < 0, kMissingChoice);
  const torch::Tensor lsm = at_temperature(slot_logits, temperature).log_softmax(2);
  const torch::Tensor target = tokens.narrow(1, 1, tokens.size(1) - 1);
  const torch::Tensor chosen = space.choice_index().to(device).index_select(0, target.reshape(-1)).view_as(target);
  const torch::Tensor logp = lsm.gather(2, chosen.clamp_min(0).unsqueeze(2)).squeeze(2);
  const torch::Tensor entropy = -(lsm.exp() * lsm).sum(2);
  const torch::Tensor zero_col = torch::zeros({tokens.size(0), 1}, pred.options());
  return {torch::cat({zero_col, torch::where(mask, logp, torch::zeros_like(logp))}, 1),
          torch::cat({zero_col, torch::where(mask, entropy, torch::zeros_like(entropy))}, 1)};
}

PlanActionCodec::PlanActionCodec(std::shared_ptr<const PlanActionSpace> space) : space_(std::move(space)) {
  if (!space_) fail("PlanActionCodec: the action space is null");
}

TokenIds PlanActionCodec::prompt(const EpisodeTokens&, const Observation& observation) const {
  return space_->prompt(observation.compact);
}

std::string PlanActionCodec::action_text(const TokenIds& response) const {
  if (int64_t(response.size()) != space_->slots())
    fail("PlanActionCodec: a response of {} tokens; a plan has {}", response.size(), space_->slots());
  return space_->plan_text(response.data());
}

SamplingOptions PlanActionCodec::sampling(const SamplingOptions& base) const {
  SamplingOptions out = base;
  return out.pad(Tokenizer::kPad);
}

PlanPolicy::PlanPolicy(std::shared_ptr<const PlanActionSpace> space, std::unique_ptr<TransformerPolicy> model)
    : space_(std::move(space)), model_(std::move(model)) {
  if (!space_ || !model_) fail("PlanPolicy: the action space and the model must both be given");
  if (model_->options().vocab() < space_->vocab_size())
    fail("PlanPolicy: the model's vocab {} is smaller than the plan vocabulary ({} tokens)", model_->options().vocab(),
         space_->vocab_size());
}

TokenLogp PlanPolicy::forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                   const torch::Tensor& response_mask) {
  const torch::Tensor attention = attention_mask.defined() ? attention_mask : plan_attention_mask(tokens);
  torch::Tensor response = response_mask;
  if (!response.defined()) {
    response = torch::zeros_like(tokens, torch::kBool);
    response.narrow(1, tokens.size(1) - space_->slots(), space_->slots()).fill_(true);
  }
  return plan_token_logp(model_->model()->forward(tokens, attention), tokens, response, *space_, logp_temperature());
}

Rollout PlanPolicy::generate(const torch::Tensor& prompts, const torch::Tensor&, const SamplingOptions& options) {
  at::Generator generator =
      options.generator.defined() ? options.generator : at::make_generator<at::CPUGeneratorImpl>(options.seed);
  Transformer& model = model_->model();
  const LogitsFn logits = [&model](const torch::Tensor& t, const torch::Tensor& m) { return model->forward(t, m); };
  PlanSample sample = sample_plans(logits, *space_, prompts, options, generator);
  Rollout out;
  out.attention_mask = plan_attention_mask(sample.tokens);
  out.tokens = std::move(sample.tokens);
  out.response_mask = std::move(sample.response_mask);
  out.logp = std::move(sample.logp);
  out.prompt_length = prompts.size(1);
  out.num_generated = torch::full({prompts.size(0)}, space_->slots(), torch::kLong);
  return out;
}

}  // namespace turnrl
