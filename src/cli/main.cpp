// The turnrl program: train, evaluate, inspect one kernel, plot metrics, print configs.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/env/kernel_env.h"
#include "turnrl/env/kernel_plan.h"
#include "turnrl/env/task.h"
#include "turnrl/eval/evaluator.h"
#include "turnrl/reward/kernel_reward.h"
#include "turnrl/trainer/config.h"
#include "turnrl/trainer/evaluation.h"
#include "turnrl/trainer/metrics.h"
#include "turnrl/trainer/plot.h"
#include "turnrl/trainer/stop_request.h"
#include "turnrl/trainer/trainer.h"

namespace {

using namespace turnrl;

constexpr const char* kUsage = R"(usage:
  turnrl train CONFIG [--set key.path=value ...] [--resume] [--nproc N]
      (--nproc N: N data-parallel ranks on this host; or launch under torchrun-style
       RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)
  turnrl eval CONFIG --checkpoint DIR [--set key.path=value ...] [--json FILE]
  turnrl evaluate-kernel TASK CANDIDATE_FILE [--config CONFIG] [--set key.path=value ...]
  turnrl plot METRICS.jsonl [--out PNG]
  turnrl config --print-defaults
  turnrl config CONFIG [--set key.path=value ...]     (prints the resolved config)
  turnrl eval-worker --redis URL --backend cpu|cuda|python [...]   (serves the remote evaluator; --help)
  turnrl import-kernelbench FOLDER --out FILE.jsonl [...]   (KernelBench problems -> Python tasks; --help)

CONFIG is a YAML file (configs/cpu_default.yaml; every key: docs/configuration.md).
CANDIDATE_FILE holds C++ source for the CPU evaluator, or a kernel plan
("fusion=fused vec=4 unroll=2 acc=f32 fallback=none bounds=checked shortcut=none").
)";

struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  std::map<std::string, std::string> options;  // --name value
  std::set<std::string> flags;                 // --name
};

Args parse_args(int argc, char** argv, int first, const std::set<std::string>& valued, const std::set<std::string>& flags) {
  Args a;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set") {
      if (i + 1 >= argc) fail("--set needs key.path=value");
      a.sets.push_back(argv[++i]);
    } else if (arg.rfind("--set=", 0) == 0) {
      a.sets.push_back(arg.substr(6));
    } else if (valued.count(arg)) {
      if (i + 1 >= argc) fail("{} needs a value", arg);
      a.options[arg] = argv[++i];
    } else if (flags.count(arg)) {
      a.flags.insert(arg);
    } else if (arg.rfind("--", 0) == 0) {
      fail("unknown option '{}'\n{}", arg, kUsage);
    } else {
      a.positional.push_back(arg);
    }
  }
  return a;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int train(int argc, char** argv) {
  const Args a = parse_args(argc, argv, 2, {"--nproc"}, {"--resume"});
  if (a.positional.size() != 1) fail("train needs one CONFIG\n{}", kUsage);
  if (a.options.count("--nproc")) {
    const std::string text = a.options.at("--nproc");
    int nproc = 0;
    try {
      size_t used = 0;
      nproc = std::stoi(text, &used);
      if (used != text.size()) nproc = 0;
    } catch (const std::exception&) {
      nproc = 0;
    }
    if (nproc < 1 || nproc > 1024) fail("--nproc: '{}' is not allowed; allowed: an integer in [1, 1024]", text);
    if (std::getenv("RANK") || std::getenv("WORLD_SIZE"))
      fail("--nproc: RANK / WORLD_SIZE are already set (an external launcher started this process); drop --nproc");
    if (nproc > 1) {
      // The same command line without --nproc, once per rank.
      std::vector<std::string> child;
      for (int i = 0; i < argc; ++i) {
        if (std::string(argv[i]) == "--nproc") {
          ++i;
          continue;
        }
        child.push_back(argv[i]);
      }
      return launch_local_ranks(nproc, child);
    }
  }
  Trainer trainer(load_config(a.positional[0], a.sets));
  const auto& c = trainer.config();
  if (trainer.rank() == 0)
    fmt::print(stderr, "turnrl: {} training tasks, {} x {} episodes a step, {} turns, estimator {}, {} rank(s), run dir {}\n",
               trainer.train_tasks().size(), c.trainer.tasks_per_step, c.trainer.samples_per_task, c.env.max_turns,
               c.estimator, trainer.world_size(), c.run.dir);
  install_stop_handlers();
  trainer.train(a.flags.count("--resume") > 0);
  if (const int signal = stop_signal()) return 128 + signal;  // train() said where it stopped
  if (trainer.rank() == 0)
    fmt::print(stderr, "turnrl: done at step {}; metrics in {}/metrics.jsonl\n", trainer.step(), c.run.dir);
  return 0;
}

int eval(int argc, char** argv) {
  const Args a = parse_args(argc, argv, 2, {"--checkpoint", "--json"}, {});
  if (a.positional.size() != 1 || !a.options.count("--checkpoint"))
    fail("eval needs CONFIG and --checkpoint DIR\n{}", kUsage);
  Trainer trainer(load_config(a.positional[0], a.sets));
  trainer.load_policy(a.options.at("--checkpoint"));
  const std::string split = trainer.config().eval.split;
  TaskSet tasks = split == "train" ? trainer.train_tasks() : trainer.validation_tasks();
  if (split == "all") tasks.tasks.insert(tasks.tasks.begin(), trainer.train_tasks().tasks.begin(), trainer.train_tasks().tasks.end());
  const EvalReport report = evaluate_policy(trainer, tasks);
  fmt::print("{}", report.to_text());
  if (a.options.count("--json")) write_file(a.options.at("--json"), metrics_to_json(report.to_metrics()) + "\n");
  return 0;
}

int evaluate_kernel(int argc, char** argv) {
  const Args a = parse_args(argc, argv, 2, {"--config"}, {});
  if (a.positional.size() != 2) fail("evaluate-kernel needs TASK and CANDIDATE_FILE\n{}", kUsage);
  const TrainConfig config = load_config(a.options.count("--config") ? a.options.at("--config") : "", a.sets);
  const TaskSet tasks = config.tasks.source == "file" ? load_tasks_jsonl(config.tasks.file) : builtin_tasks(config.evaluator.backend);
  const Task& task = tasks.find(a.positional[0]);
  const std::string text = read_file(a.positional[1]);
  const bool is_plan = text.find("```") == std::string::npos && text.find("fusion=") != std::string::npos;
  KernelEnvOptions env = config.env;
  env.action = is_plan ? ActionFormat::plan : ActionFormat::code;
  env.max_turns = 1;
  KernelEnv episode(make_evaluator(config), KernelRewardPolicy(config.reward), env);
  episode.reset(task);
  const std::string action = is_plan ? text : fmt::format("```{}\n{}\n```\n", task.language, text);
  const StepResult step = episode.step({action});
  const EvalResult& e = *step.eval;
  const KernelReward& r = episode.history().back().reward;
  fmt::print("task: {} (level {}, backend {})\ncandidate: {} ({})\n", task.id, task.level, task.backend,
             a.positional[1], is_plan ? "kernel plan" : "source");
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
  return 0;
}

int plot(int argc, char** argv) {
  const Args a = parse_args(argc, argv, 2, {"--out"}, {});
  if (a.positional.size() != 1) fail("plot needs METRICS.jsonl\n{}", kUsage);
  const std::string out = a.options.count("--out")
                              ? a.options.at("--out")
                              : (std::filesystem::path(a.positional[0]).parent_path() / "metrics.png").string();
  const auto rows = read_metrics_jsonl(a.positional[0]);
  plot_metrics(rows, out);
  fmt::print("wrote {} ({} steps)\n", out, rows.size());
  return 0;
}

int config(int argc, char** argv) {
  const Args a = parse_args(argc, argv, 2, {}, {"--print-defaults"});
  if (a.flags.count("--print-defaults")) {
    fmt::print("{}", default_config_yaml());
    return 0;
  }
  if (a.positional.size() != 1) fail("config needs --print-defaults or a CONFIG\n{}", kUsage);
  fmt::print("{}", config_to_yaml(load_config(a.positional[0], a.sets), true));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help" || std::string(argv[1]) == "-h") {
    fmt::print("{}", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    if (command == "train") return train(argc, argv);
    if (command == "eval") return eval(argc, argv);
    if (command == "evaluate-kernel") return evaluate_kernel(argc, argv);
    if (command == "plot") return plot(argc, argv);
    if (command == "config") return config(argc, argv);
    if (command == "eval-worker") return eval_worker_command(argc, argv);
    if (command == "import-kernelbench") return import_kernelbench_command(argc, argv);
    fmt::print(stderr, "turnrl: unknown command '{}'\n{}", command, kUsage);
    return 2;
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    if (rank && std::getenv("WORLD_SIZE") && std::string(std::getenv("WORLD_SIZE")) != "1")
      fmt::print(stderr, "turnrl: rank {}: error: {}\n", rank, e.what());
    else
      fmt::print(stderr, "turnrl: error: {}\n", e.what());
    return 1;
  }
}
