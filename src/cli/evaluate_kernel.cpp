// `turnrl evaluate-kernel`: one candidate (source or kernel plan) through the evaluator, the reward
// policy and the feedback renderer, exactly as one turn of an episode sees it.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/kernel_env.h"
#include "turnrl/rl/task.h"
#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/kernel_reward.h"
#include "turnrl/kernels/config.h"
#include "turnrl/kernels/kernel_recipe.h"

namespace turnrl::cli {
namespace {

struct EvaluateKernelArgs {
  std::string task, candidate_file, config;
  std::vector<std::string> sets;
};

void run_evaluate_kernel(const EvaluateKernelArgs& a) {
  const TrainConfig config = load_config(a.config, a.sets);
  const TaskSet tasks =
      config.tasks.source == "file" ? load_tasks_jsonl(config.tasks.file) : builtin_tasks(builtin_task_backend(config.evaluator));
  const Task& task = tasks.find(a.task);
  const std::string text = read_file(a.candidate_file, "CANDIDATE_FILE");
  const bool is_plan = text.find("```") == std::string::npos && text.find("fusion=") != std::string::npos;
  KernelEnvOptions env = config.env;
  env.action = is_plan ? ActionFormat::plan : ActionFormat::code;
  env.max_turns = 1;
  KernelEnv episode(make_evaluator(config), KernelRewardPolicy(config.reward), env);
  episode.reset(task);
  const std::string action = is_plan ? text : fmt::format("```{}\n{}\n```\n", task.language, text);
  const StepResult step = episode.step({action});
  const EvalResult& e = kernel_verdict(step.payload.get()).eval;
  const KernelReward& r = episode.history().back().reward;
  fmt::print("task: {} (level {}, backend {})\ncandidate: {} ({})\n", task.id, task.level, task.backend,
             a.candidate_file, is_plan ? "kernel plan" : "source");
  fmt::print("stage: {}   error: {}   correct: {}\n", to_string(e.stage), to_string(e.error), e.correct ? "yes" : "no");
  if (e.max_abs_error > 0 || e.failing_index >= 0)
    fmt::print("max abs error: {:.3g}   max rel error: {:.3g}   first failing index: {}\n", e.max_abs_error,
               e.max_rel_error, e.failing_index);
  if (e.candidate_time.trials > 0)
    fmt::print("time: reference {:.1f} us (MAD {:.1f}), candidate {:.1f} us (MAD {:.1f}), {} trials; speedup {:.3f}x\n",
               e.reference_time.median_us, e.reference_time.spread_us, e.candidate_time.median_us,
               e.candidate_time.spread_us, e.candidate_time.trials, e.speedup);
  fmt::print("coverage: {:.3f} (reference definition {:.3f}, kernel count {:.3f})\n", e.coverage, e.reference_coverage,
             e.kernel_count_coverage);
  fmt::print("hacking: {}\n", e.hacked() ? hacking_flag_names(e.hacking_flags) + " (" + e.hacking_reason + ")" : "none");
  fmt::print("reward: {:.4f} = correctness {:.4f} + speedup {:.4f} + coverage {:.4f} + penalty {:.4f} [{}]\n", r.reward,
             r.correctness, r.speedup, r.coverage, r.penalty, to_string(r.outcome));
  fmt::print("evaluation wall time: {:.2f} s\n\nfeedback the policy would see:\n{}", e.wall_seconds, step.feedback);
}

}  // namespace

void add_evaluate_kernel_command(CLI::App& app) {
  auto args = std::make_shared<EvaluateKernelArgs>();
  CLI::App* c = app.add_subcommand("evaluate-kernel", "Run one candidate kernel through the evaluator and print its reward");
  c->add_option("TASK", args->task, "Task id (built-in tasks of evaluator.backend, or tasks.file)")->required();
  c->add_option("CANDIDATE_FILE", args->candidate_file,
                "C++/CUDA/Triton source, or a kernel plan (\"fusion=fused vec=4 unroll=2 acc=f32 ...\")")
      ->required();
  c->add_option("--config", args->config, "YAML config for the evaluator and reward settings (default: built-in defaults)")->transform(shipped_config());
  add_config_overrides(*c, args->sets);
  c->footer(
      "Example:\n"
      "  turnrl evaluate-kernel relu_bias my_kernel.cpp\n"
      "  turnrl evaluate-kernel swiglu plan.txt --set evaluator.backend=cpu --set env.timing_trials=5");
  c->callback([args] { run_evaluate_kernel(*args); });
}

}  // namespace turnrl::cli
