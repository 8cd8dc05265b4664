#pragma once
// EngineOptions: the sections of a training config that the generic engine (Trainer, rollouts,
// checkpoints, data parallel) reads. A domain's config extends it (TrainConfig, config.h).
#include <cstdint>
#include <string>

#include "turnrl/algo/advantage.h"
#include "turnrl/algo/mismatch.h"
#include "turnrl/algo/policy_loss.h"
#include "turnrl/algo/returns.h"
#include "turnrl/model/sampler.h"

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
  // Token budget of one forward/backward (micro_batches.h): rows bucketed by length so that rows ×
  // width stays within it (a longer row goes alone). 0 = micro_batch_size rows, no budget.
  int64_t micro_batch_tokens = 0;
  int64_t seed = 1;               // model init, task order, sampling, PRS draws
  int64_t threads = 0;            // LibTorch intra-op threads; 0 leaves LibTorch's default
  // Episodes of a rollout in this many waves: one wave's environment step (evaluation) runs while
  // the next wave's turn is sampled (RolloutCollector). 1 = sample all, then step all.
  int64_t rollout_waves = 1;
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
  // Parameters held in bf16 / fp16 are stepped through float32 copies with float32 AdamW states
  // (master_weights.h); false steps them in their own dtype, where small updates round away.
  bool master_weights = true;
};

struct CheckpointConfig {
  int64_t every = 10;     // steps between checkpoints (0: only the final one)
  int64_t keep_last = 3;  // complete checkpoints kept (older ones are deleted)
  bool on_stop = true;    // SIGINT/SIGTERM: write a checkpoint of the last finished step before exiting
};

// How rollout actions are sampled. These options shape the sampling distribution (the plan policy's
// over each slot's choices), and the rollout log-probs are recorded under it. The trainer scores
// at the same temperature (score_at_temperature, as verl's actor divides its logits by the rollout
// temperature), so only top_k > 0 or top_p < 1 is a genuine rollout/trainer mismatch for the
// correction; with score_at_temperature off a temperature != 1 is one too.
struct RolloutSamplingConfig {
  double temperature = 1.0;
  int64_t top_k = 0;   // 0: off
  double top_p = 1.0;  // 1: off
  int64_t max_new_tokens = 256;  // response budget of one turn (text and code actions)
  bool score_at_temperature = true;  // the trainer's log-probs and entropies of logits / temperature
};

// Data parallelism (trainer/distributed.h): the world comes from RANK / WORLD_SIZE / LOCAL_RANK /
// MASTER_ADDR / MASTER_PORT (torchrun's variables; `turnrl train --nproc N` sets them).
struct DistributedConfig {
  std::string backend = "auto";  // auto (nccl for model.device cuda when built with NCCL, else tcp) | nccl | tcp
  double bucket_mb = 25;         // gradient all-reduce bucket size (MiB)
  double timeout_seconds = 300;  // rendezvous and every collective; a dead rank fails the others
};

struct EngineOptions {
  RunConfig run;
  TrainerConfig trainer;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
  DistributedConfig distributed;
  RolloutSamplingConfig sampling;
  ReturnOptions returns;
  std::string estimator = "trloo";  // YAML: advantage.estimator (any registered name)
  AdvantageOptions advantage;
  MismatchOptions mismatch;
  PPOLossOptions policy_loss;
};

class ConfigReader;
class ConfigWriter;

// Each engine section read strictly from YAML (errors name the key) and written back as YAML with
// each key's help when annotating: one description per struct (core/config_fields.h).
void read_options(ConfigReader& reader, RunConfig& options);
void read_options(ConfigReader& reader, TrainerConfig& options);
void read_options(ConfigReader& reader, OptimizerConfig& options);
void read_options(ConfigReader& reader, CheckpointConfig& options);
void read_options(ConfigReader& reader, DistributedConfig& options);
void read_options(ConfigReader& reader, RolloutSamplingConfig& options);
void write_options(ConfigWriter& writer, const RunConfig& options);
void write_options(ConfigWriter& writer, const TrainerConfig& options);
void write_options(ConfigWriter& writer, const OptimizerConfig& options);
void write_options(ConfigWriter& writer, const CheckpointConfig& options);
void write_options(ConfigWriter& writer, const DistributedConfig& options);
void write_options(ConfigWriter& writer, const RolloutSamplingConfig& options);

// The comments over the optimizer and checkpoint sections of every config file that has them
// (`turnrl train`'s and `turnrl sft`'s).
inline constexpr const char* kOptimizerSectionHelp = "AdamW with linear warm-up, then constant or cosine decay.";
inline constexpr const char* kCheckpointSectionHelp = "Atomic checkpoints under run.dir/checkpoints/step_NNNNNNNN.";

// The rollout's sampling options (sampling.*) with the seed left 0.
SamplingOptions rollout_sampling(const EngineOptions& options);

}  // namespace turnrl
