#include "turnrl/model/sampler.h"

#include <cmath>
#include <limits>
#include <mutex>

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

RowSampling RowSampling::repeat(const SamplingOptions& o, int64_t rows, torch::Device device) {
  const auto options = torch::TensorOptions(torch::kFloat).device(device);
  RowSampling r;
  r.temperature = torch::full({rows}, o.temperature, options);
  r.top_k = torch::full({rows}, o.top_k, options.dtype(torch::kLong));
  r.top_p = torch::full({rows}, o.top_p, options);
  r.filtered = o.top_k > 0 || o.top_p < 1;
  return r;
}

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingOptions& o) {
  require(o.temperature > 0, "sampling_log_probs: temperature must be > 0");
  return sampling_log_probs(logits, RowSampling::repeat(o, logits.size(0), logits.device()));
}

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const RowSampling& rows) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const torch::Tensor greedy = rows.temperature.eq(0).unsqueeze(1);
  // Greedy rows keep the unscaled logits: their recorded log-prob is the model's own.
  torch::Tensor x = logits.to(torch::kFloat) / torch::where(greedy, torch::ones_like(greedy, torch::kFloat),
                                                           rows.temperature.unsqueeze(1));
  if (!rows.filtered) return x.log_softmax(-1);
  const int64_t vocab = x.size(-1);
  auto [sorted, order] = x.sort(-1, /*descending=*/true);
  // Top-k: ties with the k-th value are kept, as in Hugging Face's TopKLogitsWarper.
  const torch::Tensor k_off = rows.top_k.le(0).logical_or(rows.top_k.ge(vocab)).unsqueeze(1).logical_or(greedy);
  const torch::Tensor kth = sorted.gather(-1, (rows.top_k.clamp(1, vocab) - 1).unsqueeze(1));
  const torch::Tensor below_kth = sorted < kth.masked_fill(k_off, kNegInf);
  sorted = sorted.masked_fill(below_kth, kNegInf);
  // Nucleus: keep tokens (most likely first) while the mass before them is below p; the most
  // likely token is always kept. p = 1 is off (float rounding must not cut the tail).
  const torch::Tensor probs = sorted.softmax(-1);
  const torch::Tensor p = torch::where(rows.top_p.ge(1).unsqueeze(1).logical_or(greedy),
                                       torch::full_like(kth, std::numeric_limits<float>::infinity()),
                                       rows.top_p.unsqueeze(1));
  const torch::Tensor remove_sorted = below_kth.logical_or((probs.cumsum(-1) - probs) >= p);
  x = x.masked_fill(torch::zeros_like(remove_sorted).scatter(-1, order, remove_sorted), kNegInf);
  return x.log_softmax(-1);
}

torch::Tensor inverse_cdf(const torch::Tensor& probs, const torch::Tensor& uniform) {
  const int64_t rows = probs.size(0), vocab = probs.size(1);
  const int64_t full = vocab / kInverseCdfChunk, tail = vocab % kInverseCdfChunk;
  // Level 1: each chunk's mass, and the first chunk whose running total reaches u * total. That
  // chunk has positive mass: the running total rose there (or it is the first and reaches u * total > 0).
  std::vector<torch::Tensor> parts;
  if (full > 0) parts.push_back(probs.narrow(1, 0, full * kInverseCdfChunk).view({rows, full, kInverseCdfChunk}).sum(-1));
  if (tail > 0) parts.push_back(probs.narrow(1, full * kInverseCdfChunk, tail).sum(-1, /*keepdim=*/true));
  const torch::Tensor chunk_mass = parts.size() == 1 ? parts[0] : torch::cat(parts, 1);
  const int64_t chunks = chunk_mass.size(1);
  const torch::Tensor running = chunk_mass.cumsum(-1);
  const torch::Tensor target = uniform.to(probs.scalar_type()) * running.select(1, chunks - 1);
  const torch::Tensor chunk = running.lt(target.unsqueeze(1)).sum(-1).clamp_max(chunks - 1);
  const torch::Tensor before =
      torch::where(chunk.gt(0), running.gather(1, (chunk - 1).clamp_min(0).unsqueeze(1)).squeeze(1),
                   torch::zeros_like(target));
  // Level 2: inside the chunk, the first position whose running mass reaches what is left of the
  // target (at most the chunk's own running total, which float rounding may put below it) and is
  // positive, so the token drawn always has positive probability.
  const torch::Tensor positions =
      chunk.unsqueeze(1) * kInverseCdfChunk + torch::arange(kInverseCdfChunk, chunk.options()).unsqueeze(0);
  const torch::Tensor inside = positions.lt(vocab);
  const torch::Tensor mass = probs.gather(1, positions.clamp_max(vocab - 1)).masked_fill(inside.logical_not(), 0);
  const torch::Tensor within = mass.cumsum(-1);
  const torch::Tensor left = torch::minimum(target - before, within.select(1, kInverseCdfChunk - 1)).unsqueeze(1);
  const torch::Tensor offset = within.lt(left).logical_or(within.le(0)).sum(-1).clamp_max(kInverseCdfChunk - 1);
  return (chunk * kInverseCdfChunk + offset).clamp_max(vocab - 1);
}

std::pair<torch::Tensor, torch::Tensor> draw_tokens(const torch::Tensor& logits, const RowSampling& rows,
                                                    const torch::Tensor& uniform) {
  const torch::Tensor log_probs = sampling_log_probs(logits, rows);
  const torch::Tensor sampled = inverse_cdf(log_probs.exp(), uniform);
  const torch::Tensor token = torch::where(rows.temperature.eq(0), log_probs.argmax(-1), sampled);
  return {token, log_probs.gather(-1, token.unsqueeze(1)).squeeze(1)};
}

namespace {

// x >> bits with zeros shifted in: the shift of an int64 tensor is arithmetic.
torch::Tensor logical_shift_right(const torch::Tensor& x, int bits) {
  return x.__rshift__(bits).bitwise_and((int64_t(1) << (64 - bits)) - 1);
}

int64_t as_signed(uint64_t v) { return static_cast<int64_t>(v); }

}  // namespace

torch::Tensor counter_uniform(const torch::Tensor& key, const torch::Tensor& counter) {
  // splitmix64 (Steele, Lea and Flood 2014): state_n = key + (n + 1) * gamma, then the mix.
  // int64 multiplication wraps as uint64 does, on every device.
  torch::Tensor z = key + (counter + 1) * as_signed(0x9E3779B97F4A7C15ULL);
  z = z.bitwise_xor(logical_shift_right(z, 30)) * as_signed(0xBF58476D1CE4E5B9ULL);
  z = z.bitwise_xor(logical_shift_right(z, 27)) * as_signed(0x94D049BB133111EBULL);
  z = z.bitwise_xor(logical_shift_right(z, 31));
  return (logical_shift_right(z, 11) + 1).to(torch::kDouble) * std::ldexp(1.0, -53);
}

std::vector<int64_t> row_keys(const SamplingOptions& o, int64_t rows) {
  at::Generator generator = o.generator.defined() ? o.generator : at::make_generator<at::CPUGeneratorImpl>(o.seed);
  std::lock_guard<std::mutex> lock(generator.mutex());
  auto* cpu = generator.get<at::CPUGeneratorImpl>();
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < rows; ++i) keys.push_back(as_signed(cpu->random64()));
  return keys;
}

Rollout sample(NextTokenModel& model, const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
               const SamplingOptions& o) {
  validate(o);
  const torch::Tensor mask = checked_prompt_mask(prompts, prompt_mask);
  torch::NoGradGuard no_grad;
  const torch::Device device = prompts.device();
  const int64_t batch = prompts.size(0);
  const auto index_options = torch::TensorOptions(torch::kLong).device(device);
  const torch::Tensor keys = torch::tensor(row_keys(o, batch), torch::kLong).to(device);
  const RowSampling rows = RowSampling::repeat(o, batch, device);
  const torch::Tensor stops =
      torch::tensor(o.stop_tokens.empty() ? std::vector<int64_t>{-1} : o.stop_tokens, torch::kLong).to(device);
  torch::Tensor finished = torch::zeros({batch}, torch::TensorOptions(torch::kBool).device(device));

  std::vector<torch::Tensor> tokens, logps, valids;
  torch::Tensor logits = model.prefill(prompts, mask);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    auto [token, logp] = draw_tokens(logits, rows, counter_uniform(keys, torch::full({batch}, step, index_options)));
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

  return make_rollout(prompts, mask, torch::stack(tokens, 1), torch::stack(valids, 1), torch::stack(logps, 1));
}

torch::Tensor checked_prompt_mask(const torch::Tensor& prompts, const torch::Tensor& prompt_mask) {
  if (prompts.dim() != 2 || prompts.scalar_type() != torch::kLong || prompts.size(1) == 0)
    fail("generate: prompts must be int64 [B, P] with P >= 1; got {} {}", c10::toString(prompts.scalar_type()),
         c10::str(prompts.sizes()));
  const torch::Tensor mask = prompt_mask.defined() ? prompt_mask.to(torch::kBool) : torch::ones_like(prompts, torch::kBool);
  if (mask.sizes() != prompts.sizes())
    fail("generate: prompt_mask has shape {}, prompts {}; they must match", c10::str(mask.sizes()),
         c10::str(prompts.sizes()));
  return mask;
}

Rollout make_rollout(const torch::Tensor& prompts, const torch::Tensor& prompt_mask, const torch::Tensor& generated,
                     const torch::Tensor& generated_valid, const torch::Tensor& logp) {
  const torch::Device device = prompts.device();
  Rollout r;
  r.prompt_length = prompts.size(1);
  r.tokens = torch::cat({prompts, generated.to(device)}, 1);
  r.attention_mask = torch::cat({prompt_mask, generated_valid.to(device)}, 1);
  r.response_mask = torch::cat({torch::zeros_like(prompt_mask), generated_valid.to(device)}, 1);
  r.logp = torch::cat({torch::zeros(prompt_mask.sizes(), torch::TensorOptions(torch::kFloat).device(device)),
                       logp.to(device, torch::kFloat)},
                      1);
  r.num_generated = generated_valid.to(device).sum(1);
  return r;
}

}  // namespace turnrl
