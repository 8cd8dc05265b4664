// `turnrl sft`: supervised fine-tuning of the configured policy on chat conversations, the warm
// start whose export `turnrl train` continues from (model.init).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/cuda.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/rl/sft_config.h"
#include "turnrl/rl/policy_factory.h"
#include "turnrl/rl/sft.h"
#include "turnrl/rl/stop_request.h"

namespace turnrl::cli {
namespace {

struct SFTArgs {
  std::string config;
  std::vector<std::string> sets;
  bool resume = false;
};

// The configured policy (policy_factory.h). The export is what the RL config's model section reads:
// the builtin policy's model file (model.init: <run.dir>/export/policy.pt), or for hf a plain
// HuggingFace folder with the adapters merged and the tokenizer files (model.path: <run.dir>/export).
SFTParts sft_parts(const SFTConfig& c) {
  if (c.model.device == "cuda" && !torch::cuda::is_available())
    fail("model.device: 'cuda' but LibTorch sees no CUDA device; allowed here: cpu");
  const ChatPolicy chat = make_chat_policy(c.model, uint64_t(c.sft.seed), torch::Device(c.model.device));
  SFTParts parts;
  parts.policy = chat.policy;
  parts.tokenizer = chat.tokenizer;
  parts.max_seq = chat.max_seq;
  const std::string tokenizer_dir = c.model.tokenizer.empty() ? c.model.path : c.model.tokenizer;
  parts.export_model = [tokenizer_dir](Policy& policy, const std::string& folder) {
    if (auto* hf = dynamic_cast<HFPolicy*>(&policy))
      hf->save_pretrained(folder, SavePretrainedOptions().copy_files_from(tokenizer_dir));
    else
      policy.save(folder + "/policy.pt");
  };
  return parts;
}

int run_sft(const SFTArgs& a) {
  const SFTConfig c = load_sft_config(a.config, a.sets);
  SFTParts parts = sft_parts(c);
  parts.options = c;
  parts.resolved_config = sft_config_to_yaml(c);
  SFTTrainer trainer(std::move(parts));
  const SFTRows& rows = trainer.train_rows();
  fmt::print(stderr,
             "turnrl: sft on {} conversations ({} rows, {} truncated, {} dropped; {} validation rows), {} steps of {} x {} "
             "rows, run dir {}\n",
             rows.conversations, rows.size(), rows.truncated, rows.dropped, trainer.validation_rows().size(),
             trainer.total_steps(), c.sft.grad_accum, c.sft.micro_batch_size, c.run.dir);
  install_stop_handlers();
  trainer.train(a.resume);
  if (const int signal = stop_signal()) return 128 + signal;  // train() said where it stopped
  fmt::print(stderr, "turnrl: done at step {}; metrics in {}/metrics.jsonl, model in {}/export\n", trainer.step(),
             c.run.dir, c.run.dir);
  return 0;
}

}  // namespace

void add_sft_command(CLI::App& app) {
  auto args = std::make_shared<SFTArgs>();
  CLI::App* s = app.add_subcommand("sft", "Supervised fine-tuning on chat conversations (loss on assistant tokens)");
  s->add_option("CONFIG", args->config, "YAML config (configs/cpu_sft.yaml; keys: docs/configuration.md)")
      ->required()->transform(shipped_config());
  add_config_overrides(*s, args->sets);
  s->add_flag("--resume", args->resume, "Continue from the newest checkpoint in run.dir");
  s->footer(
      "Reads data.train ({\"messages\": [{\"role\": ..., \"content\": ...}, ...]} a line), writes run.dir/metrics.jsonl,\n"
      "a TensorBoard event file, checkpoints/ and export/ (what `turnrl train` starts from with model.init).\n\n"
      "Examples:\n"
      "  turnrl sft configs/cpu_sft.yaml\n"
      "  turnrl sft configs/cpu_sft.yaml --set sft.steps=200 --set run.dir=runs/sft_longer\n"
      "  turnrl sft configs/cpu_sft.yaml --resume");
  s->callback([args] {
    const int status = run_sft(*args);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace turnrl::cli
