#pragma once
// Internal to the kernel-plan renderers: a parsed plan (one choice per slot of plan_slots()) and
// the per-backend renderers expand_plan() dispatches to by Task::backend. kernel_plan.cpp renders
// C++ for the CPU evaluator, cuda_plan.cpp CUDA kernels for the CUDA evaluator, triton_plan.cpp
// Triton programs for the Python evaluator -- one grammar, so one tokenizer and one policy serve
// every backend.
#include <string>
#include <vector>

#include "turnrl/kernels/kernel_plan.h"

namespace turnrl {

struct Task;

struct PlanChoices {
  bool fused = true;
  int vec = 1, unroll = 1;
  std::string acc, fallback, shortcut;
  bool checked = true;
  int width() const { return vec * unroll; }
};

// Parses "slot=choice" words (each slot exactly once). Returns "" or an error naming the slot, the
// word and the allowed choices.
std::string parse_plan(const std::string& text, PlanChoices& plan);

// The tasks each renderer has a template for, and the renderers (`text` is the plan as written,
// kept in the source as a comment).
std::vector<std::string> cuda_plan_task_names();
PlanExpansion expand_cuda_plan(const Task& task, const PlanChoices& plan, const std::string& text);
std::vector<std::string> triton_plan_task_names();
PlanExpansion expand_triton_plan(const Task& task, const PlanChoices& plan, const std::string& text);

}  // namespace turnrl
