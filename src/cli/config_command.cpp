// `turnrl config`: prints a config as the trainer resolves it (file + --set overrides + defaults),
// or every key with its default and a comment.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/kernels/config.h"
#include "turnrl/rl/sft_config.h"

namespace turnrl::cli {
namespace {

struct ConfigArgs {
  std::string config;
  std::vector<std::string> sets;
  bool print_defaults = false;
  bool sft = false;  // the config of `turnrl sft`
};

}  // namespace

void add_config_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* c = app.add_subcommand("config", "Print the resolved config, or every key with its default");
  c->add_option("CONFIG", args->config, "YAML config to resolve")->transform(shipped_config());
  add_config_overrides(*c, args->sets);
  c->add_flag("--print-defaults", args->print_defaults, "Print every key with its default and a comment");
  c->add_flag("--sft", args->sft, "The config of `turnrl sft` rather than `turnrl train`");
  c->footer(
      "Examples:\n"
      "  turnrl config --print-defaults > my_config.yaml\n"
      "  turnrl config configs/cpu_default.yaml --set advantage.estimator=grpo\n"
      "  turnrl config --sft --print-defaults");
  c->callback([args] {
    if (args->print_defaults) {
      fmt::print("{}", args->sft ? default_sft_config_yaml() : default_config_yaml());
      return;
    }
    if (args->config.empty()) throw CLI::RequiredError("config needs CONFIG or --print-defaults");
    if (args->sft)
      fmt::print("{}", sft_config_to_yaml(load_sft_config(args->config, args->sets), true));
    else
      fmt::print("{}", config_to_yaml(load_config(args->config, args->sets), true));
  });
}

}  // namespace turnrl::cli
