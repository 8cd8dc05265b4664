#pragma once
// The kernel evaluators' built-in task suites as task sets (the kernel domain; task.h is generic).
#include <string>

#include "turnrl/rl/task.h"

namespace turnrl {

// The evaluator's built-in CPU tasks (cpu_task_names()), levels 1-3.
TaskSet builtin_cpu_tasks();
// The CUDA evaluator's built-in tasks (cuda_task_names()), same problems at GPU sizes.
TaskSet builtin_cuda_tasks();
// The built-in suite of an evaluator backend: cpu or cuda; others throw naming tasks.source.
TaskSet builtin_tasks(const std::string& backend);

}  // namespace turnrl
