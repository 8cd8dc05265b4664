#pragma once
// Batch stages: what the Trainer does to a step's rollouts between collection and the update, as a
// list of objects a user can extend. Each stage reads and edits the RolloutBatch (rewards, masks,
// rows) and returns metrics. The Trainer runs the stages at two points:
//   before_logp     after collection, before the old log-probs are recomputed: reward shaping,
//                   the meaningful-turn mask, group filters, the domain's rollout metrics
//   after_mismatch  after the mismatch correction has cleared rejected tokens: rejection
//                   sampling that must not disturb the mismatch diagnostics (the kernel domain's PRS)
// Reward shaping hook: a before_logp stage placed first that rewrites rollouts.batch.reward (the
// environment's rewards); "reward/..." metrics report the environment's rewards before shaping.
#include <cstdint>
#include <functional>
#include <memory>

#include "turnrl/algo/rejection.h"
#include "turnrl/rl/metrics.h"
#include "turnrl/rl/rollout.h"

namespace turnrl {

// Stages that draw random numbers: stage_seed(seed, step, stage) gives each its own stream per
// step, so a resumed run draws exactly what an uninterrupted one does, and a custom loop that
// calls the stages itself draws what Trainer::train_step does.
enum class StageSeed : uint64_t { task_order = 1, rollout = 2, prs = 3, group_filter = 4, epoch_order = 5 };

// Seed of `stage` at `step` from a run's seed (trainer.seed): splitmix64 of the three mixed.
uint64_t stage_seed(uint64_t seed, int64_t step, uint64_t stage);
inline uint64_t stage_seed(uint64_t seed, int64_t step, StageSeed stage) { return stage_seed(seed, step, uint64_t(stage)); }

// What a stage knows of the step it runs in.
struct StageContext {
  int64_t step = 0;   // 0-based RL step
  uint64_t seed = 0;  // the run's seed (trainer.seed), for stage_seed
};

class BatchStage {
 public:
  enum class Point { before_logp, after_mismatch };

  virtual ~BatchStage() = default;
  virtual Point point() const { return Point::before_logp; }
  // Edits `rollouts` in place (it may drop rows with select_rollout_rows); returns its metrics.
  virtual Metrics apply(RolloutBatch& rollouts, const StageContext& context) = 0;
};

// A stage from a function: e.g. reward shaping,
//   make_stage([](RolloutBatch& r, const StageContext&) { r.batch.reward = r.batch.reward.clamp(-1, 1); return Metrics{}; });
std::shared_ptr<BatchStage> make_stage(std::function<Metrics(RolloutBatch&, const StageContext&)> apply,
                                       BatchStage::Point point = BatchStage::Point::before_logp);

// The meaningful-turn mask (rejection.h apply_meaningful_turn_mask); metric "filter/void_turns"
// (0 when disabled: the key stays in every step's metrics).
class MeaningfulTurnMaskStage : public BatchStage {
 public:
  explicit MeaningfulTurnMaskStage(bool enabled = true) : enabled_(enabled) {}
  Metrics apply(RolloutBatch& rollouts, const StageContext& context) override;

 private:
  bool enabled_;
};

// Group filters (rejection.h filter_groups): drops whole groups, draws seeded by
// stage_seed(options.seed, step, group_filter); metrics "filter/groups_...".
class GroupFilterStage : public BatchStage {
 public:
  explicit GroupFilterStage(GroupFilterOptions options) : options_(std::move(options)) {}
  Metrics apply(RolloutBatch& rollouts, const StageContext& context) override;

 private:
  GroupFilterOptions options_;
};

}  // namespace turnrl
