#include "turnrl/rl/engine_options.h"

#include "turnrl/core/config_fields.h"

namespace turnrl {

template <typename V>
static void describe(V& v, RunConfig& o) {
  v.text("dir", o.dir, "run directory (created)");
  v.integer("samples_per_step", o.samples_per_step, 0, 1 << 20, "episodes per step written to samples.jsonl; >= 0");
  v.flag("progress", o.progress, "progress line on stderr");
  if constexpr (V::reads)
    if (o.dir.empty()) fail("{}: the run directory must not be empty", v.reader().key_path("dir"));
}

template <typename V>
static void describe(V& v, TrainerConfig& o) {
  v.integer("steps", o.steps, 1, int64_t(1) << 40, "RL steps; >= 1");
  v.integer("tasks_per_step", o.tasks_per_step, 1, 1 << 20, "B: tasks (prompts) per step; >= 1");
  v.integer("samples_per_task", o.samples_per_task, 1, 1 << 20, "n: episodes per task (group size); >= 1");
  v.integer("ppo_epochs", o.ppo_epochs, 1, 1000, "optimizer steps per RL step over the whole batch; >= 1");
  v.integer("micro_batch_size", o.micro_batch_size, 1, int64_t(1) << 30, "turns per forward/backward (gradient accumulation)");
  v.integer("micro_batch_tokens", o.micro_batch_tokens, 0, int64_t(1) << 40,
            "token budget of one forward/backward (rows x width, rows bucketed by length; verl's "
            "ppo_max_token_len_per_gpu); 0 = micro_batch_size rows only");
  v.integer("seed", o.seed, 0, INT64_MAX, "model init, task order, sampling and PRS draws");
  v.integer("threads", o.threads, 0, 4096, "LibTorch intra-op threads; 0 = LibTorch default");
  v.integer("rollout_waves", o.rollout_waves, 1, 1 << 20,
            "episodes of a rollout in this many waves: one wave's evaluation runs while the next wave's turn is "
            "sampled; 1 = no overlap; >= 2 needs an evaluator that measures elsewhere than the policy runs");
}

template <typename V>
static void describe(V& v, OptimizerConfig& o) {
  v.number("lr", o.lr, 0.0, 10.0, "peak learning rate; [0, 10]");
  v.unit_pair("betas", o.beta1, o.beta2, "Adam betas; each in [0, 1)");
  v.number("eps", o.eps, 0.0, 1.0, "Adam epsilon");
  v.number("weight_decay", o.weight_decay, 0.0, 10.0, "decoupled weight decay; [0, 10]");
  v.choice("schedule", o.schedule, {"constant", "cosine"}, "constant | cosine");
  v.integer("warmup_steps", o.warmup_steps, 0, int64_t(1) << 40, "optimizer steps of linear warm-up; 0 = none");
  v.number("min_lr_ratio", o.min_lr_ratio, 0.0, 1.0, "cosine: final lr / lr; [0, 1]");
  v.number("grad_clip", o.grad_clip, 0.0, 1e12, "max global gradient norm; 0 = off");
  v.flag("master_weights", o.master_weights,
         "bf16/fp16 parameters stepped through float32 master copies and float32 AdamW states");
}

template <typename V>
static void describe(V& v, CheckpointConfig& o) {
  v.integer("every", o.every, 0, int64_t(1) << 40, "steps between checkpoints; 0 = only at the end");
  v.integer("keep_last", o.keep_last, 1, 1 << 20, "complete checkpoints kept; >= 1");
  v.flag("on_stop", o.on_stop, "SIGINT/SIGTERM: checkpoint the last finished step, then exit");
}

template <typename V>
static void describe(V& v, DistributedConfig& o) {
  v.choice("backend", o.backend, {"auto", "nccl", "tcp"}, "auto | nccl | tcp; auto = nccl for model.device cuda when built with NCCL");
  v.number("bucket_mb", o.bucket_mb, 1e-3, 1 << 20, "gradient all-reduce bucket size in MiB; > 0");
  v.number("timeout_seconds", o.timeout_seconds, 1.0, 1e7, "rendezvous and collective deadline; >= 1");
}

template <typename V>
static void describe(V& v, RolloutSamplingConfig& o) {
  v.number("temperature", o.temperature, 1e-3, 100.0, "> 0");
  v.integer("top_k", o.top_k, 0, 1 << 20, "0 = off");
  v.number("top_p", o.top_p, 1e-6, 1.0, "(0, 1]; 1 = off");
  v.integer("max_new_tokens", o.max_new_tokens, 1, 1 << 20, "response tokens per turn (env.action: code)");
  v.flag("score_at_temperature", o.score_at_temperature,
         "the trainer's log-probs and entropies (PPO ratio, mismatch correction, entropy bonus) of the logits divided by "
         "temperature, as verl's actor computes them (false: of the model's own distribution, temperature 1)");
}

void read_options(ConfigReader& r, RunConfig& o) { read_described(r, o); }
void write_options(ConfigWriter& w, const RunConfig& o) { write_described(w, o); }
void read_options(ConfigReader& r, TrainerConfig& o) { read_described(r, o); }
void write_options(ConfigWriter& w, const TrainerConfig& o) { write_described(w, o); }
void read_options(ConfigReader& r, OptimizerConfig& o) { read_described(r, o); }
void write_options(ConfigWriter& w, const OptimizerConfig& o) { write_described(w, o); }
void read_options(ConfigReader& r, CheckpointConfig& o) { read_described(r, o); }
void write_options(ConfigWriter& w, const CheckpointConfig& o) { write_described(w, o); }
void read_options(ConfigReader& r, DistributedConfig& o) { read_described(r, o); }
void write_options(ConfigWriter& w, const DistributedConfig& o) { write_described(w, o); }
void read_options(ConfigReader& r, RolloutSamplingConfig& o) { read_described(r, o); }
void write_options(ConfigWriter& w, const RolloutSamplingConfig& o) { write_described(w, o); }

SamplingOptions rollout_sampling(const EngineOptions& c) {
  return SamplingOptions().temp(c.sampling.temperature).topk(c.sampling.top_k).topp(c.sampling.top_p);
}

}  // namespace turnrl
