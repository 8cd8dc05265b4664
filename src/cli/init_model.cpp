// `turnrl init-model`: writes a randomly initialised HuggingFace model folder (config.json,
// model.safetensors, the tokenizer files) from a preset, for `model.type: hf` / `model.path` when
// no pretrained weights are at hand (model/hf_init.h).
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (LibTorch 2.x bundles fmt 11, where join lives here)

#include "commands.h"
#include "turnrl/model/hf_init.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/model/hf_tokenizer.h"

namespace turnrl::cli {
namespace {

struct InitModelArgs {
  std::string out, preset = "qwen3-tiny", tokenizer, dtype = "float32";
  std::vector<std::string> sets;
  uint64_t seed = 0;
};

void run_init_model(const InitModelArgs& a) {
  const std::string tokenizer_dir = a.tokenizer.empty() ? hf_tokenizer_files(hf_preset_tokenizer(a.preset)) : a.tokenizer;
  const auto tokenizer = load_hf_chat_tokenizer(tokenizer_dir);
  std::string config = hf_preset_config(a.preset, hf_preset_vocab(a.preset, tokenizer->tokenizer()));
  for (const std::string& assignment : a.sets) config = set_hf_config_key(config, assignment);
  const int64_t parameters = write_random_hf_model(
      a.out, config,
      RandomHFModelOptions().seed(a.seed).dtype(hf_dtype_from_name(a.dtype)).tokenizer_dir(tokenizer_dir));
  fmt::print("wrote {} ({}, {:.1f} M parameters, {}, seed {}; tokenizer from {})\n", a.out, a.preset,
             double(parameters) / 1e6, a.dtype, a.seed, tokenizer_dir);
}

}  // namespace

void add_init_model_command(CLI::App& app) {
  auto a = std::make_shared<InitModelArgs>();
  CLI::App* c = app.add_subcommand("init-model", "Write a randomly initialised HuggingFace model folder (model.type: hf)");
  c->add_option("--out", a->out, "The folder to write (config.json, model.safetensors, tokenizer files)")->required();
  c->add_option("--preset", a->preset, "Architecture and shape")->capture_default_str()->check(CLI::IsMember(hf_preset_names()));
  c->add_option("--set", a->sets, "Override a config.json key, e.g. --set num_hidden_layers=2 (repeatable)");
  c->add_option("--seed", a->seed, "Seed of the random weights")->capture_default_str();
  c->add_option("--dtype", a->dtype, "Dtype of the written weights")->capture_default_str()->check(
      CLI::IsMember({"float32", "bfloat16", "float16"}));
  c->add_option("--tokenizer", a->tokenizer,
                "Tokenizer folder to copy (default: the preset family's files that scripts/setup.sh fetched)");
  c->footer(fmt::format(
      "Presets: {}. The tiny ones (hidden 128, 4 layers) train on a CPU and take the tokenizer's\n"
      "vocabulary (a trimmed one from `turnrl trim-vocab` makes them smaller); the others have the\n"
      "released models' shapes; bos/eos ids come from the tokenizer. Weights are drawn as transformers'\n"
      "_init_weights draws them (normal(0, initializer_range), norms one, biases zero), so the folder\n"
      "loads with model.path and with transformers' from_pretrained.\n\n"
      "Example:\n"
      "  turnrl init-model --out models/qwen3-tiny --preset qwen3-tiny --seed 1\n"
      "  turnrl init-model --out models/qwen3-tiny --preset qwen3-tiny --seed 1 --tokenizer models/qwen3-code-tokenizer\n"
      "  turnrl train configs/cpu_qwen3_code.yaml",
      fmt::join(hf_preset_names(), ", ")));
  c->callback([a] { run_init_model(*a); });
}

}  // namespace turnrl::cli
