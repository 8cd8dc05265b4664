// Kernel plans rendered as Triton programs for the Python evaluator's GPU tasks.
#include "plan_grammar.h"
#include "turnrl/env/task.h"

namespace turnrl {

std::vector<std::string> triton_plan_task_names() { return {}; }

PlanExpansion expand_triton_plan(const Task& task, const PlanChoices&, const std::string&) {
  return {"", "task '" + task.id + "' has no Triton kernel-plan template"};
}

}  // namespace turnrl
