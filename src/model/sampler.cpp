#include "turnrl/model/sampler.h"

#include <cmath>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include "turnrl/core/error.h"

namespace turnrl {

void validate(const SamplingOptions& o) {
  if (o.max_new_tokens < 1) fail("sampling.max_new_tokens: {}; must be >= 1", o.max_new_tokens);
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    fail("sampling.temperature: {}; must be finite and >= 0 (0 = greedy)", o.temperature);
  if (o.top_k < 0) fail("sampling.top_k: {}; must be >= 0 (0 = off)", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1)) fail("sampling.top_p: {}; must be in (0, 1] (1 = off)", o.top_p);
}

std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                                                 torch::Device device) {
  require(!prompts.empty(), "left_pad: no prompts");
  size_t width = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) fail("left_pad: prompt {} is empty; every prompt needs at least one token", i);
    width = std::max(width, prompts[i].size());
  }
  const auto rows = int64_t(prompts.size());
  torch::Tensor tokens = torch::full({rows, int64_t(width)}, pad_id, torch::kLong);
  torch::Tensor mask = torch::zeros({rows, int64_t(width)}, torch::kBool);
  auto t = tokens.accessor<int64_t, 2>();
  auto m = mask.accessor<bool, 2>();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t offset = width - prompts[i].size();
    for (size_t j = 0; j < prompts[i].size(); ++j) {
      t[int64_t(i)][int64_t(offset + j)] = prompts[i][j];
      m[int64_t(i)][int64_t(offset + j)] = true;
    }
  }
  return {tokens.to(device), mask.to(device)};
}

torch::Tensor RecomputeNextToken::prefill(const torch::Tensor& prompts, const torch::Tensor& prompt_mask) {
  tokens_ = prompts;
  mask_ = prompt_mask;
  return logits_(tokens_, mask_).select(1, -1);
}

torch::Tensor RecomputeNextToken::extend(const torch::Tensor& token, const torch::Tensor& valid) {
  tokens_ = torch::cat({tokens_, token.unsqueeze(1)}, 1);
  mask_ = torch::cat({mask_, valid.unsqueeze(1)}, 1);
  return logits_(tokens_, mask_).select(1, -1);
}

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingOptions& o) {
  require(o.temperature > 0, "sampling_log_probs: temperature must be > 0");
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  torch::Tensor x = logits.to(torch::kFloat) / o.temperature;
  const int64_t vocab = x.size(-1);
  if (o.top_k > 0 && o.top_k < vocab) {
    // Ties with the k-th value are kept, as in Hugging Face's TopKLogitsWarper.
    const torch::Tensor kth = std::get<0>(x.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    x = x.masked_fill(x < kth, kNegInf);
  }
  if (o.top_p < 1) {
    // Nucleus: keep tokens (most likely first) while the mass before them is below p; the most
    // likely token is always kept.
    auto [sorted, order] = x.sort(-1, /*descending=*/true);
    const torch::Tensor probs = sorted.softmax(-1);
    const torch::Tensor remove_sorted = (probs.cumsum(-1) - probs) >= o.top_p;
    x = x.masked_fill(torch::zeros_like(remove_sorted).scatter(-1, order, remove_sorted), kNegInf);
  }
  return x.log_softmax(-1);
}

Rollout sample(NextTokenModel& model, const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
               const SamplingOptions& o) {
  validate(o);
  if (prompts.dim() != 2 || prompts.scalar_type() != torch::kLong || prompts.size(1) == 0)
    fail("sample: prompts must be int64 [B, P] with P >= 1; got {} {}", c10::toString(prompts.scalar_type()),
         c10::str(prompts.sizes()));
  const torch::Tensor mask = prompt_mask.defined() ? prompt_mask.to(torch::kBool) : torch::ones_like(prompts, torch::kBool);
  if (mask.sizes() != prompts.sizes())
    fail("sample: prompt_mask has shape {}, prompts {}; they must match", c10::str(mask.sizes()),
         c10::str(prompts.sizes()));

  torch::NoGradGuard no_grad;
  const torch::Device device = prompts.device();
  const int64_t batch = prompts.size(0);
  // Uniforms are drawn on the CPU from the seed and copied: the same seed gives the same rollout
  // on any device, and inverse-CDF sampling needs nothing device-specific.
  at::Generator generator = o.generator.defined() ? o.generator : at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const torch::Tensor stops =
      torch::tensor(o.stop_tokens.empty() ? std::vector<int64_t>{-1} : o.stop_tokens, torch::kLong).to(device);
  torch::Tensor finished = torch::zeros({batch}, torch::TensorOptions(torch::kBool).device(device));

  std::vector<torch::Tensor> tokens, logps, valids;
  torch::Tensor logits = model.prefill(prompts, mask);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    torch::Tensor token, logp;
    if (o.temperature == 0) {
      const torch::Tensor log_probs = logits.to(torch::kFloat).log_softmax(-1);
      token = log_probs.argmax(-1);
      logp = log_probs.gather(-1, token.unsqueeze(1)).squeeze(1);
    } else {
      const torch::Tensor log_probs = sampling_log_probs(logits, o);
      const torch::Tensor cdf = log_probs.exp().cumsum(-1);
      // u in (0, 1]: the first index whose CDF reaches u * total has positive probability.
      const torch::Tensor u = (1 - torch::rand({batch}, generator, torch::kFloat)).to(device);
      const torch::Tensor target = (u * cdf.select(1, -1)).unsqueeze(1);
      token = (cdf < target).sum(-1).clamp_max(cdf.size(1) - 1);
      logp = log_probs.gather(-1, token.unsqueeze(1)).squeeze(1);
    }
    const torch::Tensor valid = finished.logical_not();
    token = torch::where(valid, token, torch::full_like(token, o.pad_id));
    logp = torch::where(valid, logp, torch::zeros_like(logp));
    tokens.push_back(token);
    logps.push_back(logp);
    valids.push_back(valid);
    finished = finished.logical_or(token.unsqueeze(1).eq(stops.unsqueeze(0)).any(1).logical_and(valid));
    if (step + 1 == o.max_new_tokens || finished.all().item<bool>()) break;
    logits = model.extend(token, valid);
  }

  const torch::Tensor generated = torch::stack(tokens, 1);
  const torch::Tensor generated_valid = torch::stack(valids, 1);
  Rollout r;
  r.prompt_length = prompts.size(1);
  r.tokens = torch::cat({prompts, generated}, 1);
  r.attention_mask = torch::cat({mask, generated_valid}, 1);
  r.response_mask = torch::cat({torch::zeros_like(mask), generated_valid}, 1);
  r.logp = torch::cat({torch::zeros(mask.sizes(), torch::TensorOptions(torch::kFloat).device(device)),
                       torch::stack(logps, 1).to(torch::kFloat)},
                      1);
  r.num_generated = generated_valid.sum(1);
  return r;
}

}  // namespace turnrl
