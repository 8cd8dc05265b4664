#include "turnrl/rl/sft.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/rl/checkpoint.h"
#include "turnrl/rl/master_weights.h"
#include "turnrl/rl/progress.h"
#include "turnrl/rl/stop_request.h"
#include "turnrl/rl/tensorboard.h"
#include "turnrl/rl/trainer.h"

namespace turnrl {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

void check(const SFTOptions& o) {
  if (o.data.train.empty()) fail("data.train: no training file; set it to a chat JSON Lines file");
  if (o.sft.micro_batch_size < 1)
    fail("sft.micro_batch_size: {} is out of range; allowed: >= 1", o.sft.micro_batch_size);
  if (o.sft.grad_accum < 1) fail("sft.grad_accum: {} is out of range; allowed: >= 1", o.sft.grad_accum);
  if (o.sft.steps < 0) fail("sft.steps: {} is out of range; allowed: >= 0 (0 = sft.epochs passes)", o.sft.steps);
  if (o.sft.steps == 0 && o.sft.epochs < 1)
    fail("sft.epochs: {} is out of range; allowed: >= 1 (or set sft.steps)", o.sft.epochs);
  if (o.sft.eval_every < 0) fail("sft.eval_every: {} is out of range; allowed: >= 0", o.sft.eval_every);
}

}  // namespace

AssistantNll assistant_nll(Policy& policy, const SFTBatch& batch) {
  const TokenLogp out = policy.forward_logp(batch.tokens, batch.attention_mask, batch.loss_mask);
  return {-out.logp.masked_select(batch.loss_mask).sum(), batch.loss_mask.sum().item<int64_t>()};
}

struct SFTTrainer::State {
  SFTParts parts;
  std::unique_ptr<ChatCodec> codec;
  SFTRows train, validation;
  std::unique_ptr<MasterWeights> masters;  // what the optimizer steps (optimizer.master_weights)
  std::unique_ptr<torch::optim::AdamW> optimizer;
  int64_t step = 0;
  int64_t micro_batches_per_epoch = 0;
  int64_t planned_epoch = -1;  // the epoch `plan` holds
  std::vector<std::vector<int64_t>> plan;

  const SFTOptions& options() const { return parts.options; }
  std::string checkpoint_root() const { return (fs::path(options().run.dir) / "checkpoints").string(); }

  // Micro-batch `index` counted from the first step of the first epoch.
  const std::vector<int64_t>& micro_batch(int64_t index) {
    const int64_t epoch = index / micro_batches_per_epoch;
    if (epoch != planned_epoch) {
      plan = epoch_micro_batches(train.lengths(), options().sft.micro_batch_size, options().data.bucket_window,
                                 uint64_t(options().sft.seed), epoch);
      planned_epoch = epoch;
    }
    return plan[size_t(index % micro_batches_per_epoch)];
  }
};

SFTTrainer::SFTTrainer(SFTParts parts) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.parts = std::move(parts);
  if (!s.parts.policy) fail("SFTTrainer: SFTParts.policy is null");
  if (!s.parts.tokenizer) fail("SFTTrainer: SFTParts.tokenizer is null");
  const SFTOptions& o = s.options();
  check(o);
  if (s.parts.max_seq > 0 && o.data.max_length > s.parts.max_seq)
    fail("data.max_length: {} is longer than the policy's context of {} tokens (model.max_seq); allowed: <= {}",
         o.data.max_length, s.parts.max_seq, s.parts.max_seq);
  if (o.sft.threads > 0) torch::set_num_threads(int(o.sft.threads));
  s.codec = std::make_unique<ChatCodec>(s.parts.tokenizer, o.data.max_length);
  s.train = tokenize_conversations(read_chat_jsonl(o.data.train), *s.codec, o.data);
  if (s.train.size() == 0)
    fail("data.train: '{}' leaves no training row ({} conversations, {} dropped as longer than data.max_length {})",
         o.data.train, s.train.conversations, s.train.dropped, o.data.max_length);
  if (!o.data.validation.empty())
    s.validation = tokenize_conversations(read_chat_jsonl(o.data.validation), *s.codec, o.data);
  s.micro_batches_per_epoch =
      (int64_t(s.train.size()) + o.sft.micro_batch_size - 1) / o.sft.micro_batch_size;
  s.masters = std::make_unique<MasterWeights>(s.parts.policy->parameters(), o.optimizer.master_weights);
  s.optimizer = std::make_unique<torch::optim::AdamW>(
      s.masters->masters(), torch::optim::AdamWOptions(o.optimizer.lr)
                                        .betas(std::make_tuple(o.optimizer.beta1, o.optimizer.beta2))
                                        .eps(o.optimizer.eps)
                                        .weight_decay(o.optimizer.weight_decay));
}

SFTTrainer::~SFTTrainer() = default;

int64_t SFTTrainer::total_steps() const {
  const SFTOptions& o = s_->options();
  if (o.sft.steps > 0) return o.sft.steps;
  return (o.sft.epochs * s_->micro_batches_per_epoch + o.sft.grad_accum - 1) / o.sft.grad_accum;
}

Metrics SFTTrainer::train_step() {
  State& s = *s_;
  const SFTOptions& o = s.options();
  const auto start = Clock::now();
  s.parts.policy->train(true);
  const int64_t first = s.step * o.sft.grad_accum;
  int64_t loss_tokens = 0, tokens = 0;
  for (int64_t k = 0; k < o.sft.grad_accum; ++k)
    for (int64_t row : s.micro_batch(first + k)) {
      loss_tokens += s.train.loss_tokens(size_t(row));
      tokens += int64_t(s.train.tokens[size_t(row)].size());
    }
  // Every row holds an assistant token (tokenize_conversations drops the others), so loss_tokens > 0.
  s.masters->zero_gradients();
  double nll = 0;
  for (int64_t k = 0; k < o.sft.grad_accum; ++k) {
    const SFTBatch batch = collate(s.train, s.micro_batch(first + k), s.parts.tokenizer->pad_id(),
                                   s.parts.policy->device());
    const torch::Tensor sum = assistant_nll(*s.parts.policy, batch).sum;
    (sum / double(loss_tokens)).backward();
    nll += sum.item<double>();
  }
  const double max_norm = o.optimizer.grad_clip > 0 ? o.optimizer.grad_clip : std::numeric_limits<double>::infinity();
  s.masters->gather_gradients();
  const double grad_norm = torch::nn::utils::clip_grad_norm_(s.masters->masters(), max_norm);
  const double lr = scheduled_lr(o.optimizer, s.step, total_steps());
  for (auto& group : s.optimizer->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  s.optimizer->step();
  s.masters->publish();
  ++s.step;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double loss = nll / double(loss_tokens);
  return {{"step", double(s.step)},
          {"sft/loss", loss},
          {"train/loss", loss},  // verl's SFT trainer's name
          {"sft/tokens", double(loss_tokens)},
          {"sft/epoch", double(s.step * o.sft.grad_accum) / double(s.micro_batches_per_epoch)},
          {"perf/tokens", double(tokens)},
          {"perf/tokens_per_s", double(tokens) / seconds},
          {"optim/lr", lr},
          {"optim/grad_norm", grad_norm},
          {"time/step_s", seconds}};
}

double SFTTrainer::mean_loss(const SFTRows& rows) {
  State& s = *s_;
  if (rows.size() == 0) return std::numeric_limits<double>::quiet_NaN();
  torch::NoGradGuard no_grad;
  s.parts.policy->eval();
  // Length-sorted micro-batches: the least padding, and the same result whatever the seed.
  std::vector<int64_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  const std::vector<int64_t> lengths = rows.lengths();
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[size_t(a)] < lengths[size_t(b)]; });
  double nll = 0;
  int64_t count = 0;
  for (size_t start = 0; start < order.size(); start += size_t(s.options().sft.micro_batch_size)) {
    const std::vector<int64_t> rows_here(order.begin() + std::ptrdiff_t(start),
                                         order.begin() + std::ptrdiff_t(std::min(order.size(), start + size_t(s.options().sft.micro_batch_size))));
    const AssistantNll part =
        assistant_nll(*s.parts.policy, collate(rows, rows_here, s.parts.tokenizer->pad_id(), s.parts.policy->device()));
    nll += part.sum.item<double>();
    count += part.tokens;
  }
  s.parts.policy->train(true);
  return nll / double(count);
}

std::string SFTTrainer::save_checkpoint() {
  State& s = *s_;
  return write_checkpoint(
      s.checkpoint_root(), s.step,
      [&](const std::string& dir) {
        save_policy_checkpoint(*s.parts.policy, dir);
        save_checkpoint_file(dir + "/optimizer.pt", [&](const std::string& path) { torch::save(*s.optimizer, path); });
        if (s.masters->any())
          save_checkpoint_file(dir + "/master_weights.pt", [&](const std::string& path) { s.masters->save(path); });
        torch::serialize::OutputArchive state;
        state.write("step", torch::tensor(s.step, torch::kLong));
        state.write("seed", torch::tensor(s.options().sft.seed, torch::kLong));
        save_checkpoint_file(dir + "/trainer_state.pt", [&](const std::string& path) { state.save_to(path); });
        if (!s.parts.resolved_config.empty()) write_file(dir + "/config.yaml", s.parts.resolved_config);
      },
      s.options().checkpoint.keep_last);
}

void SFTTrainer::load_checkpoint(const std::string& dir) {
  State& s = *s_;
  for (const char* name : {policy_checkpoint_entry(*s.parts.policy), "optimizer.pt", "trainer_state.pt"})
    if (!fs::exists(fs::path(dir) / name)) fail("checkpoint '{}': missing {}", dir, name);
  torch::serialize::InputArchive state;
  state.load_from(dir + "/trainer_state.pt");
  torch::Tensor step, seed;
  state.read("step", step);
  state.read("seed", seed);
  // The data order is a function of the seed: another seed would not continue the same run.
  if (seed.item<int64_t>() != s.options().sft.seed)
    fail("checkpoint '{}': written with sft.seed {}, the config says {}; resume with the same seed", dir,
         seed.item<int64_t>(), s.options().sft.seed);
  load_policy_checkpoint(*s.parts.policy, dir);
  s.masters->reset_from_model();
  torch::load(*s.optimizer, dir + "/optimizer.pt");
  // Checkpoints from before master weights (or with them off) hold only the rounded model.
  if (s.masters->any() && fs::exists(fs::path(dir) / "master_weights.pt")) s.masters->load(dir + "/master_weights.pt");
  s.step = step.item<int64_t>();
}

bool SFTTrainer::resume() {
  const std::string root = s_->checkpoint_root();
  remove_incomplete_checkpoints(root);
  std::vector<SkippedCheckpoint> skipped;
  const auto loaded = load_newest_valid_checkpoint(root, [&](const std::string& dir) { load_checkpoint(dir); }, &skipped);
  for (const auto& bad : skipped)
    fmt::print(stderr, "turnrl: checkpoint '{}' cannot be loaded ({}); resuming from the older '{}' instead\n",
               bad.entry.path, bad.reason, loaded->path);
  return loaded.has_value();
}

std::string SFTTrainer::export_model() {
  if (!s_->parts.export_model) return "";
  const std::string folder = (fs::path(s_->options().run.dir) / "export").string();
  fs::create_directories(folder);
  s_->parts.export_model(*s_->parts.policy, folder);
  return folder;
}

void SFTTrainer::train(bool resume_run) {
  State& s = *s_;
  const SFTOptions& o = s.options();
  fs::create_directories(o.run.dir);
  if (resume_run) {
    if (!resume() && o.run.progress) fmt::print(stderr, "turnrl: no checkpoint in '{}'; starting at step 0\n", o.run.dir);
  } else if (!list_checkpoints(s.checkpoint_root()).empty()) {
    fail("run.dir '{}' already holds checkpoints; pass --resume to continue that run, or choose another run.dir",
         o.run.dir);
  }
  const std::string metrics_path = (fs::path(o.run.dir) / "metrics.jsonl").string();
  for (const DroppedLine& d : truncate_metrics_after(metrics_path, s.step))
    fmt::print(stderr, "turnrl: resume: dropped line {} of '{}' ({}): {}\n", d.line, metrics_path, d.reason, d.text);
  if (!s.parts.resolved_config.empty())
    write_file_atomically((fs::path(o.run.dir) / "config.yaml").string(), s.parts.resolved_config);
  JsonlWriter metrics(metrics_path);
  TensorBoardWriter events(o.run.dir);
  const int64_t total = total_steps();
  ProgressLine progress(s.step, o.run.progress);
  while (s.step < total) {
    Metrics m = train_step();
    if (s.validation.size() > 0 && ((o.sft.eval_every > 0 && s.step % o.sft.eval_every == 0) || s.step == total))
      m["val/loss"] = mean_loss(s.validation);
    metrics.write_line(metrics_to_json(m));
    events.write_scalars(s.step, m);
    progress.print(fmt::format("step {}/{} | {:.0f} tokens/s | loss {:.4f}{} | lr {:.3g} | ETA {}", s.step, total,
                               m["perf/tokens_per_s"], m["sft/loss"],
                               m.count("val/loss") ? fmt::format(" | val {:.4f}", m["val/loss"]) : "", m["optim/lr"],
                               format_duration(progress.eta_seconds(s.step, total))));
    std::string checkpoint;
    if ((o.checkpoint.every > 0 && s.step % o.checkpoint.every == 0) || s.step == total) checkpoint = save_checkpoint();
    if (const int signal = agreed_stop_signal(nullptr)) {
      progress.finish();
      const std::string where = checkpoint.empty() && o.checkpoint.on_stop ? save_checkpoint() : checkpoint;
      fmt::print(stderr, "turnrl: stopped by {} after step {}; {}\n", strsignal(signal), s.step,
                 where.empty() ? "no checkpoint written (checkpoint.on_stop: false)" : "checkpoint in " + where);
      return;
    }
  }
  progress.finish();
  export_model();
}

int64_t SFTTrainer::step() const { return s_->step; }
Policy& SFTTrainer::policy() { return *s_->parts.policy; }
const SFTRows& SFTTrainer::train_rows() const { return s_->train; }
const SFTRows& SFTTrainer::validation_rows() const { return s_->validation; }

}  // namespace turnrl
