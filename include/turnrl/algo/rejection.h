#pragma once
// Rejection steps and group filters applied between the reward and the advantage
// (docs/rewards.md). Two kinds of removal, as in the reference:
//   * masking a turn out of training (TurnBatch.turn_mask false): out of the loss and out of
//     every baseline, reward zeroed (the meaningful-turn mask, trajectory-wide truncation);
//   * rejecting a turn (its TurnBatch.response_mask row cleared): no gradient of its own, but it
//     keeps its reward in the returns and its place in the baselines (PRS, like MRS).
// Group filters select whole groups (prompts). Every step returns what it removed and why, for
// metrics. All work is vectorised over the flat batch; loops run only over turn positions or
// over (few) groups on the host to build reports.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/types.h>

#include "turnrl/core/turn_batch.h"
#include "turnrl/algo/coverage_source.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

// --- meaningful-turn mask (the reference's mask_void_turn) -------------------------------------

// bool [N]: false for a turn with reward <= 0 (or NaN) that comes after an earlier turn of the
// same trajectory with reward > 0. Reads batch.reward as given (before any masking).
torch::Tensor meaningful_turns(const TurnBatch& batch);

struct TurnMaskReport {
  int64_t masked = 0;         // turns newly masked by this step
  torch::Tensor masked_rows;  // bool [N]: the rows newly masked
};

// turn_mask &= meaningful_turns(batch), and the reward of every masked turn becomes 0 (the
// reference's apply_loss_mask_to_rewards).
TurnMaskReport apply_meaningful_turn_mask(TurnBatch& batch);

// --- profiling-based rejection sampling (PRS) ---------------------------------------------

enum class PrsLevel {
  turn,       // each turn's own coverage (the recipe)
  geometric,  // the geometric mean of the coverages of the trajectory's live turns, per turn
};

struct PrsOptions {
  bool enabled = true;
  PrsLevel level = PrsLevel::turn;
  double threshold = 0.3;           // p_keep = clamp((c - threshold) / factor, 0, 1)
  double factor = 0.1;              // 0: a step, p_keep = 1[c >= threshold]
  double speedup_threshold = -1.0;  // >= 0: also keep when speedup >= this (OR rule); < 0: off
  bool round_coverage = true;       // c rounded to 2 decimals, as the reference's info dict is
  CoverageSource coverage_source = CoverageSource::true_share;

  PrsOptions& with_enabled(bool v) { enabled = v; return *this; }
  PrsOptions& with_level(PrsLevel v) { level = v; return *this; }
  PrsOptions& with_threshold(double v) { threshold = v; return *this; }
  PrsOptions& with_factor(double v) { factor = v; return *this; }
  PrsOptions& with_speedup_threshold(double v) { speedup_threshold = v; return *this; }
  PrsOptions& with_round_coverage(bool v) { round_coverage = v; return *this; }
  PrsOptions& with_coverage_source(CoverageSource v) { coverage_source = v; return *this; }

  // Throws turnrl::Error naming the field ("rejection.prs.threshold") and the allowed range.
  void validate() const;
};

// Per-turn PRS inputs, all [N] in the batch's row order (any device; moved to the batch's).
struct PrsInputs {
  torch::Tensor coverage;  // float: the selected coverage, unrounded
  torch::Tensor correct;   // bool: only correct turns are subject to PRS
  torch::Tensor speedup;   // float: for the optional OR rule
};

// float [N]: each turn's keep probability (1 for incorrect turns).
torch::Tensor prs_keep_probability(const TurnBatch& batch, const PrsInputs& inputs, const PrsOptions& options);

struct PrsReport {
  int64_t subject = 0;             // correct turns that still had tokens: the ones PRS may drop
  int64_t dropped = 0;             // rows cleared by this step
  double expected_dropped = 0;     // sum of (1 - p_keep) over the subject turns
  torch::Tensor keep_probability;  // float [N]
  torch::Tensor dropped_rows;      // bool [N]
};

// Draws keep ~ Bernoulli(p_keep) per row and clears the response_mask rows of dropped turns
// (which must be defined). The uniforms are drawn on the CPU from `generator` (a CPU generator),
// one per row whatever the probabilities, so a seed gives the same draws on CPU and CUDA batches.
// Disabled options return a report with nothing dropped.
PrsReport apply_prs(TurnBatch& batch, const PrsInputs& inputs, const PrsOptions& options, at::Generator generator);
PrsReport apply_prs(TurnBatch& batch, const PrsInputs& inputs, const PrsOptions& options, uint64_t seed);

// --- truncation handling --------------------------------------------------------------------

// What to do with turns cut off by a length or turn limit (the caller says which).
enum class TruncationHandling {
  keep,             // nothing (the reference)
  reject_turn,      // clear the turn's response_mask row: no gradient, still a baseline (DAPO's overlong filter)
  mask_trajectory,  // turn_mask false and reward 0 on every turn of a trajectory with a truncated turn
};

struct TruncationReport {
  int64_t truncated = 0;        // truncated turns given
  int64_t affected = 0;         // rows changed
  torch::Tensor affected_rows;  // bool [N]
};

// truncated: bool [N].
TruncationReport handle_truncation(TurnBatch& batch, const torch::Tensor& truncated, TruncationHandling mode);

// --- group filters (the recipe's rejection sampling) -----------------------------------------

struct GroupFilterOptions {
  // Drop groups whose last-turn rewards (masked, one per trajectory) have an unbiased std below
  // this (the recipe's rejection_sample: 1e-3); 0 disables. A one-trajectory group has no std
  // and is left to min_group_size, as in the reference.
  double min_last_turn_std = 1e-3;
  // Drop groups whose trajectories all have identical (masked) reward sequences: every
  // group-baseline advantage is 0 there.
  bool drop_all_equal = false;
  // Drop groups with fewer trajectories. 0: the reference's n/2 + 1 (n = group_size).
  int64_t min_group_size = 0;
  // n, the trajectories per prompt. 0: the largest group in the batch.
  int64_t group_size = 0;
  // B: at most this many groups train (complete groups first, then others, each in a seeded
  // random order; the rest are discarded). When fewer than B·n trajectories survive, the step is
  // skipped and the survivors carried over (GroupCarryOver). 0: no target, keep every survivor.
  int64_t target_groups = 0;
  // Dynamic sampling: rollout rounds allowed to collect target_groups informative groups.
  int max_sampling_rounds = 1;
  uint64_t seed = 1;  // the reference's generator seed for the group selection

  GroupFilterOptions& with_min_last_turn_std(double v) { min_last_turn_std = v; return *this; }
  GroupFilterOptions& with_drop_all_equal(bool v) { drop_all_equal = v; return *this; }
  GroupFilterOptions& with_min_group_size(int64_t v) { min_group_size = v; return *this; }
  GroupFilterOptions& with_group_size(int64_t v) { group_size = v; return *this; }
  GroupFilterOptions& with_target_groups(int64_t v) { target_groups = v; return *this; }
  GroupFilterOptions& with_max_sampling_rounds(int v) { max_sampling_rounds = v; return *this; }
  GroupFilterOptions& with_seed(uint64_t v) { seed = v; return *this; }

  void validate() const;
};

// What a group filter kept and removed (group ids of the filtered batch, ascending), and why.
struct GroupFilterReport {
  std::vector<int64_t> kept;
  std::vector<int64_t> low_std;      // last-turn reward std < min_last_turn_std
  std::vector<int64_t> all_equal;    // identical reward sequences
  std::vector<int64_t> too_small;    // fewer than min_group_size trajectories
  std::vector<int64_t> over_target;  // valid, but beyond target_groups: discarded
  int64_t kept_trajectories = 0;
  int64_t needed_trajectories = 0;  // target_groups · n; 0 without a target
  bool enough = true;               // kept_trajectories >= needed_trajectories (and something kept)
  torch::Tensor keep_rows;          // bool [N]: rows of kept groups
};

// Applies the filters in order (low std, all equal, too small, over target); a group is listed
// under the first reason that drops it. `generator` (CPU) orders the selection to target.
GroupFilterReport filter_groups(const TurnBatch& batch, const GroupFilterOptions& options, at::Generator generator);

// The recipe's carry-over buffer: survivors of a step with too few of them wait for the next.
//   TurnBatch batch = carry.merge(rollouts);       // stash first, ids remapped; empties the stash
//   ... rejection steps on `batch` ...
//   GroupSelection s = carry.select(batch);        // s.train false: step skipped, survivors stashed
class GroupCarryOver {
 public:
  explicit GroupCarryOver(GroupFilterOptions options);

  TurnBatch merge(const TurnBatch& batch);

  struct Selection {
    bool train = false;  // enough groups: train on `batch`
    TurnBatch batch;     // the kept rows (when train); ids as in the input
    GroupFilterReport report;
  };
  Selection select(const TurnBatch& batch);

  int64_t stashed_groups() const { return stashed_groups_; }
  int64_t stashed_rows() const { return stash_.size(); }
  const GroupFilterOptions& options() const { return options_; }

 private:
  GroupFilterOptions options_;
  at::Generator generator_;
  TurnBatch stash_;
  int64_t stashed_groups_ = 0;
};

// DAPO-style dynamic sampling: calls sample(round) (round = 0, 1, ...) until the informative
// groups collected (filter_groups without a target) reach options.target_groups, or
// options.max_sampling_rounds rounds have run. The result holds the first target_groups
// informative groups in arrival order (all of them when short), ids remapped.
struct DynamicSamplingResult {
  TurnBatch batch;
  int rounds = 0;
  int64_t informative_groups = 0;  // collected over all rounds (before truncation to the target)
  bool enough = false;
  std::vector<GroupFilterReport> reports;  // one per round
};
DynamicSamplingResult dynamic_sampling(const std::function<TurnBatch(int round)>& sample,
                                       const GroupFilterOptions& options);

// --- batch plumbing used by the filters -------------------------------------------------------

// The rows where keep (bool [N]) is true, every defined tensor sliced; ids kept, host sizes
// recomputed by finalize().
TurnBatch select_rows(const TurnBatch& batch, const torch::Tensor& keep);
// first's rows then second's, with second's group and trajectory ids shifted past first's bounds.
// Optional tensors must be defined in both or in neither; token tensors must share L.
TurnBatch concat_batches(const TurnBatch& first, const TurnBatch& second);

// --- options from YAML ----------------------------------------------------------------------

struct RejectionOptions {
  bool mask_void_turns = true;  // the meaningful-turn mask (on in the recipe)
  PrsOptions prs;
  GroupFilterOptions groups;
  TruncationHandling truncation = TruncationHandling::keep;
};

// Reads mask_void_turns, truncation, prs: {enabled, level, threshold, factor, speedup_threshold,
// round_coverage, coverage_source}, group_filter: {min_last_turn_std, drop_all_equal,
// min_group_size, group_size, target_groups, max_sampling_rounds, seed}; nested sections are
// finished here, the caller finishes `reader`. Validates.
void read_options(ConfigReader& reader, RejectionOptions& options);
// Writes the section's keys (what read_options reads), with their help when annotating.
void write_options(ConfigWriter& writer, const RejectionOptions& options);

const char* to_string(PrsLevel v);
const char* to_string(TruncationHandling v);
PrsLevel parse_prs_level(const std::string& name, const std::string& field = "rejection.prs.level");
TruncationHandling parse_truncation_handling(const std::string& name, const std::string& field = "rejection.truncation");

}  // namespace turnrl
