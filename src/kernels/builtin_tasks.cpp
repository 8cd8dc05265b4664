#include "turnrl/kernels/builtin_tasks.h"

#include "turnrl/core/error.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/cuda_tasks.h"

namespace turnrl {
namespace {

// A task of an evaluator's suite (CpuTask or CudaTask): id, level, and its inputs' names with
// their first shape set ("x [256, 512], b [512]") for the description.
template <typename SuiteTask>
Task suite_task(const SuiteTask& c, const char* backend, const char* language, std::string& shapes) {
  Task t;
  t.id = c.name;
  t.backend = backend;
  t.level = c.level;
  t.language = language;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    shapes += fmt::format("{}{} [{}]", i ? ", " : "", c.inputs[i].name, fmt::join(c.shape_sets[0][i], ", "));
  return t;
}

}  // namespace

TaskSet builtin_cpu_tasks() {
  TaskSet set;
  for (const std::string& name : cpu_task_names()) {
    const CpuTask& c = cpu_task(name);
    std::string shapes;
    Task t = suite_task(c, "cpu", "cpp", shapes);
    t.description = fmt::format("{}\nInputs (float32, row-major): {}.", c.description, shapes);
    // The reference is a LibTorch functor: its description above is its specification.
    set.tasks.push_back(std::move(t));
  }
  return set;
}

TaskSet builtin_cuda_tasks() {
  TaskSet set;
  for (const std::string& name : cuda_task_names()) {
    const CudaTask& c = cuda_task(name);
    std::string shapes;
    Task t = suite_task(c, "cuda", "cuda", shapes);
    t.description = fmt::format(
        "{}\nInputs (float32, row-major, on the GPU): {}.\nWrite the kernel `{}` (launch shape via #define "
        "TURNRL_BLOCK_X/Y, TURNRL_TILE_X/Y, TURNRL_SHARED_BYTES), or an extern \"C\" turnrl_launch(...) launcher; "
        "see docs/evaluator.md, CUDA backend.",
        c.description, shapes, cuda_kernel_signature(c));
    set.tasks.push_back(std::move(t));
  }
  return set;
}

TaskSet builtin_tasks(const std::string& backend) {
  if (backend == "cuda") return builtin_cuda_tasks();
  if (backend == "cpu") return builtin_cpu_tasks();
  fail("tasks.source: 'builtin' has no task suite for evaluator.backend '{}'; allowed: cpu, cuda (use tasks.source: "
       "file for the others)",
       backend);
}

}  // namespace turnrl
