// `turnrl import-kernelbench`: converts a KernelBench checkout's folder of problems
// (KernelBench/level1/*.py: class Model, get_inputs, get_init_inputs) into a Python task file
// (eval/python_tasks.h) that the python evaluator and the trainer's task set both read.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/eval/python_tasks.h"

namespace {

constexpr const char* kImportUsage = R"(usage:
  turnrl import-kernelbench FOLDER --out FILE.jsonl [--level 1|2|3] [--prefix P] [--device cpu|cuda|any]

Writes one task per problem file of FOLDER (sorted by problem number). Task ids are
<prefix><level>_<problem>_<name> (default prefix "kb": kb1_19_relu); the level comes from the folder
name (level2 -> 2) unless --level is given. Files without class Model, get_inputs() and
get_init_inputs() are skipped and listed. Tolerances are KernelGYM's (atol = rtol = 1e-2); add
metadata.forbid / extra_shapes by hand where a task needs them (docs/evaluator.md).
)";

}  // namespace

int import_kernelbench_command(int argc, char** argv) {
  using namespace turnrl;
  std::string folder, out;
  KernelBenchImport opt;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail("{} needs a value\n{}", a, kImportUsage);
      return argv[++i];
    };
    if (a == "--out") out = value();
    else if (a == "--prefix") opt.id_prefix = value();
    else if (a == "--device") opt.device = value();
    else if (a == "--level") {
      const std::string v = value();
      if (v != "1" && v != "2" && v != "3") fail("--level: '{}' is not allowed; allowed: 1, 2, 3", v);
      opt.level = std::stoi(v);
    } else if (a == "--help" || a == "-h") {
      fmt::print("{}", kImportUsage);
      return 0;
    } else if (a.rfind("--", 0) == 0) {
      fail("import-kernelbench: unknown option '{}'\n{}", a, kImportUsage);
    } else if (folder.empty()) {
      folder = a;
    } else {
      fail("import-kernelbench takes one FOLDER\n{}", kImportUsage);
    }
  }
  if (folder.empty() || out.empty()) fail("import-kernelbench needs FOLDER and --out FILE\n{}", kImportUsage);
  const KernelBenchImportResult r = import_kernelbench(folder, opt);
  for (auto& t : r.tasks) validate_python_task(t, t.id);
  write_python_tasks(out, r.tasks);
  fmt::print("wrote {} task(s) to {}\n", r.tasks.size(), out);
  for (const auto& [file, why] : r.skipped) fmt::print("skipped {}: {}\n", file, why);
  return 0;
}
