#pragma once
// TrainConfig: one YAML file -> plain structs, one section per stage. Every stage's section is
// read by that stage's own read_options() (advantage, returns, mismatch, policy loss, reward,
// rejection, environment), so a key means the same thing in a config and in the stage's options
// struct; the trainer's own sections are defined here. Reading is strict: unknown keys, wrong
// types and out-of-range values throw turnrl::Error naming the key's path and what is allowed.
// Every key is documented in docs/configuration.md; `turnrl config --print-defaults` prints
// default_config_yaml().
#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "turnrl/algo/advantage.h"
#include "turnrl/algo/mismatch.h"
#include "turnrl/algo/policy_loss.h"
#include "turnrl/algo/returns.h"
#include "turnrl/env/kernel_env.h"
#include "turnrl/eval/backends.h"
#include "turnrl/reward/kernel_reward.h"
#include "turnrl/reward/rejection.h"

namespace turnrl {

// Where a run writes (run directory layout: docs/training.md).
struct RunConfig {
  std::string dir = "runs/cpu_default";  // resolved config, metrics.jsonl, samples.jsonl, checkpoints/
  int64_t samples_per_step = 2;          // episodes per step written to samples.jsonl (0: none)
  bool progress = true;                  // the progress line on stderr
};

// The RL loop's sizes.
struct TrainerConfig {
  int64_t steps = 40;             // RL steps (one rollout batch each)
  int64_t tasks_per_step = 8;     // B: tasks (prompts) per step
  int64_t samples_per_task = 8;   // n: episodes per task (the group size)
  int64_t ppo_epochs = 1;         // optimizer steps per RL step, each over the whole batch
  int64_t micro_batch_size = 64;  // turns per forward/backward; gradients accumulate over micro-batches
  int64_t seed = 1;               // model init, task order, sampling, PRS draws
  int64_t threads = 0;            // LibTorch intra-op threads; 0 leaves LibTorch's default
};

// AdamW with linear warm-up then a constant or cosine schedule.
struct OptimizerConfig {
  double lr = 3e-3;
  double beta1 = 0.9, beta2 = 0.999;  // YAML: betas: [b1, b2]
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::string schedule = "constant";  // constant | cosine
  int64_t warmup_steps = 0;           // optimizer steps of linear warm-up from 0
  double min_lr_ratio = 0.1;          // cosine: the final lr as a fraction of lr
  double grad_clip = 1.0;             // max global grad norm; 0 disables clipping
};

struct CheckpointConfig {
  int64_t every = 10;     // steps between checkpoints (0: only the final one)
  int64_t keep_last = 3;  // complete checkpoints kept (older ones are deleted)
  bool on_stop = true;    // SIGINT/SIGTERM: write a checkpoint of the last finished step before exiting
};

// The built-in policy: a TransformerPolicy (model/transformer.h).
struct ModelConfig {
  int64_t d_model = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t ffn = 0;        // 0 = 8/3 d_model rounded up to 64
  int64_t max_seq = 64;
  std::string device = "cpu";  // cpu | cuda
  std::string init;            // a model file (TransformerPolicy::save) to start from; "" = fresh
};

// How rollout actions are sampled. The plan policy samples one choice per plan slot; these
// options shape that distribution, and the rollout log-probs are recorded under it, so
// temperature != 1 or top_p < 1 is a genuine rollout/trainer mismatch for the correction.
struct RolloutSamplingConfig {
  double temperature = 1.0;
  int64_t top_k = 0;   // 0: off
  double top_p = 1.0;  // 1: off
};

// Which tasks train.
struct TasksConfig {
  std::string source = "builtin";    // builtin (the CPU evaluator's tasks) | file (JSON Lines)
  std::string file;                  // source: file
  std::vector<std::string> include;  // task ids to use; empty = every task with a plan template
  double validation_fraction = 0.0;  // share held out for `turnrl eval` (split by a hash of the id)
  int64_t split_seed = 0;
};

// `turnrl eval`: sampling for evaluation and the reported statistics.
struct EvalConfig {
  int64_t samples = 8;  // episodes per task
  double temperature = 1.0;
  double top_p = 0.95;
  std::vector<double> pass_k = {1, 4};               // pass@k for these k (k <= samples)
  std::vector<double> fast_p = {1.0, 1.2, 1.5, 2.0};  // fast@p thresholds
  std::string split = "all";                          // all | validation | train
  int64_t seed = 1234;
};

// Data parallelism (trainer/distributed.h): the world comes from RANK / WORLD_SIZE / LOCAL_RANK /
// MASTER_ADDR / MASTER_PORT (torchrun's variables; `turnrl train --nproc N` sets them).
struct DistributedConfig {
  std::string backend = "auto";  // auto (nccl for model.device cuda when built with NCCL, else tcp) | nccl | tcp
  double bucket_mb = 25;         // gradient all-reduce bucket size (MiB)
  double timeout_seconds = 300;  // rendezvous and every collective; a dead rank fails the others
};

struct TrainConfig {
  RunConfig run;
  TrainerConfig trainer;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
  DistributedConfig distributed;
  ModelConfig model;
  RolloutSamplingConfig sampling;
  TasksConfig tasks;
  KernelEnvOptions env = KernelEnvOptions().with_action(ActionFormat::plan).with_timing_trials(10);
  EvaluatorConfig evaluator;
  KernelRewardOptions reward;
  RejectionOptions rejection;
  ReturnOptions returns;
  std::string estimator = "trloo";  // YAML: advantage.estimator (any registered name)
  AdvantageOptions advantage;
  MismatchOptions mismatch;
  PPOLossOptions policy_loss;
  EvalConfig eval;
};

// Reads a whole config from YAML (absent keys keep their defaults) and validates the
// combination. Throws turnrl::Error naming the key path.
TrainConfig parse_config(const YAML::Node& root);

// Applies one "key.path=value" override to a YAML tree (value parsed as YAML, so 1e-3, true and
// [1, 2] keep their types); creates missing maps. Throws on a malformed override.
void apply_override(YAML::Node& root, const std::string& assignment);

// Loads `file` (empty: the defaults), applies `overrides` in order, then parse_config.
TrainConfig load_config(const std::string& file, const std::vector<std::string>& overrides = {});

// Every key with its value, as YAML that parse_config reads back to the same config. With
// `annotate`, each key carries a comment saying what it is and what is allowed.
std::string config_to_yaml(const TrainConfig& config, bool annotate = false);

// config_to_yaml(TrainConfig{}, true): what `turnrl config --print-defaults` prints.
std::string default_config_yaml();

}  // namespace turnrl
