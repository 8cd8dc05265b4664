// `turnrl train` and `turnrl eval`: a run from a config, and a checkpoint's evaluation.
#include <cstdlib>
#include <limits>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/config.h"
#include "turnrl/kernels/evaluation.h"
#include "turnrl/rl/episode_log.h"
#include "turnrl/rl/metrics.h"
#include "turnrl/kernels/kernel_recipe.h"
#include "turnrl/rl/stop_request.h"

namespace turnrl::cli {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  bool resume = false;
  int nproc = 0;  // 0: not given
};

// The command line each rank runs: this one without --nproc.
std::vector<std::string> rank_command_line(const TrainArgs& a) {
  std::vector<std::string> out = {"turnrl", "train", a.config};
  for (const std::string& s : a.sets) out.insert(out.end(), {"--set", s});
  if (a.resume) out.push_back("--resume");
  return out;
}

int run_training(const TrainArgs& a) {
  if (a.nproc > 0) {
    if (std::getenv("RANK") || std::getenv("WORLD_SIZE"))
      fail("--nproc: RANK / WORLD_SIZE are already set (an external launcher started this process); drop --nproc");
    if (a.nproc > 1) return launch_local_ranks(a.nproc, rank_command_line(a));
  }
  KernelTrainer trainer(load_config(a.config, a.sets));
  const auto& c = trainer.config();
  if (trainer.rank() == 0)
    fmt::print(stderr, "turnrl: {} training tasks, {} x {} episodes a step, {} turns, estimator {}, {} rank(s), run dir {}\n",
               trainer.train_tasks().size(), c.trainer.tasks_per_step, c.trainer.samples_per_task, c.env.max_turns,
               c.estimator, trainer.world_size(), c.run.dir);
  install_stop_handlers();
  trainer.train(a.resume);
  if (const int signal = stop_signal()) return 128 + signal;  // train() said where it stopped
  if (trainer.rank() == 0)
    fmt::print(stderr, "turnrl: done at step {}; metrics in {}/metrics.jsonl\n", trainer.step(), c.run.dir);
  return 0;
}

struct EvalArgs {
  std::string config, checkpoint, json, episodes;
  std::vector<std::string> sets;
};

// With eval.split all and held-out tasks, the episodes are sampled once and reported three ways:
// the held-out tasks, the training tasks, and all of them (a policy's score on tasks it trained on
// says little about what it learnt; the held-out rows do).
void run_evaluation(const EvalArgs& a) {
  KernelTrainer trainer(load_config(a.config, a.sets));
  trainer.load_policy(a.checkpoint);
  const EvalConfig& options = trainer.config().eval;
  const TaskSet &train = trainer.train_tasks(), &held_out = trainer.validation_tasks();
  TaskSet tasks = options.split == "train" ? train : held_out;
  if (options.split == "all") tasks.tasks.insert(tasks.tasks.begin(), train.tasks.begin(), train.tasks.end());
  const RolloutBatch episodes = sample_evaluation_episodes(trainer.policy(), trainer.collector(), tasks, options);
  const EvalReport report = summarize_task_episodes(episodes, tasks, options);
  Metrics metrics = report.to_metrics();
  if (options.split == "all" && !held_out.tasks.empty()) {
    const auto ids = [](const TaskSet& t) {
      std::vector<std::string> out;
      for (const Task& task : t.tasks) out.push_back(task.id);
      return fmt::format("{}", fmt::join(out, ", "));
    };
    for (const auto& [name, split, prefix] : {std::tuple{"held-out", &held_out, "eval/held_out"}, {"training", &train, "eval/train"}}) {
      const EvalReport part = summarize_task_episodes(episodes, *split, options);
      fmt::print("{} tasks ({}):\n{}\n", name, ids(*split), part.to_text());
      for (const auto& [key, value] : part.to_metrics(prefix)) metrics[key] = value;
    }
    fmt::print("all tasks:\n");
  }
  fmt::print("{}", report.to_text());
  const std::vector<TaskReport> per_task = summarize_each_task(episodes, tasks, options);
  fmt::print("per task:\n{}", task_table(per_task));
  for (const auto& [key, value] : task_metrics(per_task)) metrics[key] = value;
  if (!a.json.empty()) write_file(a.json, metrics_to_json(metrics) + "\n");
  if (!a.episodes.empty())
    write_file(a.episodes, episode_lines(episodes, /*step=*/0, std::numeric_limits<int64_t>::max()));
}

}  // namespace

void add_train_commands(CLI::App& app) {
  auto train = std::make_shared<TrainArgs>();
  CLI::App* t = app.add_subcommand("train", "Train a policy: rollouts, rewards, advantages, PPO updates, checkpoints");
  t->add_option("CONFIG", train->config, "YAML config (configs/cpu_default.yaml; keys: docs/configuration.md)")
      ->required()->transform(shipped_config());
  add_config_overrides(*t, train->sets);
  t->add_flag("--resume", train->resume, "Continue from the newest checkpoint in run.dir");
  t->add_option("--nproc", train->nproc,
                "Data-parallel ranks on this host (or launch under torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)")
      ->check(integer_in(1, 1024));
  t->footer(
      "Writes run.dir/metrics.jsonl, a TensorBoard event file, samples.jsonl and checkpoints/.\n\n"
      "Examples:\n"
      "  turnrl train configs/cpu_default.yaml\n"
      "  turnrl train configs/cpu_default.yaml --set trainer.steps=60 --set run.dir=runs/longer\n"
      "  turnrl train configs/cpu_default.yaml --resume\n"
      "  turnrl train configs/cpu_default.yaml --nproc 2");
  t->callback([train] {
    const int status = run_training(*train);
    if (status != 0) throw CLI::RuntimeError(status);
  });

  auto eval = std::make_shared<EvalArgs>();
  CLI::App* e = app.add_subcommand("eval", "Evaluate a checkpoint: pass@k and fast@p per level, hacking counts");
  e->add_option("CONFIG", eval->config, "YAML config the checkpoint was trained with")->required()->transform(shipped_config());
  e->add_option("--checkpoint", eval->checkpoint, "Checkpoint directory (run.dir/checkpoints/step_NNNNNNNN)")
      ->required();
  add_config_overrides(*e, eval->sets);
  e->add_option("--json", eval->json, "Also write the report's numbers as one JSON object to this file");
  e->add_option("--episodes", eval->episodes,
                "Also write every episode, turn by turn (observation, action, reward, verdict), as JSON lines");
  e->footer(
      "Evaluates eval.split (all by default; validation: the held-out tasks of tasks.validation_fraction)\n"
      "with eval.samples episodes a task. With split all and held-out tasks, prints the held-out tasks',\n"
      "the training tasks' and all tasks' tables; --json has them as eval/held_out/*, eval/train/* and eval/*.\n"
      "Then a row a task (--json: eval/task/<id>/*).\n\n"
      "Example:\n"
      "  turnrl eval configs/cpu_default.yaml --checkpoint runs/cpu_default/checkpoints/step_00000030");
  e->callback([eval] { run_evaluation(*eval); });
}

}  // namespace turnrl::cli
