#pragma once
// Batched sampling from any model that gives next-token logits: temperature, top-k, top-p, stop
// tokens, a token budget and a seed. Every sampled token's log-prob is recorded under the
// distribution it was actually drawn from (after temperature, top-k and top-p): that is the
// rollout log-prob the mismatch correction compares with the trainer's recomputation.
//
// Randomness: each row draws from its own stream. sample() takes one 64-bit key per row from the
// options' generator (row_keys), and the row's n-th token uses counter_uniform(key, n). A row's
// tokens therefore do not depend on which other rows share its batch, which is what lets the
// generation engine (generation_engine.h) batch requests freely and still equal this sampler.
//
// Layout of prompts and rollouts: prompts are LEFT-padded ([B, P], prompt_mask false on the pads)
// so every row's next token goes to the same column; generated tokens follow in columns P..P+N-1.
// Positions are counted from each row's first valid token, so a left-padded row computes the same
// as the unpadded sequence.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/types.h>

namespace turnrl {

struct SamplingOptions {
  int64_t max_new_tokens = 256;
  // 0 means greedy (argmax). Greedy records the model's own log-prob (temperature 1, unfiltered)
  // because the sampling distribution is a point mass.
  double temperature = 1.0;
  int64_t top_k = 0;    // keep the k most likely tokens; 0 = off
  double top_p = 1.0;   // keep the smallest set whose probability reaches p; 1 = off
  std::vector<int64_t> stop_tokens;  // a row stops after emitting one (it is part of the response)
  int64_t pad_id = 0;   // written after a row has stopped (masked out everywhere)
  uint64_t seed = 0;    // same seed, same model, same prompts -> same rollout, on any device
  // A CPU generator to draw from instead of a fresh one seeded by `seed`: a multi-turn rollout
  // passes one generator to every turn, so its turns draw one continuing stream.
  at::Generator generator;
  bool use_cache = true;  // KV cache where the policy has one (TransformerPolicy)

  SamplingOptions& max_new(int64_t v) { max_new_tokens = v; return *this; }
  SamplingOptions& temp(double v) { temperature = v; return *this; }
  SamplingOptions& topk(int64_t v) { top_k = v; return *this; }
  SamplingOptions& topp(double v) { top_p = v; return *this; }
  SamplingOptions& stop(std::vector<int64_t> v) { stop_tokens = std::move(v); return *this; }
  SamplingOptions& pad(int64_t v) { pad_id = v; return *this; }
  SamplingOptions& rng_seed(uint64_t v) { seed = v; return *this; }
  SamplingOptions& rng(at::Generator v) { generator = std::move(v); return *this; }
  SamplingOptions& cache(bool v) { use_cache = v; return *this; }
};

// Throws turnrl::Error naming the field when an option is out of range.
void validate(const SamplingOptions& options);

// Result of generate(): the prompt and the generated continuation side by side, ready for
// Policy::forward_logp(tokens, attention_mask, response_mask) without any re-packing.
struct Rollout {
  torch::Tensor tokens;          // int64 [B, P+N] left-padded prompt, then generated tokens (pad after stop)
  torch::Tensor attention_mask;  // bool  [B, P+N] valid prompt tokens and generated tokens up to the stop
  torch::Tensor response_mask;   // bool  [B, P+N] generated tokens, stop token included
  torch::Tensor logp;            // float [B, P+N] rollout log-prob of each response token, 0 elsewhere
  torch::Tensor num_generated;   // int64 [B]      response length of each row
  int64_t prompt_length = 0;     // P; N = tokens.size(1) - P <= max_new_tokens
};

// Prompts of different lengths, left-padded with pad_id: {tokens int64 [B, P], mask bool [B, P]}.
std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id,
                                                 torch::Device device = torch::kCPU);

// prompt_mask as bool (all true when undefined), after checking that prompts are int64 [B, P] with
// P >= 1 and the mask has their shape; throws turnrl::Error naming what is wrong.
torch::Tensor checked_prompt_mask(const torch::Tensor& prompts, const torch::Tensor& prompt_mask);

// The Rollout of prompts [B, P] (mask [B, P]) followed by generated tokens [B, N], where
// generated_valid [B, N] marks each row's tokens and logp [B, N] their log-probs (0 elsewhere).
Rollout make_rollout(const torch::Tensor& prompts, const torch::Tensor& prompt_mask, const torch::Tensor& generated,
                     const torch::Tensor& generated_valid, const torch::Tensor& logp);

// Incremental next-token logits for a batch: what the sampler needs from a model.
class NextTokenModel {
 public:
  virtual ~NextTokenModel() = default;
  // Logits for the token after each prompt, [B, V] (any float dtype).
  virtual torch::Tensor prefill(const torch::Tensor& prompts, const torch::Tensor& prompt_mask) = 0;
  // Appends one token per row (valid false for rows that have stopped) and returns the logits of
  // the token after it, [B, V].
  virtual torch::Tensor extend(const torch::Tensor& token, const torch::Tensor& valid) = 0;
};

// Full-sequence logits function: tokens int64 [B, T], attention_mask bool [B, T] -> logits [B, T, V].
using LogitsFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

// A NextTokenModel without a cache: every step re-runs the whole sequence through `logits`.
// Quadratic in the length; right for users' modules and TorchScript files, and the reference the
// KV-cache path is tested against.
class RecomputeNextToken : public NextTokenModel {
 public:
  explicit RecomputeNextToken(LogitsFn logits) : logits_(std::move(logits)) {}
  torch::Tensor prefill(const torch::Tensor& prompts, const torch::Tensor& prompt_mask) override;
  torch::Tensor extend(const torch::Tensor& token, const torch::Tensor& valid) override;

 private:
  LogitsFn logits_;
  torch::Tensor tokens_, mask_;
};

// Runs the sampling loop (no autograd) until every row has stopped or max_new_tokens.
Rollout sample(NextTokenModel& model, const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
               const SamplingOptions& options);

// The sampling distribution for one step: log-probs [B, V] float32 after temperature, top-k and
// top-p (-inf on removed tokens). temperature must be > 0.
torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingOptions& options);

// Per-row sampling parameters of one step (SamplingOptions' temperature, top_k and top_p, which
// may differ between rows): what the generation engine samples a batch of requests with.
struct RowSampling {
  torch::Tensor temperature;  // float32 [B]; 0 = greedy
  torch::Tensor top_k;        // int64   [B]; 0 = off
  torch::Tensor top_p;        // float32 [B]; 1 = off
  bool filtered = true;       // false when no row uses top-k or top-p: the sort over the vocabulary is skipped

  // `rows` rows that all sample with `options`, on `device`.
  static RowSampling repeat(const SamplingOptions& options, int64_t rows, torch::Device device);
};

// log-probs [B, V] float32 of each row's sampling distribution, as sampling_log_probs; a greedy
// row gets the model's own log-softmax (temperature 1, unfiltered).
torch::Tensor sampling_log_probs(const torch::Tensor& logits, const RowSampling& rows);

// One token per row from logits [B, V]: the inverse CDF of the row's sampling distribution at
// uniform [B] (float64 in (0, 1]), or the argmax for a greedy row. Returns {token int64 [B],
// logp float32 [B]}, logp being the token's log-prob under the distribution it was drawn from.
std::pair<torch::Tensor, torch::Tensor> draw_tokens(const torch::Tensor& logits, const RowSampling& rows,
                                                    const torch::Tensor& uniform);

// The inverse CDF of each row of probs [B, V] (non-negative, not necessarily normalised) at uniform
// [B] (float64 in (0, 1]): the first index whose running sum reaches u times the row's total, and
// whose probability is positive. Found in two levels (the chunk of kInverseCdfChunk tokens whose
// running total reaches the target, then the index inside it), so a row costs one reduction and
// two short scans instead of a scan over the whole vocabulary (on an H100 that scan, 64 rows of
// 151936, took 245 us per decode step, more than a decoder layer). The same answer as a
// whole-row scan but where float rounding puts the target on a token's boundary.
inline constexpr int64_t kInverseCdfChunk = 256;
torch::Tensor inverse_cdf(const torch::Tensor& probs, const torch::Tensor& uniform);

// Stateless uniforms in (0, 1], float64 [B]: element b is the counter[b]-th output (0-based) of
// splitmix64 started at key[b] (int64 [B] each, read as unsigned), top 53 bits. Computed with
// integer tensor arithmetic, so every device gives the same numbers.
torch::Tensor counter_uniform(const torch::Tensor& key, const torch::Tensor& counter);

// `rows` stream keys drawn from options.generator (or a fresh CPU generator seeded by
// options.seed): the per-row keys of one sample() call.
std::vector<int64_t> row_keys(const SamplingOptions& options, int64_t rows);

}  // namespace turnrl
