#pragma once
// The kernel domain's batch stages: rollout metrics from the KernelVerdict payloads and PRS. The
// kernel recipe (kernel_recipe.h) installs them; a custom kernel loop can run them itself.
#include <vector>

#include "turnrl/kernels/kernel_env.h"
#include "turnrl/algo/rejection.h"
#include "turnrl/rl/batch_stage.h"

namespace turnrl {

// PRS inputs from the kernel verdicts (rejection.h keeps PRS generic over coverage numbers).
// Builds PrsInputs (CPU, float64) from one EvalResult per row; correct means classify() ==
// correct (hacked turns are not correct).
PrsInputs prs_inputs(const std::vector<EvalResult>& results, CoverageSource source);

// The verdict of every row (rows whose payload is not a KernelVerdict throw).
std::vector<EvalResult> kernel_evals(const RolloutBatch& rollouts);

// Kernel statistics of a batch: "kernel/correct" (share of turns), "kernel/speedup" and
// "kernel/coverage" (means over correct turns), "kernel/<outcome>" (turn counts),
// "kernel/episode_correct" (share of episodes with a correct turn) and "kernel/fast@p" for each p
// (share of episodes whose best correct speedup reaches p).
Metrics kernel_rollout_metrics(const RolloutBatch& rollouts, const std::vector<double>& fast_p = {1.0, 1.2, 1.5, 2.0});

// kernel_rollout_metrics as a stage (place it first: it reports the batch before any filter).
class KernelMetricsStage : public BatchStage {
 public:
  explicit KernelMetricsStage(std::vector<double> fast_p) : fast_p_(std::move(fast_p)) {}
  Metrics apply(RolloutBatch& rollouts, const StageContext& context) override;

 private:
  std::vector<double> fast_p_;
};

// Fails the run (turnrl::Error) when every evaluation of the batch was an internal error of the
// evaluator, not a fault of a candidate (evaluator_health.h require_evaluator_worked): such a
// batch is not a training step. Place it first; no metrics.
class EvaluatorHealthStage : public BatchStage {
 public:
  Metrics apply(RolloutBatch& rollouts, const StageContext& context) override;
};

// PRS (rejection.prs) after the mismatch correction, draws seeded by stage_seed(seed, step, prs);
// metrics "prs/subject", "prs/dropped", "prs/drop_rate".
class PrsStage : public BatchStage {
 public:
  explicit PrsStage(PrsOptions options) : options_(std::move(options)) {}
  Point point() const override { return Point::after_mismatch; }
  Metrics apply(RolloutBatch& rollouts, const StageContext& context) override;

 private:
  PrsOptions options_;
};

}  // namespace turnrl
