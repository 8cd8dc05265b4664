#include "scalar_reference.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

namespace turnrl::reference {
namespace {

// Row indices of each trajectory, ordered by turn.
std::map<int64_t, std::map<int64_t, size_t>> by_trajectory(const std::vector<Turn>& rows) {
  std::map<int64_t, std::map<int64_t, size_t>> out;
  for (size_t i = 0; i < rows.size(); ++i) out[rows[i].traj][rows[i].turn] = i;
  return out;
}

double masked_reward(const Turn& t) { return t.valid ? t.reward : 0.0; }

}  // namespace

std::vector<double> returns(const std::vector<Turn>& rows, Returns mode, double gamma, bool unbiased_shaping) {
  std::vector<double> g(rows.size(), 0.0);
  for (const auto& [traj, turns] : by_trajectory(rows)) {
    std::vector<size_t> idx;
    for (const auto& [t, i] : turns) idx.push_back(i);
    const size_t k = idx.size();
    std::vector<double> r(k);
    for (size_t t = 0; t < k; ++t) r[t] = masked_reward(rows[idx[t]]);
    std::vector<double> s(k, 0.0);
    if (mode == Returns::reward_to_go) {
      s = r;
    } else if (mode == Returns::outcome) {
      s[k - 1] = r[k - 1];
    } else {
      if (unbiased_shaping) r[k - 1] *= (1.0 - gamma);
      s[0] = r[0];
      for (size_t t = 1; t < k; ++t) s[t] = r[t] - r[t - 1];
    }
    double running = 0.0;
    for (size_t t = k; t-- > 0;) {
      running = s[t] + gamma * running;
      g[idx[t]] = running;
    }
  }
  return g;
}

namespace {

// Advantages of the members m (row indices) of one baseline group, scored on `score`.
std::vector<double> per_group_rule(const std::string& name, const std::vector<double>& score,
                                   const std::vector<size_t>& m, bool singleton_raw, double eps) {
  const size_t n = m.size();
  std::vector<double> a(n, 0.0);
  double sum = 0.0;
  for (size_t i : m) sum += score[i];
  if (n == 1) {
    if (!singleton_raw) return a;
    a[0] = name == "grpo" ? score[m[0]] / (1.0 + eps) : score[m[0]];
    return a;
  }
  const double mean = sum / double(n);
  double ss = 0.0;
  for (size_t i : m) ss += (score[i] - mean) * (score[i] - mean);
  double std = std::sqrt(ss / double(n - 1));
  if (std < 1e-6) std = 1.0;
  for (size_t j = 0; j < n; ++j) {
    const double x = score[m[j]];
    if (name == "trloo" || name == "rloo") {
      double others = 0.0;
      for (size_t l = 0; l < n; ++l)
        if (l != j) others += score[m[l]];
      a[j] = x - others / double(n - 1);
    } else if (name == "grpo") {
      a[j] = (x - mean) / (std + eps);
    } else {
      a[j] = x - mean;
    }
  }
  return a;
}

}  // namespace

std::vector<double> advantage(const std::string& name, const std::vector<Turn>& rows, const std::vector<double>& g,
                              bool trajectory_grouping, bool singleton_raw, double std_epsilon) {
  std::vector<double> adv(rows.size(), 0.0);
  if (name == "reinforce") {
    for (size_t i = 0; i < rows.size(); ++i) adv[i] = rows[i].valid ? g[i] : 0.0;
    return adv;
  }
  if (name == "reinforce_pp") {
    double sum = 0.0, n = 0.0;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) sum += g[i], n += 1;
    if (n < 2) return advantage("reinforce", rows, g, false, true, 0.0);
    const double mean = sum / n;
    double ss = 0.0;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) ss += (g[i] - mean) * (g[i] - mean);
    const double var = ss / (n - 1);
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) adv[i] = (g[i] - mean) / std::sqrt(var + 1e-8);
    return adv;
  }
  if (name != "trloo" && name != "rloo" && name != "grpo" && name != "dr_grpo")
    throw std::invalid_argument("reference::advantage: unknown estimator " + name);
  const bool per_trajectory = name == "rloo" || (name != "trloo" && trajectory_grouping);
  if (!per_trajectory) {
    std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> groups;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) groups[{rows[i].group, rows[i].turn}].push_back(i);
    for (const auto& [key, m] : groups) {
      const std::vector<double> a = per_group_rule(name, g, m, singleton_raw, std_epsilon);
      for (size_t j = 0; j < m.size(); ++j) adv[m[j]] = a[j];
    }
    return adv;
  }
  // Trajectory level: the head row (turn 0) carries the trajectory's score; a trajectory whose
  // head is masked takes no part and gets 0 everywhere.
  std::map<int64_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].valid && rows[i].turn == 0) groups[rows[i].group].push_back(i);
  std::map<int64_t, double> traj_adv;
  for (const auto& [group, m] : groups) {
    const std::vector<double> a = per_group_rule(name, g, m, singleton_raw, std_epsilon);
    for (size_t j = 0; j < m.size(); ++j) traj_adv[rows[m[j]].traj] = a[j];
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = traj_adv.find(rows[i].traj);
    adv[i] = rows[i].valid && it != traj_adv.end() ? it->second : 0.0;
  }
  return adv;
}

std::vector<double> gae(const std::vector<Turn>& rows, const std::vector<double>& values, double gamma, double lambda,
                        bool whiten) {
  std::vector<double> adv(rows.size(), 0.0);
  for (const auto& [traj, turns] : by_trajectory(rows)) {
    double next_value = 0.0, next_adv = 0.0;
    for (auto it = turns.rbegin(); it != turns.rend(); ++it) {
      const size_t i = it->second;
      const double delta = masked_reward(rows[i]) + gamma * next_value - values[i];
      next_adv = delta + gamma * lambda * next_adv;
      next_value = values[i];
      adv[i] = next_adv;
    }
  }
  if (whiten) return advantage("reinforce_pp", rows, adv, false, true, 0.0);
  for (size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].valid) adv[i] = 0.0;
  return adv;
}

}  // namespace turnrl::reference
