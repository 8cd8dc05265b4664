#pragma once
// Kernel reward: one EvalResult (one turn's candidate) -> one turn reward and its breakdown.
// The three reward functions of the reference client (docs/rewards.md), the
// profiling-based reward (PR) and per-stage penalties. A multi-turn episode gets one reward
// per turn; returns are formed afterwards by algo/returns.h. Formulas and both coverage
// definitions: docs/rewards.md. No LibTorch here: rewards are plain values.
#include <optional>
#include <string>
#include <vector>

#include "turnrl/kernels/evaluator.h"
#include "turnrl/algo/coverage_source.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

// The reference client's reward functions, by the name a config uses.
enum class RewardFunction {
  speedup,      // calculate_reward_speedup (the recipe): w_c·1[correct] + w_p·speedup term (+ PR)
  weighted,     // calculate_reward_weighted: w_c·1[correct] + w_p·1[s >= 1 + eps] (+ PR)
  like_kernel,  // calculate_reward_like_kernel: a stepped table over speedup tiers (+ PR if enabled)
};

// How the speedup s enters the `speedup` function.
enum class SpeedupForm {
  linear,  // the reference: min(s, upper), zeroed below the lower bound
  log,     // ln(clamp(s, 1/upper, upper)), zeroed below the lower bound; negative for slowdowns
};

// What a turn's candidate achieved, as the reward sees it. Each failure class has a penalty.
enum class RewardOutcome {
  correct,
  format,     // no candidate / not in the required form (EvalError::format, stage none)
  compile,    // compile or load error
  runtime,    // runtime error, crash, timeout, memory or output limit, evaluator failure
  incorrect,  // ran but wrong: shape, mismatch, non-finite, or not accepted
  hacking,    // a reward-hacking check fired (the reference's decoy kernel)
};

// One tier of the like_kernel table: a correct candidate with speedup >= min_speedup scores
// `reward` (the first matching tier, tiers sorted by min_speedup descending).
struct SpeedupTier {
  double min_speedup;
  double reward;
};

struct KernelRewardOptions {
  RewardFunction function = RewardFunction::speedup;
  double correct_weight = 0.5;  // w_c (speedup, weighted): the reference's init_correct_weight
  double speedup_weight = 0.5;  // w_p (speedup, weighted): the reference's init_performance_weight
  SpeedupForm speedup_form = SpeedupForm::linear;
  double speedup_upper_bound = 3.0;  // U: clip (speedup_reward_upper_bound)
  double speedup_lower_bound = 0.0;  // clipped speedups below this score 0 (recipe 0; common default 1)
  double speedup_epsilon = 0.01;     // weighted: the speedup bonus needs s >= 1 + eps

  // Profiling-based reward: + coverage_weight · c for a correct candidate whose coverage c is at
  // least coverage_threshold (c clamped to [0, 1]).
  bool coverage_enabled = true;
  double coverage_weight = 0.5;
  double coverage_threshold = 0.0;
  CoverageSource coverage_source = CoverageSource::true_share;

  // Per-outcome rewards of failed turns. Unset: the function's reference value (0 for speedup and
  // weighted; like_kernel: format -1, compile -0.5, runtime -1, incorrect -0.3, hacking -1).
  std::optional<double> format_penalty, compile_penalty, runtime_penalty, incorrect_penalty, hacking_penalty;

  // like_kernel: the reference's table, and the reward of a correct candidate below every tier.
  std::vector<SpeedupTier> tiers = {{3.0, 1.0}, {2.0, 0.8}, {1.5, 0.6}, {1.2, 0.4}, {1.0, 0.2}};
  double below_tiers_reward = -0.1;

  KernelRewardOptions& with_function(RewardFunction v) { function = v; return *this; }
  KernelRewardOptions& with_correct_weight(double v) { correct_weight = v; return *this; }
  KernelRewardOptions& with_speedup_weight(double v) { speedup_weight = v; return *this; }
  KernelRewardOptions& with_speedup_form(SpeedupForm v) { speedup_form = v; return *this; }
  KernelRewardOptions& with_speedup_upper_bound(double v) { speedup_upper_bound = v; return *this; }
  KernelRewardOptions& with_speedup_lower_bound(double v) { speedup_lower_bound = v; return *this; }
  KernelRewardOptions& with_speedup_epsilon(double v) { speedup_epsilon = v; return *this; }
  KernelRewardOptions& with_coverage(bool v) { coverage_enabled = v; return *this; }
  KernelRewardOptions& with_coverage_weight(double v) { coverage_weight = v; return *this; }
  KernelRewardOptions& with_coverage_threshold(double v) { coverage_threshold = v; return *this; }
  KernelRewardOptions& with_coverage_source(CoverageSource v) { coverage_source = v; return *this; }
  KernelRewardOptions& with_penalty(RewardOutcome outcome, double v);
  KernelRewardOptions& with_tiers(std::vector<SpeedupTier> v, double below) { tiers = std::move(v); below_tiers_reward = below; return *this; }

  // The reward a failed turn with this outcome gets (explicit value or the function's default);
  // 0 for `correct`.
  double penalty(RewardOutcome outcome) const;

  // Throws turnrl::Error naming the field ("reward.coverage_threshold"), its value and the
  // allowed range.
  void validate() const;
};

// Reads the YAML keys function, correct_weight, speedup_weight, speedup_form, speedup_upper_bound,
// speedup_lower_bound, speedup_epsilon, coverage: {enabled, weight, threshold, source},
// penalties: {format, compile, runtime, incorrect, hacking}, tiers: {min_speedup: [..],
// reward: [..], below: x} into `options`, then validates. Unknown keys are left for the caller's
// finish() (the nested sections are finished here).
void read_options(ConfigReader& reader, KernelRewardOptions& options);
// Writes the section's keys (what read_options reads), with their help when annotating.
void write_options(ConfigWriter& writer, const KernelRewardOptions& options);

// A turn's reward and how it was made. For a failed turn reward == penalty and the terms are 0.
struct KernelReward {
  double reward = 0;
  double correctness = 0;  // w_c · 1[correct] (like_kernel: the tier's reward)
  double speedup = 0;      // the speedup term
  double coverage = 0;     // the PR term
  double penalty = 0;      // the failure's reward (0 for a correct turn)
  RewardOutcome outcome = RewardOutcome::format;
  std::string reason;  // "" when correct; e.g. "compile: compile", "hacking: lazy"
};

// Scores EvalResults with validated options. Hacking (any flag, or EvalError::hacking) wins over
// every other outcome, as the reference's decoy check forces correctness off.
class KernelRewardPolicy {
 public:
  explicit KernelRewardPolicy(KernelRewardOptions options = {});

  KernelReward score(const EvalResult& result) const;
  std::vector<KernelReward> score(const std::vector<EvalResult>& results) const;
  // Just the rewards, one per result (the TurnBatch.reward column before masking).
  std::vector<double> rewards(const std::vector<EvalResult>& results) const;

  const KernelRewardOptions& options() const { return options_; }

 private:
  KernelRewardOptions options_;
};

// The outcome class of an EvalResult (see RewardOutcome).
RewardOutcome classify(const EvalResult& result);
// The coverage number `source` selects, clamped to [0, 1]; non-finite values give 0.
double coverage_of(const EvalResult& result, CoverageSource source);

const char* to_string(RewardFunction v);
const char* to_string(SpeedupForm v);
const char* to_string(RewardOutcome v);
// Parse config names; throw naming `field` and the allowed values.
RewardFunction parse_reward_function(const std::string& name, const std::string& field = "reward.function");
SpeedupForm parse_speedup_form(const std::string& name, const std::string& field = "reward.speedup_form");

}  // namespace turnrl
