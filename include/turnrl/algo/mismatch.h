#pragma once
// Mismatch correction between the rollout engine's and the trainer's log-probabilities of the same
// sampled tokens (docs/algorithms.md, the reference's "MRS"). From the per-token log ratio
//
//   lr = old_logp − rollout_logp = log(π_trainer / π_rollout)      (0 on masked tokens)
//
// it builds importance ratios at five levels, truncated importance-sampling (TIS) weights,
// rejection masks (masked IS) and a per-turn veto, plus diagnostics. Formulas: docs/algorithms.md.
//
// Tensor arguments shared by the functions below:
//   old_logp      float [N, L]  trainer log-probs of the sampled tokens (before the update)
//   rollout_logp  float [N, L]  rollout-engine log-probs of the same tokens
//   response_mask bool  [N, L]  true on the policy's own tokens; false entries are ignored even
//                               when their values are NaN or inf
//   traj          int64 [N]     trajectory id of each row (turn), in [0, num_trajectories); may be
//                               undefined: every row is then its own trajectory (single-turn data)
//
// Numerics: every exponent is clamped to ±kMismatchSafetyBound before exp (the reference's
// SAFETY_BOUND), and per-token log ratios to ±kMismatchLogRatioLimit before any sum, so finite
// inputs never give inf or NaN. NaN on a valid token throws turnrl::Error naming the row.
#include <map>
#include <string>

#include <torch/types.h>

#include "turnrl/core/turn_batch.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

constexpr double kMismatchSafetyBound = 20.0;
constexpr double kMismatchLogRatioLimit = 1e4;

// The level at which log ratios are aggregated into one ratio (docs/algorithms.md).
enum class MismatchLevel {
  off,        // no importance weighting / no rejection
  token,      // ρ_k = exp(lr_k), per token
  turn,       // exp(Σ_k lr_k) over the row (one turn), broadcast to its tokens
  turn_geo,   // exp(mean_k lr_k) over the row
  sequence,   // exp(Σ lr) over all tokens of all turns of the trajectory, broadcast to its rows
  geometric,  // exp(mean lr) over all tokens of all turns of the trajectory (the recipe's RS)
};

struct MismatchOptions {
  // Truncated IS: weight = min(ρ_level, is_cap) on kept tokens. Off in the recipe.
  MismatchLevel is_level = MismatchLevel::off;
  double is_cap = 2.0;
  // Rejection (masked IS): a token / row / trajectory is kept iff its ratio lies in
  // [rs_lower, rs_upper] (inclusive). The recipe: geometric in [0.999, 1.001]. IcePop (token
  // ratios outside a band get no gradient) is rs_level token with is_level token, is_cap >= rs_upper:
  // see docs/algorithms.md for the one difference (loss denominators).
  MismatchLevel rs_level = MismatchLevel::geometric;
  double rs_lower = 0.999;
  double rs_upper = 1.001;
  // k3 rejection (verl's token_k3 / seq_sum_k3 / seq_mean_k3): with k3 = ρ − lr − 1 per token, a
  // token / row / trajectory is kept iff the level's aggregate of k3 is <= rs_k3_upper: the token's
  // own (token), Σ over the row (turn), its mean (turn_geo), Σ over the trajectory (sequence), its
  // mean (geometric). Combined with rs_level by logical AND. Off in the recipe.
  MismatchLevel rs_k3_level = MismatchLevel::off;
  double rs_k3_upper = 0.01;
  // Per-turn veto: a row is rejected when any valid token has ρ < veto_threshold (lr < ln thr).
  // 0 disables. The recipe: 1e-4.
  double veto_threshold = 1e-4;
  // Bypass (verl's bypass_mode): the trainer skips recomputing old_logp and uses rollout_logp in
  // its place, so the PPO ratio is π_θ/π_rollout. compute_mismatch then ignores old_logp (it may
  // be undefined) and every other option: the mask is kept and every valid token's weight is 1.
  bool bypass = false;
  // Throw on NaN log-probs of valid tokens (and, on CUDA, on traj ids out of range): one device
  // synchronisation (on CUDA a read of a few bytes of flags).
  bool check_finite = true;
  // Two passes over [N, L] (row statistics, then mask and weights) with no [N, L] temporaries:
  // loops over rows in parallel on CPU, hand-written kernels on CUDA (float and double). false,
  // or another device: whole-tensor ops. Same results.
  bool fused = true;

  MismatchOptions& with_is(MismatchLevel level, double cap = 2.0) { is_level = level; is_cap = cap; return *this; }
  // lower defaults to 1/upper, as in the reference.
  MismatchOptions& with_rs(MismatchLevel level, double upper) { return with_rs(level, 1.0 / upper, upper); }
  MismatchOptions& with_rs(MismatchLevel level, double lower, double upper) {
    rs_level = level; rs_lower = lower; rs_upper = upper; return *this;
  }
  MismatchOptions& with_rs_k3(MismatchLevel level, double upper) { rs_k3_level = level; rs_k3_upper = upper; return *this; }
  MismatchOptions& with_veto_threshold(double v) { veto_threshold = v; return *this; }
  MismatchOptions& with_bypass(bool v) { bypass = v; return *this; }
  MismatchOptions& with_check_finite(bool v) { check_finite = v; return *this; }
  MismatchOptions& with_fused(bool v) { fused = v; return *this; }
};

// Scalar diagnostics, each a 0-dim tensor on the inputs' device (no synchronisation until read).
// Token statistics are over the input response_mask.
struct MismatchDiagnostics {
  torch::Tensor log_ratio_abs_mean;    // masked mean |lr|
  torch::Tensor log_ratio_abs_max;     // masked max |lr| (0 when nothing is valid)
  torch::Tensor k3_kl;                 // masked mean (e^lr − lr − 1): k3 estimate of KL(rollout || trainer)
  torch::Tensor mismatch_kl;           // masked mean (rollout_logp − old_logp): k1 estimate of the same
  torch::Tensor chi2_token;            // masked mean ρ_token² − 1
  torch::Tensor chi2_sequence;         // mean over trajectories of exp(2 Σ lr) − 1
  torch::Tensor training_ppl;          // mean over non-empty rows of exp(−masked mean old_logp)
  torch::Tensor rollout_ppl;           // mean over non-empty rows of exp(−masked mean rollout_logp)
  torch::Tensor ess;                   // normalised effective sample size of the IS weights, in (0, 1]
  torch::Tensor rejected_token_fraction;       // valid tokens cleared by rejection or veto
  torch::Tensor rejected_row_fraction;         // non-empty rows left with no valid token
  torch::Tensor rejected_trajectory_fraction;  // non-empty trajectories left with no valid token
  torch::Tensor vetoed_row_fraction;           // non-empty rows hit by the veto

  // Host values under "mismatch/<name>" (synchronises).
  std::map<std::string, double> to_map() const;
};

struct MismatchResult {
  torch::Tensor response_mask;  // bool  [N, L]: the input mask with rejected tokens/rows cleared
  torch::Tensor weights;        // float [N, L], detached: TIS weight (1 when IS is off) on kept
                                //              tokens, 0 elsewhere; multiply it into the token loss
  MismatchDiagnostics diagnostics;
};

// Per-token log ratio old − rollout: 0 on masked tokens, clamped to ±kMismatchLogRatioLimit
// (±inf inputs saturate; −inf − −inf counts as 0). Computed in float32 or wider.
torch::Tensor mismatch_log_ratio(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                                 const torch::Tensor& response_mask);

// The log of the level's ratio, unclamped: [N, L] for token, [N, 1] for the other levels
// (broadcastable to [N, L]). `log_ratio` must be 0 on masked tokens (mismatch_log_ratio).
torch::Tensor aggregate_log_ratio(const torch::Tensor& log_ratio, const torch::Tensor& response_mask,
                                  MismatchLevel level, const torch::Tensor& traj, int64_t num_trajectories);

// exp(clamp(aggregate_log_ratio, ±kMismatchSafetyBound)), same shape as aggregate_log_ratio.
torch::Tensor importance_ratio(const torch::Tensor& log_ratio, const torch::Tensor& response_mask,
                               MismatchLevel level, const torch::Tensor& traj, int64_t num_trajectories);

// The full correction: rejection (rs_level, rs_k3_level), then the veto, then TIS weights
// (is_level) on the kept tokens. All aggregates use the input response_mask (a token vetoed in one
// turn still counts in its trajectory's geometric mean), as the reference does. With bypass,
// old_logp is not read.
MismatchResult compute_mismatch(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                                const torch::Tensor& response_mask, const torch::Tensor& traj,
                                int64_t num_trajectories, const MismatchOptions& options = {});

// The same on a TurnBatch: reads old_logp (not with bypass), rollout_logp, response_mask, traj and
// num_trajectories (call finalize() first).
MismatchResult compute_mismatch(const TurnBatch& batch, const MismatchOptions& options = {});

// Reads the YAML keys is_level, is_cap, rs_level, rs_lower, rs_upper, rs_k3_level, rs_k3_upper,
// veto_threshold, bypass, check_finite, fused. When rs_upper is given without rs_lower, rs_lower =
// 1/rs_upper. With bypass: true, a key that would have no effect (is_level, rs_level,
// rs_k3_level other than off, veto_threshold other than 0) is an error naming it.
void read_options(ConfigReader& reader, MismatchOptions& options);
// Writes the section's keys (what read_options reads), with their help when annotating.
void write_options(ConfigWriter& writer, const MismatchOptions& options);

// "off" | "token" | "turn" | "turn_geo" | "sequence" | "geometric"; throws naming `field`.
MismatchLevel parse_mismatch_level(const std::string& name, const std::string& field = "mismatch.rs_level");
const char* to_string(MismatchLevel level);

}  // namespace turnrl
