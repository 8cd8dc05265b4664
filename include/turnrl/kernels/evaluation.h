#pragma once
// Evaluation of a policy on a task set, with the statistics the paper reports: pass@k (a task
// is solved by an episode with a correct, non-hacked turn), fast@p (the share of episodes whose
// best correct speedup reaches p; never-correct episodes count as speedup 0), per level and
// overall, and how often each reward-hacking check fired. For multi-turn episodes also the
// paper's sequential test-time scaling: fast@p of the last turn alone and of the best over the
// first t turns for every t, and the mean number of turns to the first correct one.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "turnrl/rl/task.h"
#include "turnrl/model/policy.h"
#include "turnrl/kernels/config.h"
#include "turnrl/rl/metrics.h"
#include "turnrl/rl/rollout.h"

namespace turnrl {

struct LevelReport {
  int level = 0;  // 0: all levels together
  int64_t tasks = 0, episodes = 0;
  std::map<int64_t, double> pass_at_k;  // k -> mean over tasks of the unbiased pass@k
  std::map<double, double> fast_at_p;   // p -> fast@p over episodes (best correct turn)
  std::map<double, double> fast_at_p_last;  // p -> fast@p of each episode's last turn alone
  // p -> [fast@p of the best over turns 1..t for t = 1..longest episode]; an episode shorter
  // than t counts with all its turns. The last entry equals fast_at_p[p].
  std::map<double, std::vector<double>> fast_at_p_by_turns;
  double mean_reward = 0;               // mean turn reward
  // Over episodes with a correct turn: the mean 1-based turn of the first one (0: none solved).
  double mean_turns_to_success = 0;
  double hacked_turn_share = 0;  // turns flagged by a hacking check over all turns
};

struct EvalReport {
  std::vector<LevelReport> levels;  // ascending level, then the overall row (level 0)
  std::map<std::string, int64_t> hacking;  // check name -> turns it fired on
  int64_t turns = 0;

  // A table for people.
  std::string to_text() const;
  // Flat metrics "eval/pass@k/level1", "eval/fast@1.2/all", "eval/hacking/<name>", ... under
  // `prefix` ("eval/held_out/pass@1/all" with prefix "eval/held_out").
  Metrics to_metrics(const std::string& prefix = "eval") const;
};

// One task's statistics: the overall row of its episodes alone (stats.level is the task's level).
struct TaskReport {
  std::string task;
  LevelReport stats;
};

// Statistics of finished kernel rollouts (any sampling; every row's payload a KernelVerdict), using
// the given k and p lists.
EvalReport summarize_rollouts(const RolloutBatch& rollouts, const std::vector<int64_t>& pass_k,
                              const std::vector<double>& fast_p);

// summarize_rollouts of the episodes of `tasks` alone (one split of an evaluation that sampled
// several, so that held-out tasks are reported apart from training ones), with options.pass_k and
// options.fast_p. A task of `tasks` without episodes is an error.
EvalReport summarize_task_episodes(const RolloutBatch& rollouts, const TaskSet& tasks, const EvalConfig& options);

// summarize_task_episodes of each task of `tasks` alone, in their order: which tasks a score comes
// from (KernelBench reports its problems one by one).
std::vector<TaskReport> summarize_each_task(const RolloutBatch& rollouts, const TaskSet& tasks, const EvalConfig& options);
// A table for people, a row a task, with EvalReport::to_text's columns.
std::string task_table(const std::vector<TaskReport>& tasks);
// Flat metrics of each task's row: "eval/task/<id>/pass@1", "eval/task/<id>/fast@1.2", ...
Metrics task_metrics(const std::vector<TaskReport>& tasks, const std::string& prefix = "eval");

// options.samples episodes of every task of `tasks` by `policy`, collected by `collector` (a kernel
// trainer's: KernelTrainer::collector()) with options.temperature / top_p / seed.
RolloutBatch sample_evaluation_episodes(Policy& policy, const RolloutCollector& collector, const TaskSet& tasks,
                                        const EvalConfig& options);

// sample_evaluation_episodes, then summarize_rollouts with options.pass_k and options.fast_p.
EvalReport evaluate_policy(Policy& policy, const RolloutCollector& collector, const TaskSet& tasks,
                           const EvalConfig& options);

}  // namespace turnrl
