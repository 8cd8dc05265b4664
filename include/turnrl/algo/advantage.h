#pragma once
// Advantage estimators. Every estimator has the same signature
//
//   torch::Tensor estimator(const TurnBatch& batch, const torch::Tensor& returns,
//                           const AdvantageOptions& options)
//
//   batch    the rollout batch; reads group, traj, turn, turn_mask (and reward/values for gae)
//   returns  float [N]: per-turn returns from compute_returns()
//   result   float [N]: one advantage per turn (the caller broadcasts it over the turn's tokens
//            with response_mask). Turns with turn_mask false get 0 and never enter a baseline.
//
// and is registered under the name a config uses. Formulas: docs/algorithms.md.
// Non-finite returns on unmasked turns throw turnrl::Error naming the row (check_finite).
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "turnrl/core/turn_batch.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

// What a group of one (no other sample to compare with) gets.
enum class SingletonAdvantage {
  raw_return,  // A = G: no baseline, as the reference code does (the default)
  zero,        // A = 0: no signal without a comparison
};

// Which samples share a baseline, for the estimators that offer a choice (grpo, dr_grpo).
enum class Grouping {
  turn,        // same group and same turn index: the multi-turn reference's grouping
  trajectory,  // same group; the trajectory's score is its return at turn 0, broadcast to its turns
};

struct AdvantageOptions {
  SingletonAdvantage singleton = SingletonAdvantage::raw_return;
  Grouping grouping = Grouping::turn;
  double std_epsilon = 1e-6;  // grpo: A = (G - mean) / (std + eps); std < 1e-6 is taken as 1
  double gamma = 1.0;         // gae
  double lambda = 1.0;        // gae
  bool whiten = true;         // gae: whiten over the batch's valid turns, as verl does
  bool check_finite = true;   // reject NaN/inf returns on unmasked turns
  // trloo on float32 CUDA tensors: one fused kernel instead of ~40 launch-bound tensor ops (same
  // arithmetic, group sums accumulated in double). Off = always the tensor-op path.
  bool fused_cuda = true;

  AdvantageOptions& with_singleton(SingletonAdvantage v) { singleton = v; return *this; }
  AdvantageOptions& with_grouping(Grouping v) { grouping = v; return *this; }
  AdvantageOptions& with_std_epsilon(double v) { std_epsilon = v; return *this; }
  AdvantageOptions& with_gamma(double v) { gamma = v; return *this; }
  AdvantageOptions& with_lambda(double v) { lambda = v; return *this; }
  AdvantageOptions& with_whiten(bool v) { whiten = v; return *this; }
  AdvantageOptions& with_check_finite(bool v) { check_finite = v; return *this; }
  AdvantageOptions& with_fused_cuda(bool v) { fused_cuda = v; return *this; }
};

// Turn-level REINFORCE leave-one-out (the paper's TRLOO). For turn t of trajectory i in group g,
// the baseline is the mean return of the *other* unmasked trajectories of g that have a turn t:
// A = G - mean_{j != i} G_j = N/(N-1) * (G - mean). No std normalisation.
torch::Tensor trloo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options);

// Trajectory-level leave-one-out (RLOO): trajectories of a group compared on their return at turn
// 0; the trajectory's advantage goes to each of its unmasked turns. Equals trloo for one-turn
// trajectories.
torch::Tensor rloo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options);

// GRPO: (G - mean) / (std + eps) with the self-inclusive group mean and unbiased std; N = 1 gives
// mean 0, std 1; std < 1e-6 counts as 1.
torch::Tensor grpo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options);

// Dr.GRPO: G - mean (self-inclusive), no std. With turn grouping this is the reference's
// multi-turn "grpo". N = 1 follows options.singleton.
torch::Tensor dr_grpo_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options);

// REINFORCE++: returns whitened over all unmasked turns of the batch (mean and unbiased std),
// A = (G - mean) * rsqrt(var + 1e-8).
torch::Tensor reinforce_pp_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options);

// REINFORCE: A = G, no baseline.
torch::Tensor reinforce_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options);

// Turn-level GAE with a critic: delta_t = r_t + gamma V_{t+1} - V_t (V after the last turn is 0),
// A_t = delta_t + gamma lambda A_{t+1}; reads batch.reward (masked) and batch.values, ignores
// `returns`. Whitened over the batch when options.whiten.
torch::Tensor gae_advantage(const TurnBatch& batch, const torch::Tensor& returns, const AdvantageOptions& options);

// --- registry -------------------------------------------------------------------------------
using AdvantageEstimator =
    std::function<torch::Tensor(const TurnBatch&, const torch::Tensor&, const AdvantageOptions&)>;

// The estimator registered under `name`; throws turnrl::Error listing the registered names.
const AdvantageEstimator& advantage_estimator(const std::string& name);

// Registers (or replaces) a user estimator under `name`.
void register_advantage_estimator(const std::string& name, AdvantageEstimator estimator);

// Registered names, sorted: gae, dr_grpo, grpo, reinforce, reinforce_pp, rloo, trloo, and any
// user additions.
std::vector<std::string> advantage_estimator_names();

// Reads the YAML keys singleton, grouping, std_epsilon, gamma, lambda, whiten, check_finite
// (see docs/configuration.md) into `options`; unknown keys are left for the caller's finish().
void read_options(ConfigReader& reader, AdvantageOptions& options);
// Writes the section's keys (what read_options reads), with their help when annotating.
void write_options(ConfigWriter& writer, const AdvantageOptions& options);

// Parses option enums from config strings; throw naming the field and allowed values.
SingletonAdvantage parse_singleton_advantage(const std::string& name, const std::string& field = "advantage.singleton");
Grouping parse_grouping(const std::string& name, const std::string& field = "advantage.grouping");
const char* to_string(SingletonAdvantage v);
const char* to_string(Grouping v);

}  // namespace turnrl
