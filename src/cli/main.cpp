// The turnrl program: one CLI11 parser over every subcommand (train, eval, evaluate-kernel, plot,
// config, eval-worker, import-kernelbench, init-model, make-sft-data, trim-vocab). `turnrl --help` lists them, `turnrl <command> --help`
// prints a command's options and an example, `turnrl --version` the build.
#include <cstdlib>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"

namespace {

// Data-parallel ranks prefix their errors with the rank, so that interleaved output stays readable.
void print_error(const std::string& what) {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (rank && world && std::string(world) != "1")
    fmt::print(stderr, "turnrl: rank {}: error: {}\n", rank, what);
  else
    fmt::print(stderr, "turnrl: error: {}\n", what);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace turnrl::cli;
  CLI::App app("turnrl: multi-turn RL of LLM policies that write kernels.", "turnrl");
  app.set_version_flag("--version", std::function<std::string()>(version_text), "Print the version, git commit, LibTorch and the backends built, then exit");
  app.require_subcommand(1);
  app.footer(
      "Run `turnrl <command> --help` for a command's options and an example.\n"
      "CONFIG is a YAML file (configs/cpu_default.yaml; every key: docs/configuration.md).\n\n"
      "Example:\n  turnrl train configs/cpu_default.yaml --set trainer.steps=60 --set run.dir=runs/longer");
  add_train_commands(app);
  add_sft_command(app);
  add_evaluate_kernel_command(app);
  add_plot_command(app);
  add_config_command(app);
  add_eval_worker_command(app);
  add_import_kernelbench_command(app);
  add_init_model_command(app);
  add_make_sft_data_command(app);
  add_trim_vocab_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command that ran and reports its status (e.g. a failed rank)
  } catch (const CLI::ParseError& e) {
    // --help and --version end here with status 0; usage errors print the message and exit 2, as
    // argparse-based tools (verl, TRL) do.
    const int status = app.exit(e);
    return status == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
  return 0;
}
