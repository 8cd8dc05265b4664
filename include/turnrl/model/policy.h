#pragma once
// Policy: the seam between the trainer and a LibTorch model. The trainer needs per-token
// log-probs and entropies of given sequences (forward_logp), rollouts (generate), the parameters
// for its optimizer, and checkpoints. Three implementations ship with turnrl:
//   TransformerPolicy   the built-in decoder (transformer.h), KV-cache sampling
//   ModulePolicy        any user torch::nn::Module that maps tokens to logits (below)
//   TorchScriptPolicy   a TorchScript file exported from Python (torchscript_policy.h)
//
// Alignment: logp[b, t] = log p(tokens[b, t] | tokens[b, <t]); column 0 has no context and is 0.
// So the response mask of a sequence (true on the policy's own tokens) selects exactly the
// log-probs of those tokens, and the same [B, T] masks serve the rollout and the trainer.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "turnrl/model/sampler.h"

namespace turnrl {

struct TokenLogp {
  torch::Tensor logp;     // float32 [B, T] log-prob of each token given the ones before it
  torch::Tensor entropy;  // float32 [B, T] entropy of the distribution that token was drawn from
};

class Policy {
 public:
  virtual ~Policy() = default;

  // tokens         int64 [B, T]
  // attention_mask bool  [B, T] false on padding (left or right); undefined = all valid
  // response_mask  bool  [B, T] the positions the caller needs; logp and entropy are 0 elsewhere.
  //                             Undefined = every position but column 0.
  // Differentiable with respect to parameters() (call under torch::NoGradGuard when not training).
  virtual TokenLogp forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                                 const torch::Tensor& response_mask = {}) = 0;
  // Samples continuations of left-padded prompts (sampler.h: left_pad, Rollout), without autograd.
  virtual Rollout generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                           const SamplingOptions& options) = 0;
  // One turn of multi-turn episodes: row i is the whole sequence so far of episode episodes[i]
  // (each turn's prompt extends the previous turn's prompt and response). A policy that keeps
  // sequences between calls (HFPolicy's generation engine) prefills only the new tokens; the
  // result equals generate()'s. end_episodes() lets go of what was kept.
  virtual Rollout generate_turn(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                                const SamplingOptions& options, const std::vector<int64_t>& episodes) {
    (void)episodes;
    return generate(prompts, prompt_mask, options);
  }
  virtual void end_episodes() {}

  virtual std::vector<torch::Tensor> parameters() = 0;
  // Writes the weights to `path` and reads them back into the existing parameters: one file, or a
  // folder when saves_folder() (HFPolicy: a HuggingFace or peft folder other tools read).
  virtual void save(const std::string& path) = 0;
  virtual void load(const std::string& path) = 0;
  virtual bool saves_folder() const { return false; }
  virtual void train(bool on = true) = 0;
  void eval() { train(false); }
  virtual void to(torch::Device device) = 0;
  virtual void to(torch::Dtype dtype) = 0;
  virtual torch::Device device() const = 0;

  // The temperature forward_logp scores at: every implementation divides its float32 logits by it
  // before the softmax, so log-probs and entropies are of the distribution sampling at that
  // temperature draws from (before top-k / top-p), as verl's actor scores its rollout temperature.
  // 1 (the default) is the model's own distribution. The Trainer sets it from sampling.temperature
  // when sampling.score_at_temperature is on. Throws unless finite and > 0.
  void set_logp_temperature(double temperature);
  double logp_temperature() const { return logp_temperature_; }

 private:
  double logp_temperature_ = 1.0;
};

// logits float [B, T, V] (position t predicts token t+1) -> TokenLogp aligned as above. Computed
// in float32 whatever the logits' dtype, of logits / temperature. Shared by every policy; useful
// for users' own ones (pass logp_temperature()).
TokenLogp token_logp_from_logits(const torch::Tensor& logits, const torch::Tensor& tokens,
                                 const torch::Tensor& response_mask = {}, double temperature = 1.0);

// The same as token_logp_from_logits(hidden · head_weightᵀ, tokens, response_mask) for a linear
// vocabulary head, computed only at the positions that predict a response token (a prompt's
// positions never pay for the vocabulary projection) and in chunks of `chunk_rows` positions
// (chunked_logp.h): the full [B, T, V] logits never exist, in the forward pass or the backward.
// hidden [B, T, H]; head_weight [V, H]; tokens [B, T]; response_mask [B, T] or undefined (every
// position but column 0). Synchronises with the device once (the count of response tokens).
// fused_kernels: chunked_logp_entropy's one-pass GPU kernels (chunked_logp.h). temperature: as
// token_logp_from_logits's.
TokenLogp token_logp_at_responses(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                  const torch::Tensor& tokens, const torch::Tensor& response_mask, int64_t chunk_rows,
                                  bool fused_kernels = false, double temperature = 1.0);

// Positions from an attention mask: each valid token's index among the valid tokens of its row
// (0 for pads), int64 [B, T]. Left padding then gives the same positions as no padding.
torch::Tensor positions_from_mask(const torch::Tensor& attention_mask);

// Adapter for a user's torch::nn::Module. `logits` maps (tokens int64 [B, T], attention_mask bool
// [B, T]) to logits [B, T, V] where position t predicts token t+1; generation re-runs it on the
// whole sequence at each step (no cache). save() writes the module as torch::save does; load()
// copies a saved archive into the existing parameters and buffers (their dtype and device kept).
//
//   struct MyLMImpl : torch::nn::Module { torch::Tensor forward(torch::Tensor tokens, torch::Tensor mask); };
//   TORCH_MODULE(MyLM);
//   MyLM lm;
//   auto policy = ModulePolicy::wrap(lm.ptr());   // calls lm->forward(tokens, mask)
class ModulePolicy : public Policy {
 public:
  ModulePolicy(std::shared_ptr<torch::nn::Module> module, LogitsFn logits);
  // For modules whose forward(tokens, attention_mask) returns the logits.
  template <typename M>
  static ModulePolicy wrap(std::shared_ptr<M> module) {
    M* raw = module.get();
    return ModulePolicy(module, [raw](const torch::Tensor& t, const torch::Tensor& m) { return raw->forward(t, m); });
  }

  TokenLogp forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                         const torch::Tensor& response_mask = {}) override;
  Rollout generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                   const SamplingOptions& options) override;
  std::vector<torch::Tensor> parameters() override { return module_->parameters(); }
  void save(const std::string& path) override;
  void load(const std::string& path) override;
  void train(bool on = true) override { module_->train(on); }
  void to(torch::Device device) override { module_->to(device); }
  void to(torch::Dtype dtype) override { module_->to(dtype); }
  torch::Device device() const override;

  torch::nn::Module& module() { return *module_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  LogitsFn logits_;
};

}  // namespace turnrl
