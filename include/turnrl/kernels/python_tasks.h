#pragma once
// Task sets of the Python backend: KernelBench/KernelGYM-format problems. A task is a PyTorch
// reference module (class Model, get_inputs(), get_init_inputs()) plus what the checker needs: the
// entry point, tolerances, ops the candidate may not call, extra shape sets, where it runs.
//
// The file format is the generic task JSON Lines of env/task.h (so one file serves the trainer's
// `tasks.file` and `evaluator.python.tasks_file`), with backend "python", language "python" and the
// checker's settings in `metadata` (string values):
//
//   {"id": "softmax_rows", "backend": "python", "level": 1, "language": "python",
//    "description": "...", "reference": "import torch\n...class Model(nn.Module): ...",
//    "metadata": {"entry_point": "Model", "atol": "1e-2", "rtol": "1e-2",
//                 "forbid": "aten::softmax,aten::_softmax", "extra_shapes": "batch=7,dim=129;batch=1",
//                 "device": "any", "name": "Softmax"}}
//
// metadata keys (all optional): entry_point (the reference class; the candidate defines
// <entry_point>New), atol / rtol (correctness tolerance, default 1e-2 each, KernelGYM's),
// precision_atol / precision_rtol (the float32 tolerance of the precision-downgrade check, default
// 1e-4 each), forbid (comma-separated ATen ops the candidate may not call, e.g. aten::_softmax),
// extra_shapes (';'-separated sets of NAME=INT overrides of the reference's module-level constants:
// the shape-specialisation trials), device (cpu | cuda | any), name, source, problem_id, note.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "turnrl/rl/task.h"

namespace turnrl {

struct PythonTask {
  std::string id;
  int level = 1;
  std::string description;
  std::string reference;             // Python source: class <entry_point>, get_inputs, get_init_inputs
  std::string entry_point = "Model";
  double atol = 1e-2, rtol = 1e-2;
  double precision_atol = 1e-4, precision_rtol = 1e-4;
  std::vector<std::string> forbid;   // ATen op names, "aten::_softmax"
  std::vector<std::vector<std::pair<std::string, int64_t>>> extra_shapes;
  std::string device = "any";        // cpu | cuda | any
  std::map<std::string, std::string> metadata;  // name, source, problem_id, note (passed through)

  // The generic form (env/task.h) that prompts and task splits use.
  Task to_task() const;
};

struct PythonTaskSet {
  std::vector<PythonTask> tasks;
  size_t size() const { return tasks.size(); }
  // nullptr when absent.
  const PythonTask* find(const std::string& id) const;
};

// Loads and validates a task file. Errors name the file, the line and the key, with the allowed
// values. Blank lines and lines starting with '#' are skipped.
PythonTaskSet load_python_tasks(const std::string& path);
// Validates one task (what load_python_tasks checks after parsing); `where` prefixes messages.
void validate_python_task(const PythonTask& task, const std::string& where);

// One JSON line per task, in the format above (load_tasks_jsonl and load_python_tasks read it).
std::string python_task_json(const PythonTask& task);
void write_python_tasks(const std::string& path, const std::vector<PythonTask>& tasks);

// Converting a KernelBench checkout's folder of problems (KernelBench/level1/19_ReLU.py ...).
struct KernelBenchImport {
  int level = 0;                  // 0: from the folder name ("level2" -> 2), else 1
  std::string id_prefix = "kb";   // ids are <prefix><level>_<problem>_<name>, e.g. kb1_19_relu
  std::string device = "any";
};
struct KernelBenchImportResult {
  std::vector<PythonTask> tasks;
  std::vector<std::pair<std::string, std::string>> skipped;  // file, reason
};
// Every *.py file of the folder (sorted by problem number) that defines the reference interface.
KernelBenchImportResult import_kernelbench(const std::string& folder, const KernelBenchImport& options = {});

}  // namespace turnrl
