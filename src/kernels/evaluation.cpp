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
    bool solved = false;
    double best_speedup = 0;
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
    if (classify(e) == RewardOutcome::correct) {
      ep.solved = true;
      ep.best_speedup = std::max(ep.best_speedup, e.speedup);
    }
    if (e.hacked()) {
      for (uint32_t bit = 0; bit < 32; ++bit)
        if (e.hacking_flags & (1u << bit)) ++report.hacking[hacking_flag_names(1u << bit)];
    } else if (e.error == EvalError::hacking) {
      ++report.hacking["other"];
    }
    const int level = r.task_levels[size_t(g)];
    for (int l : {level, 0}) reward_by_level[l].first += reward.data_ptr<double>()[i], ++reward_by_level[l].second;
  }
  std::set<int> levels;
  for (int l : r.task_levels) levels.insert(l);
  std::vector<int> order(levels.begin(), levels.end());
  order.push_back(0);
  for (int level : order) {
    LevelReport lr;
    lr.level = level;
    std::map<int64_t, std::pair<int64_t, int64_t>> per_task;  // group -> (episodes, solved)
    std::vector<double> best;
    for (const auto& [id, ep] : episodes) {
      if (level != 0 && r.task_levels[size_t(ep.group)] != level) continue;
      auto& t = per_task[ep.group];
      ++t.first;
      t.second += ep.solved;
      best.push_back(ep.best_speedup);
    }
    lr.tasks = int64_t(per_task.size());
    lr.episodes = int64_t(best.size());
    for (int64_t k : pass_k) {
      double sum = 0;
      int64_t counted = 0;
      for (const auto& [g, t] : per_task)
        if (k <= t.first) sum += pass_at_k(t.first, t.second, k), ++counted;
      if (counted) lr.pass_at_k[k] = sum / double(counted);
    }
    for (double p : fast_p) lr.fast_at_p[p] = fast_at_p(best, p);
    const auto& rw = reward_by_level[level];
    lr.mean_reward = rw.second ? rw.first / double(rw.second) : 0.0;
    report.levels.push_back(lr);
  }
  return report;
}

EvalReport evaluate_policy(Policy& policy, const RolloutCollector& collector, const TaskSet& tasks,
                           const EvalConfig& e) {
  require(!tasks.tasks.empty(), "evaluate_policy: the task set is empty (check eval.split and tasks.validation_fraction)");
  const SamplingOptions sampling = SamplingOptions().temp(e.temperature).topp(e.top_p);
  const RolloutBatch r = collector.collect(policy, tasks.tasks, e.samples, sampling, uint64_t(e.seed));
  std::vector<int64_t> k;
  for (double v : e.pass_k) k.push_back(int64_t(v));
  return summarize_rollouts(r, k, e.fast_p);
}

std::string EvalReport::to_text() const {
  std::string out = fmt::format("{:<8} {:>6} {:>9} {:>8}", "level", "tasks", "episodes", "reward");
  if (!levels.empty()) {
    for (const auto& [k, v] : levels.front().pass_at_k) out += fmt::format(" {:>8}", fmt::format("pass@{}", k));
    for (const auto& [p, v] : levels.front().fast_at_p) out += fmt::format(" {:>8}", fmt::format("fast@{}", p));
  }
  out += "\n";
  for (const LevelReport& l : levels) {
    out += fmt::format("{:<8} {:>6} {:>9} {:>8.3f}", l.level == 0 ? std::string("all") : std::to_string(l.level), l.tasks,
                       l.episodes, l.mean_reward);
    for (const auto& kv : l.pass_at_k) out += fmt::format(" {:>8.3f}", kv.second);
    for (const auto& kv : l.fast_at_p) out += fmt::format(" {:>8.3f}", kv.second);
    out += "\n";
  }
  out += fmt::format("reward hacking ({} turns evaluated):", turns);
  if (hacking.empty()) out += " none detected";
  for (const auto& [name, count] : hacking) out += fmt::format(" {}={}", name, count);
  return out + "\n";
}

Metrics EvalReport::to_metrics() const {
  Metrics m;
  for (const LevelReport& l : levels) {
    const std::string level = l.level == 0 ? "all" : fmt::format("level{}", l.level);
    for (const auto& [k, v] : l.pass_at_k) m[fmt::format("eval/pass@{}/{}", k, level)] = v;
    for (const auto& [p, v] : l.fast_at_p) m[fmt::format("eval/fast@{}/{}", p, level)] = v;
    m[fmt::format("eval/reward/{}", level)] = l.mean_reward;
  }
  for (const auto& [name, count] : hacking) m["eval/hacking/" + name] = double(count);
  m["eval/turns"] = double(turns);
  return m;
}

}  // namespace turnrl
