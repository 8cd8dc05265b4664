// `turnrl sft`: supervised fine-tuning of the configured policy on chat conversations, the warm
// start whose export `turnrl train` continues from (model.init).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/model/transformer.h"
#include "turnrl/trainer/config.h"
#include "turnrl/trainer/sft.h"
#include "turnrl/trainer/stop_request.h"

namespace turnrl::cli {
namespace {

struct SFTArgs {
  std::string config;
  std::vector<std::string> sets;
  bool resume = false;
};

// The built-in policy over the byte tokenizer, as `turnrl train` builds it for code actions; the
// export is its model file, which model.init reads.
SFTParts builtin_sft_parts(const SFTConfig& c) {
  SFTParts parts;
  parts.tokenizer = std::make_shared<const ByteChatTokenizer>();
  torch::manual_seed(uint64_t(c.sft.seed));
  TransformerOptions mo;
  mo.vocab(parts.tokenizer->vocab_size()).d_model(c.model.d_model).layers(c.model.layers).heads(c.model.heads)
      .ffn(c.model.ffn).max_seq(c.model.max_seq);
  validate(mo);
  auto policy = std::make_shared<TransformerPolicy>(mo, c.model.device == "cuda" ? torch::kCUDA : torch::kCPU);
  if (!c.model.init.empty()) policy->load(c.model.init);
  parts.policy = policy;
  parts.export_model = [](Policy& p, const std::string& folder) { p.save(folder + "/policy.pt"); };
  return parts;
}

int run_sft(const SFTArgs& a) {
  const SFTConfig c = load_sft_config(a.config, a.sets);
  SFTParts parts = builtin_sft_parts(c);
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
