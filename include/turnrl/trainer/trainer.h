#pragma once
// Trainer: multi-turn RL of a kernel-plan policy, composed from the stages of the other modules
// and driven by one TrainConfig. One step (the reference trainer's order, docs/training.md):
//
//   tasks = step_tasks(step)                        B tasks, in a seeded per-epoch order
//   r = collect_rollouts(tasks, n, sampling, seed)  n episodes per task, up to T turns, one
//                                                   evaluator batch per turn across all episodes
//   score(r)                                        per-turn rewards (PR included)
//   mask_void_turns(r)                              meaningful-turn mask
//   filter_groups(r)                                group filters (e.g. zero-variance groups)
//   recompute_old_logp(r.batch)                     trainer fp32 log-probs
//   w = correct_mismatch(r.batch)                   MRS rejection / TIS weights
//   reject_by_profile(r, seed)                      PRS
//   a = advantages(r.batch)                         returns -> registered estimator (trloo, ...)
//   update(r.batch, a, w.weights, seed)             PPO epochs over micro-batches, grad
//                                                   accumulation, clipping, AdamW + schedule
//
// Each stage is a public member that a custom loop can call on its own (examples/
// custom_trainer.cpp); train_step() runs them in order and returns the step's metrics, and
// train() adds the run directory: resolved config, metrics.jsonl, samples.jsonl, progress line,
// atomic checkpoints and --resume.
//
// Data parallel (trainer/distributed.h; docs/training.md "Several GPUs"): with W ranks each rank
// collects a contiguous shard of the step's B x n episodes (a group may span ranks), the shards are
// all-gathered so every rank holds the whole batch, and every stage up to the advantages runs on it
// identically (TRLOO sees whole groups). old log-probs are computed on row shards and gathered; the
// update's micro-batches are dealt round-robin to the ranks and the gradients summed in buckets, so
// each optimizer step equals one rank's step on the whole batch. Rank 0 alone writes the run
// directory.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "turnrl/algo/mismatch.h"
#include "turnrl/core/turn_batch.h"
#include "turnrl/env/task.h"
#include "turnrl/eval/evaluator.h"
#include "turnrl/model/sampler.h"
#include "turnrl/model/transformer.h"
#include "turnrl/trainer/config.h"
#include "turnrl/trainer/metrics.h"
#include "turnrl/trainer/plan_actions.h"

namespace turnrl {

class Communicator;

// One step's rollouts: the flat turn batch plus, per row, what the environment saw.
struct RolloutBatch {
  // group = the task's slot in the step, traj = episode, turn = 0-based turn; rows ordered by
  // (traj, turn). tokens / response_mask / rollout_logp are [N, S] (PlanActionSpace layout);
  // reward is filled by Trainer::score, turn_mask starts all true.
  TurnBatch batch;
  std::vector<EvalResult> evals;          // per row: the evaluator's verdict
  std::vector<std::string> observations;  // per row: the compact observation (the prompt)
  std::vector<std::string> actions;       // per row: the plan
  std::vector<std::string> task_ids;      // per group id
  std::vector<int> task_levels;           // per group id
  int64_t episodes = 0;
  double generate_seconds = 0;  // sampling actions
  double eval_seconds = 0;      // environment steps (evaluation)
};

// The rows where keep (bool [N]) is true, per-row vectors included; ids kept.
RolloutBatch select_rollout_rows(const RolloutBatch& rollouts, const torch::Tensor& keep);

// Learning rate of optimizer step `optimizer_step` (0-based) out of `total`: linear warm-up over
// warmup_steps, then constant or cosine decay to min_lr_ratio * lr.
double scheduled_lr(const OptimizerConfig& options, int64_t optimizer_step, int64_t total);

// Rollout statistics of a batch (reward, correctness, speedup, fast@p, hacking, turns), keyed
// "reward/...", "kernel/...", "rollout/...".
Metrics rollout_metrics(const RolloutBatch& rollouts, const std::vector<double>& fast_p = {1.0, 1.2, 1.5, 2.0});

class Trainer {
 public:
  // Builds the policy (seeded by trainer.seed), the action space, the optimizer and, unless
  // `evaluator` is given, the evaluator the config names. Throws turnrl::Error for settings the
  // built-in trainer cannot run (e.g. env.action: code, a backend that is not built).
  // comm: the ranks to train with; null = from the environment (RANK/WORLD_SIZE..., see
  // distributed_env_from_environment), which is the one-process world when those are unset.
  explicit Trainer(TrainConfig config, std::shared_ptr<KernelEvaluator> evaluator = nullptr,
                   std::shared_ptr<Communicator> comm = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // --- stages ---------------------------------------------------------------------------------
  // The step's trainer.tasks_per_step tasks: consecutive slices of a seeded permutation of the
  // training tasks, a new permutation each pass.
  std::vector<Task> step_tasks(int64_t step) const;
  // `samples_per_task` episodes of each task, every turn's actions sampled from the policy in one
  // batch and stepped through the environment in one evaluator batch. Deterministic in `seed`
  // (given the evaluator's verdicts).
  RolloutBatch collect_rollouts(const std::vector<Task>& tasks, int64_t samples_per_task,
                                const SamplingOptions& sampling, uint64_t seed);
  // Episodes [first_episode, end_episode) of the tasks x samples_per_task episodes (episode e is
  // sample e % n of task e / n): group and traj ids are those of the whole batch.
  RolloutBatch collect_rollout_shard(const std::vector<Task>& tasks, int64_t samples_per_task, int64_t first_episode,
                                     int64_t end_episode, const SamplingOptions& sampling, uint64_t seed);
  // Every rank's shard, concatenated in rank order (identity for one rank). Collective.
  RolloutBatch gather_rollouts(const RolloutBatch& shard);
  // batch.reward from the evaluations through the reward policy (reward.*).
  void score(RolloutBatch& rollouts) const;
  // The meaningful-turn mask (rejection.mask_void_turns); metrics "filter/void_turns".
  Metrics mask_void_turns(RolloutBatch& rollouts) const;
  // Group filters (rejection.group_filter): drops whole groups; metrics "filter/...".
  Metrics filter_groups(RolloutBatch& rollouts) const;
  // batch.old_logp: the current policy's fp32 log-probs of the rollout tokens, without autograd.
  void recompute_old_logp(TurnBatch& batch);
  // Mismatch correction (mismatch.*): rejected tokens are cleared from batch.response_mask; the
  // result holds the TIS weights and diagnostics. Needs old_logp.
  MismatchResult correct_mismatch(TurnBatch& batch) const;
  // PRS (rejection.prs) with draws seeded by `seed`; metrics "prs/...".
  Metrics reject_by_profile(RolloutBatch& rollouts, uint64_t seed) const;
  // Turn-level advantages [N]: returns (returns.*) then the estimator advantage.estimator.
  torch::Tensor advantages(const TurnBatch& batch, torch::Tensor* returns = nullptr) const;
  // trainer.ppo_epochs optimizer steps on the rows with any response token: micro-batches of
  // trainer.micro_batch_size rows with gradient accumulation (each micro-batch's loss weighted by
  // its share of rows), grad-norm clipping, AdamW at scheduled_lr. weights: [N, L] or undefined.
  // Metrics "actor/...", "optim/...".
  Metrics update(const TurnBatch& batch, const torch::Tensor& advantages, const torch::Tensor& weights, uint64_t seed);

  // --- loop -----------------------------------------------------------------------------------
  // Every stage after collection on the step's whole batch (gathered from every rank): score,
  // masks and filters, old log-probs, mismatch correction, PRS, advantages, update. Collective.
  Metrics learn(RolloutBatch& rollouts);
  // One full step: this rank's rollout shard, gather_rollouts, learn; increments step(). Writes
  // nothing to disk.
  Metrics train_step();
  // Rollouts of the last train_step(), for transcripts (empty before the first step).
  const RolloutBatch& last_rollouts() const;
  // Runs until trainer.steps: creates run.dir with config.yaml (the resolved config),
  // metrics.jsonl, samples.jsonl and checkpoints/ (every checkpoint.every steps and at the end).
  // resume: continue from the newest complete checkpoint in run.dir (if any).
  void train(bool resume = false);

  // Writes a checkpoint of the current step under run.dir/checkpoints (atomic, keep-last-k).
  std::string save_checkpoint();
  // Restores policy, optimizer, step, schedule position and RNG state from a checkpoint dir.
  void load_checkpoint(const std::string& dir);
  // Only the policy weights of a checkpoint directory (or a policy file).
  void load_policy(const std::string& path);
  // Loads the newest complete checkpoint under run.dir (deleting torn temporaries); false when
  // there is none.
  bool resume();

  int64_t step() const;
  int64_t optimizer_steps() const;
  TransformerPolicy& policy();
  const PlanActionSpace& action_space() const;
  const TrainConfig& config() const;
  const TaskSet& train_tasks() const;
  const TaskSet& validation_tasks() const;
  KernelEvaluator& evaluator();
  int rank() const;        // 0 in the one-process world
  int world_size() const;  // 1 in the one-process world

 private:
  void check_ranks_agree();
  struct State;
  std::unique_ptr<State> s_;
};

// Sampling options of the rollout (sampling.*) with the seed left 0.
SamplingOptions rollout_sampling(const TrainConfig& config);

// Seeds of the step's random stages, derived from (trainer.seed, step, stage) so a resumed run
// draws exactly what an uninterrupted one does.
uint64_t stage_seed(uint64_t seed, int64_t step, uint64_t stage);

// The evaluator a config names (evaluator.*): CpuEvaluator for cpu; cuda and python throw
// (later issues add those backends).
std::shared_ptr<KernelEvaluator> make_evaluator(const TrainConfig& config);

// The training and validation task sets a config names (tasks.*).
std::pair<TaskSet, TaskSet> load_task_sets(const TrainConfig& config);

}  // namespace turnrl
