#pragma once
// PPO policy loss with asymmetric clipping (DAPO's clip-higher), dual clip for negative
// advantages, mismatch weights multiplied in (detached), loss aggregation modes, entropy bonus and
// a KL loss term. Formulas and the modes: docs/algorithms.md.
//
// Per token, with ρ = exp(clamp(logp − old_logp, ±20)) and advantage A:
//   ℓ_clip = max(−A ρ, −A clip(ρ, 1 − clip_low, 1 + clip_high))
//   ℓ      = min(−A c, ℓ_clip) if A < 0 (dual clip, c = dual_clip), else ℓ_clip
//   ℓ     ← w ℓ        (w: mismatch weights, no gradient)
// then loss = aggregate(ℓ) / loss_scale_factor − entropy_coef · aggregate(entropy)
//             + kl_loss_coef · aggregate(kl(logp, ref_logp)).
#include <map>
#include <string>

#include <torch/types.h>

#include "turnrl/algo/kl.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

// logp − old_logp is clamped to ±kPPORatioLogBound before exp, as verl does; outside, the ratio
// (and its gradient) saturates.
constexpr double kPPORatioLogBound = 20.0;

// How token losses ℓ (mask m, rows r = turns, padded width L) become one scalar.
enum class LossAggMode {
  token_mean,               // Σ ℓ m / Σ m
  seq_mean_token_sum,       // mean over non-empty rows of S_r = Σ_k ℓ m   (the recipe)
  seq_mean_token_mean,      // mean over non-empty rows of S_r / Σ_k m
  seq_mean_token_sum_norm,  // Σ_r S_r / norm_length (Dr.GRPO's constant; default the padded width L)
  seq_sum_no_norm,          // Σ_r S_r
};

struct PPOLossOptions {
  double clip_low = 0.2;    // ε_low
  double clip_high = 0.28;  // ε_high (clip-higher)
  double dual_clip = 3.0;   // c > 1; 0 disables the dual clip
  LossAggMode agg_mode = LossAggMode::seq_mean_token_sum;
  double loss_scale_factor = 1000;  // the aggregated policy loss is divided by this (the recipe: 1000)
  double norm_length = 0;           // seq_mean_token_sum_norm divisor; 0 = the padded width L
  double entropy_coef = 0;          // entropy bonus (needs PolicyLossInputs::entropy)
  double kl_loss_coef = 0;          // KL loss term (needs PolicyLossInputs::ref_logp)
  KLType kl_type = KLType::low_var_kl;
  // One pass computing the loss and its gradient, with a hand-written backward (a custom autograd
  // function saving one [N, L] tensor): a loop over rows on CPU, two kernels on CUDA (float and
  // double), whole-tensor ops elsewhere. false: the plain autograd composition of separate ops.
  bool fused = true;

  PPOLossOptions& with_clip(double low, double high) { clip_low = low; clip_high = high; return *this; }
  PPOLossOptions& with_dual_clip(double v) { dual_clip = v; return *this; }
  PPOLossOptions& with_agg_mode(LossAggMode v) { agg_mode = v; return *this; }
  PPOLossOptions& with_loss_scale_factor(double v) { loss_scale_factor = v; return *this; }
  PPOLossOptions& with_norm_length(double v) { norm_length = v; return *this; }
  PPOLossOptions& with_entropy_coef(double v) { entropy_coef = v; return *this; }
  PPOLossOptions& with_kl_loss(double coef, KLType type = KLType::low_var_kl) { kl_loss_coef = coef; kl_type = type; return *this; }
  PPOLossOptions& with_fused(bool v) { fused = v; return *this; }
};

struct PolicyLossInputs {
  torch::Tensor logp;           // float [N, L] current policy log-probs of the sampled tokens (requires grad)
  torch::Tensor old_logp;       // float [N, L] log-probs before the update (no gradient)
  torch::Tensor advantages;     // float [N] one per turn (broadcast over its tokens) or [N, L] per token
  torch::Tensor response_mask;  // bool  [N, L] tokens that count (after mismatch rejection)
  torch::Tensor weights;        // float [N, L] optional: mismatch weights (MismatchResult::weights); detached
  torch::Tensor entropy;        // float [N, L] optional: per-token entropy (needed when entropy_coef != 0)
  torch::Tensor ref_logp;       // float [N, L] optional: reference log-probs (needed when kl_loss_coef != 0)
};

// 0-dim tensors on the inputs' device; token fractions and means are over response_mask.
struct PolicyLossMetrics {
  torch::Tensor pg_loss;           // the aggregated, scaled PPO term
  torch::Tensor clip_frac;         // clip_frac_lower + clip_frac_upper
  torch::Tensor clip_frac_lower;   // ρ < 1 − ε_low, or dual-clipped
  torch::Tensor clip_frac_upper;   // ρ > 1 + ε_high and not dual-clipped
  torch::Tensor clip_frac_dual;    // A < 0 and −A c < ℓ_clip
  torch::Tensor approx_kl;         // masked mean of old_logp − logp
  torch::Tensor ratio_mean;        // masked mean ρ
  torch::Tensor ratio_max;         // masked max ρ (0 when nothing is valid)
  torch::Tensor nonzero_weight_fraction;  // valid tokens with w ≠ 0 (1 without weights)
  torch::Tensor entropy;           // masked mean entropy (undefined without entropy)
  torch::Tensor kl_loss;           // aggregated KL term before its coefficient (undefined when off)

  // Host values under "actor/<name>" (synchronises); undefined fields are left out.
  std::map<std::string, double> to_map() const;
};

struct PolicyLossResult {
  torch::Tensor loss;  // 0-dim, differentiable in logp (and entropy)
  PolicyLossMetrics metrics;
};

// The full policy loss. Masked tokens contribute nothing to the loss or the gradient, whatever
// their values (NaN and inf included) in every input.
PolicyLossResult policy_loss(const PolicyLossInputs& inputs, const PPOLossOptions& options = {});

// The per-token PPO loss ℓ (before weights), [N, L], 0 on masked tokens; plain differentiable ops.
// advantages as in PolicyLossInputs.
torch::Tensor ppo_token_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& advantages,
                             const torch::Tensor& response_mask, const PPOLossOptions& options = {});

// Aggregates token values under `mode` (no loss_scale_factor): the scalar definitions of
// LossAggMode, rows with an empty mask counted nowhere. norm_length 0 means the padded width.
torch::Tensor aggregate_loss(const torch::Tensor& token_values, const torch::Tensor& response_mask, LossAggMode mode,
                             double norm_length = 0);

// Reads the YAML keys clip_low, clip_high, dual_clip, agg_mode, loss_scale_factor, norm_length,
// entropy_coef, kl_loss_coef, kl_type, fused.
void read_options(ConfigReader& reader, PPOLossOptions& options);
// Writes the section's keys (what read_options reads), with their help when annotating.
void write_options(ConfigWriter& writer, const PPOLossOptions& options);

// "token-mean" | "seq-mean-token-sum" | "seq-mean-token-mean" | "seq-mean-token-sum-norm" |
// "seq-sum-no-norm" (verl's names); throws naming `field`.
LossAggMode parse_loss_agg_mode(const std::string& name, const std::string& field = "policy_loss.agg_mode");
const char* to_string(LossAggMode mode);

}  // namespace turnrl
