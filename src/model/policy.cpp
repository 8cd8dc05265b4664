#include "turnrl/model/policy.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include "module_state.h"
#include "turnrl/model/chunked_logp.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"

namespace turnrl {

void Policy::set_logp_temperature(double temperature) {
  check_logp_temperature(temperature, "Policy::set_logp_temperature");
  logp_temperature_ = temperature;
}

TokenLogp token_logp_from_logits(const torch::Tensor& logits, const torch::Tensor& tokens,
                                 const torch::Tensor& response_mask, double temperature) {
  check_logp_temperature(temperature, "token_logp_from_logits");
  if (logits.dim() != 3 || tokens.dim() != 2 || logits.size(0) != tokens.size(0) || logits.size(1) != tokens.size(1))
    fail("token_logp_from_logits: logits {} must be [B, T, V] for tokens {} [B, T]", c10::str(logits.sizes()),
         c10::str(tokens.sizes()));
  const int64_t rows = tokens.size(0), length = tokens.size(1);
  const auto float_options = torch::TensorOptions(torch::kFloat).device(logits.device());
  TokenLogp out;
  if (length < 2) {
    out.logp = torch::zeros({rows, length}, float_options);
    out.entropy = torch::zeros({rows, length}, float_options);
    return out;
  }
  // Position t-1 predicts token t; column 0 has no prediction and gets 0.
  const torch::Tensor log_probs =
      at_temperature(logits.narrow(1, 0, length - 1).to(torch::kFloat), temperature).log_softmax(-1);
  const torch::Tensor next = tokens.narrow(1, 1, length - 1).unsqueeze(-1);
  const torch::Tensor zero_column = torch::zeros({rows, 1}, float_options);
  out.logp = torch::cat({zero_column, log_probs.gather(-1, next).squeeze(-1)}, 1);
  out.entropy = torch::cat({zero_column, -(log_probs.exp() * log_probs).sum(-1)}, 1);
  if (response_mask.defined()) {
    if (response_mask.sizes() != tokens.sizes())
      fail("forward_logp: response_mask has shape {}, tokens {}; they must match", c10::str(response_mask.sizes()),
           c10::str(tokens.sizes()));
    out.logp = masked_fill_zero(out.logp, response_mask);
    out.entropy = masked_fill_zero(out.entropy, response_mask);
  }
  return out;
}

TokenLogp token_logp_at_responses(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                  const torch::Tensor& tokens, const torch::Tensor& response_mask, int64_t chunk_rows,
                                  bool fused_kernels, double temperature) {
  if (hidden.dim() != 3 || tokens.dim() != 2 || hidden.size(0) != tokens.size(0) || hidden.size(1) != tokens.size(1))
    fail("token_logp_at_responses: hidden {} must be [B, T, H] for tokens {} [B, T]", c10::str(hidden.sizes()),
         c10::str(tokens.sizes()));
  if (response_mask.defined() && response_mask.sizes() != tokens.sizes())
    fail("forward_logp: response_mask has shape {}, tokens {}; they must match", c10::str(response_mask.sizes()),
         c10::str(tokens.sizes()));
  const auto float_options = torch::TensorOptions(torch::kFloat).device(hidden.device());
  TokenLogp out{torch::zeros(tokens.sizes(), float_options), torch::zeros(tokens.sizes(), float_options)};
  // Token t is predicted at position t - 1; column 0 has no prediction and stays 0.
  torch::Tensor scored = response_mask.defined() ? response_mask.to(torch::kBool).clone()
                                                 : torch::ones(tokens.sizes(), float_options.dtype(torch::kBool));
  if (scored.size(1) > 0) scored.select(1, 0).fill_(false);
  const torch::Tensor where = scored.nonzero();
  if (where.size(0) == 0) return out;
  const torch::Tensor row = where.select(1, 0), column = where.select(1, 1);
  const RowLogp scored_rows =
      chunked_logp_entropy(hidden.index({row, column - 1}), head_weight, tokens.index({row, column}), chunk_rows,
                           fused_kernels, temperature);
  out.logp = out.logp.index_put({row, column}, scored_rows.logp);
  out.entropy = out.entropy.index_put({row, column}, scored_rows.entropy);
  return out;
}

torch::Tensor positions_from_mask(const torch::Tensor& attention_mask) {
  return (attention_mask.to(torch::kLong).cumsum(1) - 1).clamp_min(0);
}

namespace {

torch::Tensor mask_or_all(const torch::Tensor& tokens, const torch::Tensor& attention_mask) {
  if (!attention_mask.defined()) return torch::ones_like(tokens, torch::kBool);
  if (attention_mask.sizes() != tokens.sizes())
    fail("forward_logp: attention_mask has shape {}, tokens {}; they must match", c10::str(attention_mask.sizes()),
         c10::str(tokens.sizes()));
  return attention_mask.to(torch::kBool);
}

}  // namespace

ModulePolicy::ModulePolicy(std::shared_ptr<torch::nn::Module> module, LogitsFn logits)
    : module_(std::move(module)), logits_(std::move(logits)) {
  require(module_ != nullptr, "ModulePolicy: module is null");
  require(bool(logits_), "ModulePolicy: logits function is empty");
}

TokenLogp ModulePolicy::forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                     const torch::Tensor& response_mask) {
  return token_logp_from_logits(logits_(tokens, mask_or_all(tokens, attention_mask)), tokens, response_mask,
                                logp_temperature());
}

Rollout ModulePolicy::generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                               const SamplingOptions& options) {
  RecomputeNextToken model(logits_);
  return sample(model, prompts, prompt_mask, options);
}

void ModulePolicy::save(const std::string& path) {
  torch::serialize::OutputArchive archive;
  module_->save(archive);
  archive.save_to(path);
}

void ModulePolicy::load(const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device());
  } catch (const c10::Error& e) {
    fail("ModulePolicy.load: cannot read '{}': {}", path, e.what_without_backtrace());
  }
  detail::copy_module_state(*module_, archive, path);
}

torch::Device ModulePolicy::device() const {
  const std::vector<torch::Tensor> params = module_->parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

}  // namespace turnrl
