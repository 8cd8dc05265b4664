// `turnrl import-kernelbench`: converts a KernelBench checkout's folder of problems
// (KernelBench/level1/*.py: class Model, get_inputs, get_init_inputs) into a Python task file
// (eval/python_tasks.h) that the python evaluator and the trainer's task set both read.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/kernels/python_tasks.h"

namespace turnrl::cli {
namespace {

struct ImportArgs {
  std::string folder, out;
  KernelBenchImport options;
};

void run_import(const ImportArgs& a) {
  const KernelBenchImportResult r = import_kernelbench(a.folder, a.options);
  for (auto& t : r.tasks) validate_python_task(t, t.id);
  write_python_tasks(a.out, r.tasks);
  fmt::print("wrote {} task(s) to {}\n", r.tasks.size(), a.out);
  for (const auto& [file, why] : r.skipped) fmt::print("skipped {}: {}\n", file, why);
}

}  // namespace

void add_import_kernelbench_command(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* c = app.add_subcommand("import-kernelbench", "Convert a KernelBench folder of problems into a Python task file");
  c->add_option("FOLDER", a->folder, "A KernelBench level folder (KernelBench/level1)")->required()->check(CLI::ExistingDirectory);
  c->add_option("--out", a->out, "The task file to write (JSON Lines)")->required();
  c->add_option("--level", a->options.level, "Level of the tasks (default: from the folder name, level2 -> 2)")
      ->check(CLI::IsMember({1, 2, 3}));
  c->add_option("--prefix", a->options.id_prefix, "Task id prefix")->capture_default_str();
  c->add_option("--device", a->options.device, "Where the tasks run")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda", "any"}));
  c->footer(
      "Task ids are <prefix><level>_<problem>_<name> (kb1_19_relu). Files without class Model, get_inputs()\n"
      "and get_init_inputs() are skipped and listed. Tolerances are KernelGYM's (atol = rtol = 1e-2); add\n"
      "metadata.forbid / extra_shapes by hand where a task needs them (docs/evaluator.md).\n\n"
      "Example:\n"
      "  turnrl import-kernelbench KernelBench/level1 --out level1.jsonl");
  c->callback([a] { run_import(*a); });
}

}  // namespace turnrl::cli
