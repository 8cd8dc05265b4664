#pragma once
// SFTTrainer: supervised fine-tuning of any Policy on chat conversations (sft_data.h), the warm
// start before multi-turn RL. The loss is the mean negative log-likelihood of the assistant tokens
// of each optimizer step (summed over its micro-batches, divided by their assistant-token count),
// computed through Policy::forward_logp, so every Policy trains: TransformerPolicy over the byte
// tokenizer, an HFPolicy with a BPE tokenizer, a user's ModulePolicy. One step:
//
//   grad_accum micro-batches of micro_batch_size rows (epoch_micro_batches: shuffled, bucketed)
//   loss = -sum(logp * loss_mask) / assistant tokens of the step; backward per micro-batch
//   clip the global gradient norm, AdamW at scheduled_lr (trainer.h: warm-up, constant | cosine)
//
// train() keeps the run directory as `turnrl train` does (docs/training.md): config.yaml,
// metrics.jsonl (sft/loss, val/loss, optim/lr, optim/grad_norm, perf/tokens_per_s), a TensorBoard
// event file, the progress line, atomic checkpoints and --resume (bit-exact: the data order is a
// function of the seed and the step), and finally the export folder the RL run starts from.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "turnrl/model/chat_tokenizer.h"
#include "turnrl/model/policy.h"
#include "turnrl/rl/engine_options.h"
#include "turnrl/rl/metrics.h"
#include "turnrl/rl/sft_data.h"

namespace turnrl {

// The YAML `sft:` section.
struct SFTLoopConfig {
  int64_t steps = 0;             // optimizer steps; 0 = as many as `epochs` passes over the data take
  int64_t epochs = 1;            // passes over the training rows (when steps is 0)
  int64_t micro_batch_size = 8;  // rows per forward/backward
  int64_t grad_accum = 1;        // micro-batches per optimizer step
  int64_t eval_every = 0;        // steps between validation losses (and at the end); 0 = only at the end
  int64_t seed = 1;              // model init and data order
  int64_t threads = 0;           // LibTorch intra-op threads; 0 leaves LibTorch's default
};

// Everything the SFT loop reads (the `turnrl sft` config without the model section).
struct SFTOptions {
  RunConfig run = {"runs/sft", 0, true};  // samples_per_step: SFT writes no samples.jsonl
  SFTDataConfig data;
  SFTLoopConfig sft;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
};

// The SFT loss's numerator and denominator of one batch: the sum of -log p(token | tokens before)
// over batch.loss_mask (differentiable with respect to the policy's parameters) and the count of
// those tokens. Positions outside the mask contribute nothing, to the loss or to its gradient.
struct AssistantNll {
  torch::Tensor sum;   // float32 scalar
  int64_t tokens = 0;
};
AssistantNll assistant_nll(Policy& policy, const SFTBatch& batch);

struct SFTParts {
  std::shared_ptr<Policy> policy;                    // trained in place
  std::shared_ptr<const ChatTokenizer> tokenizer;    // the policy's tokenizer and chat template
  int64_t max_seq = 0;  // the longest sequence the policy takes (ChatPolicy::max_seq); 0 = not checked
  SFTOptions options;
  std::string resolved_config;                       // written as run.dir/config.yaml and into checkpoints
  // Writes the trained model where the RL run reads it (`model.init` / `model.path`): the builtin
  // policy's model file, an HF folder with tokenizer files. Null = no export.
  std::function<void(Policy& policy, const std::string& folder)> export_model;
};

class SFTTrainer {
 public:
  // Reads and tokenises data.train (and data.validation); throws turnrl::Error naming the key or
  // file:line of what is wrong, and when no training row is left.
  explicit SFTTrainer(SFTParts parts);
  ~SFTTrainer();
  SFTTrainer(const SFTTrainer&) = delete;
  SFTTrainer& operator=(const SFTTrainer&) = delete;

  // One optimizer step over the next grad_accum micro-batches; increments step(). Metrics:
  // sft/loss, sft/tokens (assistant tokens), perf/tokens (non-pad tokens), perf/tokens_per_s,
  // optim/lr, optim/grad_norm, sft/epoch, time/step_s.
  Metrics train_step();
  // Mean NLL per assistant token over `rows` (no gradient, eval mode); NaN when rows is empty.
  double mean_loss(const SFTRows& rows);
  // Runs to total_steps() with the run directory (see above); resume: continue from the newest
  // complete checkpoint in run.dir. Writes run.dir/export at the end.
  void train(bool resume = false);

  std::string save_checkpoint();
  void load_checkpoint(const std::string& dir);
  bool resume();
  // run.dir/export through SFTParts::export_model; returns the folder ("" without one).
  std::string export_model();

  int64_t step() const;
  int64_t total_steps() const;
  Policy& policy();
  const SFTRows& train_rows() const;
  const SFTRows& validation_rows() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace turnrl
