// Kernel plans rendered as CUDA for the CUDA evaluator's built-in tasks (src/eval/cuda_tasks.cpp).
#include "plan_grammar.h"
#include "turnrl/env/task.h"

namespace turnrl {

std::vector<std::string> cuda_plan_task_names() { return {}; }

PlanExpansion expand_cuda_plan(const Task& task, const PlanChoices&, const std::string&) {
  return {"", "task '" + task.id + "' has no CUDA kernel-plan template"};
}

}  // namespace turnrl
