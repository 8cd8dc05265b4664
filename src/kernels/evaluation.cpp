#include "turnrl/kernels/evaluation.h"

#include <set>
#include <sstream>

#include <fmt/format.h>

#include "turnrl/core/error.h"
#include "turnrl/kernels/kernel_reward.h"
#include "turnrl/kernels/kernel_stages.h"

namespace turnrl {

EvalReport summarize_rollouts(const RolloutBatch& r, const std::vector<int64_t>& pass_k, const std::vector<double>& fast_p) {
  struct Episode {
    int64_t group = 0;
    int64_t first_solved_turn = -1;    // 0-based
    std::vector<double> best_by_turns;  // [t]: best correct speedup over turns 0..t (0 if none)
    double last_speedup = 0;            // the last turn's speedup if correct, else 0
    int64_t hacked_turns = 0;
  };
  std::map<int64_t, Episode> episodes;
  EvalReport report;
  const int64_t rows = r.batch.size();
  report.turns = rows;
  const torch::Tensor traj = r.batch.traj.cpu().contiguous(), group = r.batch.group.cpu().contiguous();
  const torch::Tensor reward = r.batch.reward.to(torch::kCPU, torch::kDouble).contiguous();
  std::map<int, std::pair<double, int64_t>> reward_by_level;
  const std::vector<EvalResult> evals = kernel_evals(r);
  for (int64_t i = 0; i < rows; ++i) {
    const EvalResult& e = evals[size_t(i)];
    const int64_t g = group.data_ptr<int64_t>()[i];
    Episode& ep = episodes[traj.data_ptr<int64_t>()[i]];
    ep.group = g;
    // Rows are in (trajectory, turn) order, so this row is the episode's next turn.
    const RewardOutcome outcome = classify(e);
    const bool correct = outcome == RewardOutcome::correct;
    const double speedup = correct ? e.speedup : 0.0;
    if (correct && ep.first_solved_turn < 0) ep.first_solved_turn = int64_t(ep.best_by_turns.size());
    ep.best_by_turns.push_back(std::max(ep.best_by_turns.empty() ? 0.0 : ep.best_by_turns.back(), speedup));
    ep.last_speedup = speedup;
    ep.hacked_turns += outcome == RewardOutcome::hacking;
    if (e.hacked()) {
      for (uint32_t bit = 0; bit < 32; ++bit)
        if (e.hacking_flags & (1u << bit)) ++report.hacking[hacking_flag_names(1u << bit)];
    } else if (e.error == EvalError::hacking) {
      ++report.hacking["other"];
    }
    const int level = r.task_levels[size_t(g)];
    for (int l : {level, 0}) reward_by_level[l].first += reward.data_ptr<double>()[i], ++reward_by_level[l].second;
  }
  // The levels of the tasks that have episodes (a batch cut to some tasks keeps every task's id).
  std::set<int> levels;
  for (const auto& [id, ep] : episodes) levels.insert(r.task_levels[size_t(ep.group)]);
  std::vector<int> order(levels.begin(), levels.end());
  order.push_back(0);
  for (int level : order) {
    LevelReport lr;
    lr.level = level;
    std::map<int64_t, std::pair<int64_t, int64_t>> per_task;  // group -> (episodes, solved)
    std::vector<const Episode*> in_level;
    size_t longest = 0;
    int64_t hacked = 0, level_turns = 0, solved = 0;
    double turns_to_success = 0;
    for (const auto& [id, ep] : episodes) {
      if (level != 0 && r.task_levels[size_t(ep.group)] != level) continue;
      auto& t = per_task[ep.group];
      ++t.first;
      t.second += ep.first_solved_turn >= 0;
      in_level.push_back(&ep);
      longest = std::max(longest, ep.best_by_turns.size());
      hacked += ep.hacked_turns;
      level_turns += int64_t(ep.best_by_turns.size());
      if (ep.first_solved_turn >= 0) ++solved, turns_to_success += double(ep.first_solved_turn + 1);
    }
    // Per episode: the best speedup within the first `turns` turns (all of them for a shorter one).
    const auto best_within = [&](size_t turns) {
      std::vector<double> best;
      for (const Episode* ep : in_level)
        best.push_back(ep->best_by_turns.empty() ? 0.0 : ep->best_by_turns[std::min(turns, ep->best_by_turns.size()) - 1]);
      return best;
    };
    std::vector<std::vector<double>> best_by_budget;  // [t - 1]: best_within(t)
    for (size_t t = 1; t <= longest; ++t) best_by_budget.push_back(best_within(t));
    const std::vector<double> best = best_within(std::max<size_t>(longest, 1));
    std::vector<double> last;
    for (const Episode* ep : in_level) last.push_back(ep->last_speedup);
    lr.tasks = int64_t(per_task.size());
    lr.episodes = int64_t(in_level.size());
    lr.mean_turns_to_success = solved ? turns_to_success / double(solved) : 0.0;
    lr.hacked_turn_share = level_turns ? double(hacked) / double(level_turns) : 0.0;
    for (int64_t k : pass_k) {
      double sum = 0;
      int64_t counted = 0;
      for (const auto& [g, t] : per_task)
        if (k <= t.first) sum += pass_at_k(t.first, t.second, k), ++counted;
      if (counted) lr.pass_at_k[k] = sum / double(counted);
    }
    for (double p : fast_p) {
      lr.fast_at_p[p] = fast_at_p(best, p);
      lr.fast_at_p_last[p] = fast_at_p(last, p);
      for (const std::vector<double>& within : best_by_budget) lr.fast_at_p_by_turns[p].push_back(fast_at_p(within, p));
    }
    const auto& rw = reward_by_level[level];
    lr.mean_reward = rw.second ? rw.first / double(rw.second) : 0.0;
    report.levels.push_back(lr);
  }
  return report;
}

namespace {

std::vector<int64_t> pass_k_of(const EvalConfig& e) {
  std::vector<int64_t> k;
  for (double v : e.pass_k) k.push_back(int64_t(v));
  return k;
}

}  // namespace

EvalReport summarize_task_episodes(const RolloutBatch& r, const TaskSet& tasks, const EvalConfig& e) {
  std::set<std::string> wanted;
  for (const Task& t : tasks.tasks) wanted.insert(t.id);
  std::set<std::string> seen;
  const torch::Tensor group = r.batch.group.cpu().contiguous();
  torch::Tensor keep = torch::zeros({r.batch.size()}, torch::kBool);
  auto kept = keep.accessor<bool, 1>();
  for (int64_t i = 0; i < r.batch.size(); ++i) {
    const std::string& id = r.task_ids[size_t(group.data_ptr<int64_t>()[i])];
    if (!wanted.count(id)) continue;
    kept[i] = true;
    seen.insert(id);
  }
  for (const std::string& id : wanted)
    require(seen.count(id), fmt::format("summarize_task_episodes: task '{}' has no episode in the rollouts", id));
  return summarize_rollouts(select_rollout_rows(r, keep), pass_k_of(e), e.fast_p);
}

RolloutBatch sample_evaluation_episodes(Policy& policy, const RolloutCollector& collector, const TaskSet& tasks,
                                        const EvalConfig& e) {
  require(!tasks.tasks.empty(), "evaluate_policy: the task set is empty (check eval.split and tasks.validation_fraction)");
  const SamplingOptions sampling = SamplingOptions().temp(e.temperature).topp(e.top_p);
  return collector.collect(policy, tasks.tasks, e.samples, sampling, uint64_t(e.seed));
}

EvalReport evaluate_policy(Policy& policy, const RolloutCollector& collector, const TaskSet& tasks,
                           const EvalConfig& e) {
  return summarize_rollouts(sample_evaluation_episodes(policy, collector, tasks, e), pass_k_of(e), e.fast_p);
}

namespace {

// The columns of a report's table, from its first row's k and p lists, after a label column and a
// count column ("tasks" of a level's row, a task's "level").
std::string table_header(const std::string& label, int width, const std::string& count, const LevelReport& first) {
  std::string out = fmt::format("{:<{}} {:>6} {:>9} {:>8}", label, width, count, "episodes", "reward");
  for (const auto& [k, v] : first.pass_at_k) out += fmt::format(" {:>8}", fmt::format("pass@{}", k));
  for (const auto& [p, v] : first.fast_at_p) out += fmt::format(" {:>8}", fmt::format("fast@{}", p));
  for (const auto& [p, v] : first.fast_at_p_last) out += fmt::format(" {:>10}", fmt::format("last@{}", p));
  return out + fmt::format(" {:>9} {:>7}\n", "to-solve", "hacked");
}

std::string table_row(const std::string& label, int width, int64_t count, const LevelReport& l) {
  std::string out = fmt::format("{:<{}} {:>6} {:>9} {:>8.3f}", label, width, count, l.episodes, l.mean_reward);
  for (const auto& kv : l.pass_at_k) out += fmt::format(" {:>8.3f}", kv.second);
  for (const auto& kv : l.fast_at_p) out += fmt::format(" {:>8.3f}", kv.second);
  for (const auto& kv : l.fast_at_p_last) out += fmt::format(" {:>10.3f}", kv.second);
  return out + fmt::format(" {:>9.2f} {:>7.3f}\n", l.mean_turns_to_success, l.hacked_turn_share);
}

// One report row's metrics under `prefix`, each key ending in `/suffix` (a level) or none.
void add_row_metrics(Metrics& m, const std::string& prefix, const std::string& suffix, const LevelReport& l) {
  const auto key = [&](const std::string& name) { return prefix + "/" + name + (suffix.empty() ? "" : "/" + suffix); };
  for (const auto& [k, v] : l.pass_at_k) m[key(fmt::format("pass@{}", k))] = v;
  for (const auto& [p, v] : l.fast_at_p) m[key(fmt::format("fast@{}", p))] = v;
  for (const auto& [p, v] : l.fast_at_p_last) m[key(fmt::format("fast@{}_last_turn", p))] = v;
  for (const auto& [p, curve] : l.fast_at_p_by_turns)
    for (size_t t = 0; t < curve.size(); ++t) m[key(fmt::format("fast@{}_within_{}_turns", p, t + 1))] = curve[t];
  m[key("reward")] = l.mean_reward;
  m[key("turns_to_success")] = l.mean_turns_to_success;
  m[key("hacked_turn_share")] = l.hacked_turn_share;
}

}  // namespace

std::vector<TaskReport> summarize_each_task(const RolloutBatch& r, const TaskSet& tasks, const EvalConfig& e) {
  std::vector<TaskReport> out;
  for (const Task& task : tasks.tasks) {
    const TaskSet one{{task}};
    TaskReport row{task.id, summarize_task_episodes(r, one, e).levels.back()};
    row.stats.level = task.level;
    out.push_back(std::move(row));
  }
  return out;
}

std::string task_table(const std::vector<TaskReport>& tasks) {
  if (tasks.empty()) return "";
  int width = 8;
  for (const TaskReport& t : tasks) width = std::max(width, int(t.task.size()));
  std::string out = table_header("task", width, "level", tasks.front().stats);
  for (const TaskReport& t : tasks) out += table_row(t.task, width, t.stats.level, t.stats);
  return out;
}

Metrics task_metrics(const std::vector<TaskReport>& tasks, const std::string& prefix) {
  Metrics m;
  for (const TaskReport& t : tasks) add_row_metrics(m, prefix + "/task/" + t.task, "", t.stats);
  return m;
}

std::string EvalReport::to_text() const {
  std::string out;
  if (levels.empty()) out = fmt::format("{:<8} {:>6} {:>9} {:>8}\n", "level", "tasks", "episodes", "reward");
  else out = table_header("level", 8, "tasks", levels.front());
  for (const LevelReport& l : levels)
    out += table_row(l.level == 0 ? std::string("all") : std::to_string(l.level), 8, l.tasks, l);
  // Sequential test-time scaling, all levels: fast@p of the best over the first t turns.
  if (!levels.empty() && !levels.back().fast_at_p_by_turns.empty() &&
      levels.back().fast_at_p_by_turns.begin()->second.size() > 1)
    for (const auto& [p, curve] : levels.back().fast_at_p_by_turns)
      out += fmt::format("fast@{} best over the first t turns: {}\n", p,
                         fmt::join(curve.begin(), curve.end(), " "));
  out += fmt::format("reward hacking ({} turns evaluated):", turns);
  if (hacking.empty()) out += " none detected";
  for (const auto& [name, count] : hacking) out += fmt::format(" {}={}", name, count);
  return out + "\n";
}

Metrics EvalReport::to_metrics(const std::string& prefix) const {
  Metrics m;
  for (const LevelReport& l : levels) add_row_metrics(m, prefix, l.level == 0 ? "all" : fmt::format("level{}", l.level), l);
  for (const auto& [name, count] : hacking) m[prefix + "/hacking/" + name] = double(count);
  m[prefix + "/turns"] = double(turns);
  return m;
}

}  // namespace turnrl
