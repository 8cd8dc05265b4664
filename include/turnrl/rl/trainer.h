#pragma once
// Trainer: multi-turn RL of any Policy in any Environment. It is given its parts (TrainerParts):
// the policy, an environment-pool factory, the action codec between observations and tokens, the
// training tasks, the engine's options and a list of batch stages. One step
// (the reference trainer's order, docs/training.md):
//
//   tasks = step_tasks(step)                        B tasks, in a seeded per-epoch order
//   r = collect_rollouts(tasks, n, sampling, seed)  n episodes per task, up to T turns; each turn one
//                                                   Policy::generate and one EnvironmentPool::step
//                                                   across all live episodes; rewards from the
//                                                   environment
//   run_stages(r, before_logp)                      e.g. reward shaping, meaningful-turn mask, group
//                                                   filters, the domain's metrics (batch_stage.h)
//   recompute_old_logp(r.batch)                     trainer fp32 log-probs (Policy::forward_logp)
//   w = correct_mismatch(r.batch)                   MRS rejection / TIS weights
//   run_stages(r, after_mismatch)                   e.g. the kernel domain's PRS
//   a = advantages(r.batch)                         returns -> registered estimator (trloo, ...)
//   update(r.batch, a, w.weights, seed)             PPO epochs over micro-batches, grad
//                                                   accumulation, clipping, AdamW + schedule
//
// Each stage is a public member that a custom loop can call on its own (examples/
// custom_trainer.cpp, with the public StageSeed values); train_step() runs them in order and
// returns the step's metrics, and train() adds the run directory: resolved config, metrics.jsonl,
// samples.jsonl, progress line, atomic checkpoints and --resume. The kernel domain builds its
// trainer from a TrainConfig with KernelTrainer (kernel_recipe.h); examples/own_environment.cpp
// builds one for a game.
//
// Data parallel (trainer/distributed.h; docs/training.md "Several GPUs"): with W ranks each rank
// collects a contiguous shard of the step's B x n episodes (a group may span ranks), the shards are
// all-gathered so every rank holds the whole batch, and every stage up to the advantages runs on it
// identically (TRLOO sees whole groups). old log-probs are computed on row shards and gathered; the
// update's micro-batches are dealt round-robin to the ranks and the gradients summed in buckets, so
// each optimizer step equals one rank's step on the whole batch. Rank 0 alone writes the run
// directory.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "turnrl/algo/mismatch.h"
#include "turnrl/core/turn_batch.h"
#include "turnrl/rl/environment.h"
#include "turnrl/model/policy.h"
#include "turnrl/rl/action_codec.h"
#include "turnrl/rl/batch_stage.h"
#include "turnrl/rl/engine_options.h"
#include "turnrl/rl/metrics.h"
#include "turnrl/rl/rollout.h"

namespace turnrl {

class Communicator;

// Everything a Trainer is made of.
struct TrainerParts {
  std::shared_ptr<Policy> policy;          // trained in place; its device is the trainer's
  EnvironmentPoolFactory environments;     // the episodes of each rollout (pool_of(...) for one-by-one)
  std::shared_ptr<const ActionCodec> codec;  // ChatCodec, PlanActionCodec or a user's
  std::vector<Task> tasks;                 // the training tasks (trainer.tasks_per_step of them a step)
  EngineOptions options;
  std::vector<std::shared_ptr<BatchStage>> stages;  // run in list order at their point
  // Data parallel: rebuilds a domain's payloads after the all-gather (null: gathered rows carry none).
  PayloadDecoder decode_payload;
  // Written as run.dir/config.yaml and into checkpoints, compared across ranks ("" = none).
  std::string resolved_config;
  // Run by train() before the first step it takes: throws turnrl::Error when the environment
  // cannot work at all (the kernel recipe probes its evaluator), so a broken setup is a start-up
  // error, not a run of failed steps. Null = no check.
  std::function<void()> startup_check;
};

// Learning rate of optimizer step `optimizer_step` (0-based) out of `total`: linear warm-up over
// warmup_steps, then constant or cosine decay to min_lr_ratio * lr.
double scheduled_lr(const OptimizerConfig& options, int64_t optimizer_step, int64_t total);

class Trainer {
 public:
  // Builds the optimizer over parts.policy's parameters and sets the policy's logp_temperature
  // (sampling.score_at_temperature). Throws turnrl::Error for a missing part
  // or a setting this trainer cannot run (policy_loss.kl_loss_coef != 0: no reference policy).
  // comm: the ranks to train with; null = from the environment (RANK/WORLD_SIZE..., see
  // distributed_env_from_environment), which is the one-process world when those are unset.
  explicit Trainer(TrainerParts parts, std::shared_ptr<Communicator> comm = nullptr);
  virtual ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // --- stages ---------------------------------------------------------------------------------
  // The step's trainer.tasks_per_step tasks: consecutive slices of a seeded permutation of the
  // training tasks, a new permutation each pass.
  std::vector<Task> step_tasks(int64_t step) const;
  // `samples_per_task` episodes of each task (RolloutCollector::collect). Deterministic in `seed`
  // (given the environment's replies).
  RolloutBatch collect_rollouts(const std::vector<Task>& tasks, int64_t samples_per_task,
                                const SamplingOptions& sampling, uint64_t seed);
  // Episodes [first_episode, end_episode) of the tasks x samples_per_task episodes: group and
  // traj ids are those of the whole batch.
  RolloutBatch collect_rollout_shard(const std::vector<Task>& tasks, int64_t samples_per_task, int64_t first_episode,
                                     int64_t end_episode, const SamplingOptions& sampling, uint64_t seed);
  // Every rank's shard, concatenated in rank order (identity for one rank). Collective.
  RolloutBatch gather_rollouts(const RolloutBatch& shard);
  // The stages registered at `point`, in order, on `rollouts` at step `step`; their metrics merged.
  Metrics run_stages(RolloutBatch& rollouts, BatchStage::Point point, int64_t step);
  // batch.old_logp: the current policy's fp32 log-probs of the rollout tokens, without autograd.
  void recompute_old_logp(TurnBatch& batch);
  // Mismatch correction (mismatch.*): rejected tokens are cleared from batch.response_mask; the
  // result holds the TIS weights and diagnostics. Needs old_logp.
  MismatchResult correct_mismatch(TurnBatch& batch) const;
  // Turn-level advantages [N]: returns (returns.*) then the estimator advantage.estimator.
  torch::Tensor advantages(const TurnBatch& batch, torch::Tensor* returns = nullptr) const;
  // trainer.ppo_epochs optimizer steps on the rows with any response token: micro-batches of at
  // most trainer.micro_batch_size rows and trainer.micro_batch_tokens tokens, each cut to its
  // rows' columns, with gradient accumulation (micro_batches.h: the accumulated gradient is the
  // whole batch's under every policy_loss.agg_mode), grad-norm clipping, AdamW at scheduled_lr
  // (on float32 master weights for bf16/fp16 parameters: optimizer.master_weights).
  // weights: [N, L] or undefined. Metrics "actor/...", "optim/...".
  Metrics update(const TurnBatch& batch, const torch::Tensor& advantages, const torch::Tensor& weights, uint64_t seed);

  // --- loop -----------------------------------------------------------------------------------
  // Every stage after collection on the step's whole batch (gathered from every rank): rollout
  // metrics, stages, old log-probs, mismatch correction, advantages, update. Collective.
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
  Policy& policy();
  const RolloutCollector& collector() const;
  const EngineOptions& options() const;
  int rank() const;        // 0 in the one-process world
  int world_size() const;  // 1 in the one-process world

 private:
  void check_ranks_agree();
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace turnrl
